package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/muesli/termenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// teatest waits for a SIGINT on a goroutine that outlives the test model.
		goleak.IgnoreTopFunction("github.com/charmbracelet/x/exp/teatest.NewTestModel.func2"),
		goleak.IgnoreTopFunction("os/signal.signal_recv"),
	)
}

// base is the fixed "now" of the Update tests and the golden files.
var base = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// errRedisDown is what the fake returns while "Redis is down".
var errRedisDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// fakeSource is a Source whose answers the test sets, and which records the actions.
type fakeSource struct {
	mu        sync.Mutex
	snap      Snapshot
	snapErr   error
	snapCalls int
	heads     map[PartitionRef]HeadDetail
	headErr   error
	headCalls []PartitionRef
	actErr    error
	actions   []actionCall
	pauses    []pauseCall
	dlqs      []DLQInfo
	audit     []AuditRecord
	listCalls int
	pingErr   error // what Ping answers
}

// Ping answers pingErr: the fake is a Pinger.
func (f *fakeSource) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pingErr
}

func (f *fakeSource) DLQs(context.Context) ([]DLQInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listCalls++
	return append([]DLQInfo(nil), f.dlqs...), nil
}

func (f *fakeSource) Audit(_ context.Context, limit int) ([]AuditRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listCalls++
	return append([]AuditRecord(nil), f.audit[:min(limit, len(f.audit))]...), nil
}

// sampleLists fills the fake's DLQ and audit answers.
func sampleLists(f *fakeSource) {
	f.dlqs = []DLQInfo{
		{Stream: "order:client-3", Length: 4, OldestID: "1741942000000-0", NewestID: "1741944000000-2", OldestAge: 40 * time.Minute},
		{Stream: "order:client-12", Length: 1, OldestID: "1741944300000-0", NewestID: "1741944300000-0", OldestAge: 9 * time.Minute},
	}
	f.audit = []AuditRecord{
		{Time: base.Add(-2 * time.Minute), User: "alice", Host: "ops-1", Command: "head dlq", Stream: "order:client-3",
			Handler: "projector", EntryID: "1741944000000-2", Outcome: "ok", Detail: "from seqctl top"},
		{Time: base.Add(-5 * time.Minute), User: "bob", Host: "ops-2", Command: "head skip", Stream: "order:client-3",
			Handler: "projector", EntryID: "1741944000000-1", Outcome: "head_moved", Detail: "engine: head moved: expected 1741944000000-1"},
	}
}

type actionCall struct {
	Act      string
	Ref      PartitionRef
	ExpectID string
}

func newFake(s Snapshot) *fakeSource {
	return &fakeSource{snap: s, heads: map[PartitionRef]HeadDetail{}}
}

func (f *fakeSource) set(s Snapshot, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap, f.snapErr = s, err
}

func (f *fakeSource) Snapshot(ctx context.Context) (Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapCalls++
	if f.snapErr != nil {
		return Snapshot{}, f.snapErr
	}
	s := f.snap
	s.Partitions = append([]Partition(nil), f.snap.Partitions...)
	s.Instances = append([]Instance(nil), f.snap.Instances...)
	return s, nil
}

func (f *fakeSource) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapCalls
}

func (f *fakeSource) Head(ctx context.Context, p PartitionRef) (HeadDetail, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.headCalls = append(f.headCalls, p)
	if f.headErr != nil {
		return HeadDetail{}, f.headErr
	}
	return f.heads[p], nil
}

func (f *fakeSource) act(name string, p PartitionRef, expectID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, actionCall{name, p, expectID})
	return f.actErr
}

func (f *fakeSource) Skip(ctx context.Context, p PartitionRef, id string) error {
	return f.act("skip", p, id)
}

func (f *fakeSource) MoveToDLQ(ctx context.Context, p PartitionRef, id string) error {
	return f.act("dlq", p, id)
}

func (f *fakeSource) Retry(ctx context.Context, p PartitionRef, id string) error {
	return f.act("retry", p, id)
}

// pauseCall is one Pause or Resume of the fake.
type pauseCall struct {
	Act    string
	Ref    PartitionRef
	Reason string
}

func (f *fakeSource) Pause(ctx context.Context, p PartitionRef, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, pauseCall{"pause", p, reason})
	return f.actErr
}

func (f *fakeSource) Resume(ctx context.Context, p PartitionRef) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, pauseCall{"resume", p, ""})
	return f.actErr
}

// fakeClock is the model's time in tests: Now is set by the test, and a Tick command
// returns tickScheduled at once instead of sleeping (the test sends tickMsg itself).
type fakeClock struct{ now time.Time }

type tickScheduled time.Duration

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Tick(d time.Duration) tea.Cmd {
	return func() tea.Msg { return tickScheduled(d) }
}

// harness drives a model synchronously: every command a message returns is run at once
// and its message fed back, until nothing is left (ticks are recorded, not slept).
type harness struct {
	t     testing.TB
	m     *model
	src   *fakeSource
	clk   *fakeClock
	quit  bool
	ticks int
}

func newHarness(t testing.TB, src *fakeSource, opts Options, w, h int) *harness {
	t.Helper()
	opts.Source = src
	clk := &fakeClock{now: base}
	m := newModel(context.Background(), opts, newRenderer(io.Discard, true))
	m.clock = clk
	hs := &harness{t: t, m: m, src: src, clk: clk}
	hs.send(tea.WindowSizeMsg{Width: w, Height: h})
	hs.run(m.Init())
	return hs
}

func (h *harness) send(msg tea.Msg) {
	h.t.Helper()
	_, cmd := h.m.Update(msg)
	h.run(cmd)
}

func (h *harness) run(cmd tea.Cmd) {
	h.t.Helper()
	queue := []tea.Cmd{cmd}
	for steps := 0; len(queue) > 0; steps++ {
		if steps > 1000 {
			h.t.Fatal("harness: command loop does not settle")
		}
		c := queue[0]
		queue = queue[1:]
		if c == nil {
			continue
		}
		switch msg := c().(type) {
		case nil:
		case tea.BatchMsg:
			queue = append(queue, msg...)
		case tickScheduled:
			h.ticks++
		case tea.QuitMsg:
			h.quit = true
		default:
			_, next := h.m.Update(msg)
			queue = append(queue, next)
		}
	}
}

// advance moves the clock by d and delivers the tick that fires then.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clk.now = h.clk.now.Add(d)
	h.send(tickMsg(h.clk.now))
}

// press sends key presses by name: "enter", "esc", "tab", "up", "down", "pgup", "pgdown",
// "home", "end", "ctrl+c", or runes typed as they are.
func (h *harness) press(keys ...string) {
	h.t.Helper()
	for _, k := range keys {
		h.send(keyMsg(k))
	}
}

func keyMsg(k string) tea.KeyMsg {
	special := map[string]tea.KeyType{
		"enter": tea.KeyEnter, "esc": tea.KeyEsc, "tab": tea.KeyTab, "up": tea.KeyUp,
		"down": tea.KeyDown, "pgup": tea.KeyPgUp, "pgdown": tea.KeyPgDown, "home": tea.KeyHome,
		"end": tea.KeyEnd, "ctrl+c": tea.KeyCtrlC, "backspace": tea.KeyBackspace,
	}
	if t, ok := special[k]; ok {
		return tea.KeyMsg{Type: t}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

// typeText types s one rune at a time.
func (h *harness) typeText(s string) {
	h.t.Helper()
	for _, r := range s {
		h.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
}

// keys lists the partition keys of the table rows, in order ("category:key/handler"
// would be noise: the fixtures use distinct keys).
func (h *harness) keys() []string {
	var out []string
	for _, i := range h.m.rows {
		out = append(out, h.m.snap.Partitions[i].Key)
	}
	return out
}

// selected is the key under the cursor, "" when there is none.
func (h *harness) selected() string { return h.m.selected() }

func (m *model) selected() string {
	p, _ := m.cursorPartition() // the zero Partition when there is none
	return p.Key
}

// colour makes the model draw in colour, in the given profile, as on a terminal.
func (h *harness) colour(p termenv.Profile) {
	r := newRenderer(io.Discard, false)
	r.SetColorProfile(p)
	h.m.st = newStyles(r)
	h.m.help.Styles = h.m.st.help
}

// part is a fixture partition of category "order", handler "projector".
func part(key, state string, lag int64, headAge time.Duration) Partition {
	p := Partition{
		Category: "order", Key: key, Stream: "order:" + key, Handler: "projector",
		Owner: "inst-a", Generation: 7, LeaseTTL: 12400 * time.Millisecond,
		Lag: lag, HeadAge: headAge, State: state,
	}
	switch state {
	case StateUnowned:
		p.Owner, p.LeaseTTL = "", 0
	case StateHalted:
		p.HaltedEntryID = fmt.Sprintf("1741944000000-%d", lag)
		p.Pending = 1
	case StateIdle:
		p.Lag, p.HeadAge = 0, 0
	}
	return p
}

// fixture is a small deployment: three instances (one stale) and eight partitions, two of
// them halted when halted is true.
func fixture(halted bool) Snapshot {
	ps := []Partition{
		part("client-1", StateRunning, 120, 2*time.Second),
		part("client-2", StateRunning, 4, 300*time.Millisecond),
		part("client-3", StateIdle, 0, 0),
		part("client-4", StateRunning, 9800, 3*time.Minute+12*time.Second),
		part("client-5", StateUnowned, 37, 45*time.Second),
		part("eu-west", StateRunning, 56, 9*time.Second),
		part("acme-corp", StateIdle, 0, 0),
		part("globex", StateRunning, 1500, time.Minute),
	}
	ps[5].Category, ps[5].Stream, ps[5].Handler, ps[5].Owner = "invoice", "invoice:eu-west", "mailer", "inst-b"
	ps[7].Owner = "inst-b"
	if halted {
		ps[2] = part("client-3", StateHalted, 14, 26*time.Minute)
		ps[6] = part("acme-corp", StateHalted, 3, 2*time.Hour+5*time.Minute)
	}
	for i := range ps {
		ps[i].Handled = int64(1000 * (i + 1))
	}
	return Snapshot{
		Addr: "127.0.0.1:6379",
		Instances: []Instance{
			{ID: "inst-b", Host: "worker-2", PID: 4242, Owned: 2, LastHeartbeat: base.Add(-2 * time.Second), SlotsInUse: 2, SlotsLimit: 4},
			{ID: "inst-a", Host: "worker-1", PID: 1717, Owned: 6, LastHeartbeat: base.Add(-800 * time.Millisecond), SlotsInUse: 4, SlotsLimit: 4, SlotsWaiting: 37},
			{ID: "inst-c", Host: "worker-3", PID: 99, Owned: 0, LastHeartbeat: base.Add(-2 * time.Minute), SlotsInUse: 1, SlotsLimit: 4, SlotsWaiting: 5},
		},
		Partitions: ps,
		Taken:      base,
	}
}

// bigSnapshot is n partitions over a few categories and handlers, 1 in 500 halted.
func bigSnapshot(n int) Snapshot {
	ps := make([]Partition, n)
	states := []string{StateRunning, StateRunning, StateIdle, StateUnowned}
	for i := range ps {
		st := states[i%len(states)]
		if i%500 == 0 {
			st = StateHalted
		}
		p := part(fmt.Sprintf("tenant-%05d", i), st, int64((i*7919)%20000), time.Duration(i%3600)*time.Second)
		p.Category = []string{"order", "invoice", "shipment"}[i%3]
		p.Handler = []string{"projector", "mailer"}[i%2]
		p.Handled = int64(i * 10)
		ps[i] = p
	}
	return Snapshot{Addr: "127.0.0.1:6379", Partitions: ps, Taken: base,
		Instances: []Instance{{ID: "inst-a", Host: "worker-1", PID: 1, Owned: n / 2, LastHeartbeat: base}}}
}
