package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/muesli/termenv"
)

// viewCase sets up a model through the harness, then its View is compared with
// testdata/TestView/<name>_<w>x<h>.golden. `go test ./pkg/tui -update` rewrites them.
type viewCase struct {
	name  string
	opts  Options
	snap  func() Snapshot
	setup func(h *harness)
}

// settle gives the fixture a second snapshot one second later (so the events/s rate is
// known) and looks at it 400 ms after it arrived.
func settle(h *harness) {
	s := h.src.snap
	s.Taken = s.Taken.Add(time.Second)
	s.Partitions = append([]Partition(nil), s.Partitions...)
	for i := range min(len(s.Partitions), 8) {
		s.Partitions[i].Handled += int64(37 * (i + 1))
	}
	h.src.set(s, nil)
	h.advance(time.Second)
	h.clk.now = h.clk.now.Add(400 * time.Millisecond)
}

func haltedHead(h *harness) {
	h.src.heads[PartitionRef{"order", "client-3", "projector"}] = HeadDetail{
		EntryID: "1741944000000-14", Stream: "order:client-3", Lane: 0,
		EventType: "OrderPlaced", EventID: "6f1c2a9e-5b7d-4c1e-9a0b-3d2f8e7c6b5a",
		Payload:  `{"order_id":"o-1042","client_id":"client-3","lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"total":{"amount":"129.90","currency":"EUR"},"note":"deliver after 6pm"}`,
		Attempts: 5,
		Error:    "POST http://billing.internal/hooks/order: 500 Internal Server Error: upstream timeout after 30s",
		Since:    base.Add(-26 * time.Minute),
		Lanes: []LaneInfo{
			{Stream: "order:client-3", Length: 14, Pending: 1},
			{Stream: "order:client-3:backfill", Length: 0, Pending: 0},
		},
	}
}

var viewCases = []viewCase{
	{name: "normal", snap: func() Snapshot { return fixture(false) }, setup: settle},
	{name: "halted", snap: func() Snapshot { return fixture(true) }, setup: settle},
	{name: "redis_down", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		settle(h)
		h.src.set(Snapshot{}, fmt.Errorf("engine: redis unavailable: %w", errRedisDown))
		h.advance(600 * time.Millisecond) // the refresh due at +2 s fails
		h.clk.now = h.clk.now.Add(300 * time.Millisecond)
	}},
	{name: "detail", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		haltedHead(h)
		settle(h)
		h.press("enter")
	}},
	{name: "help", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		settle(h)
		h.press("?")
	}},
	{name: "dlq", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		sampleLists(h.src)
		settle(h)
		h.press("tab", "tab", "j")
	}},
	{name: "audit", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		sampleLists(h.src)
		settle(h)
		h.press("tab", "tab", "tab")
	}},
}

// Extra states, at 80x24 only.
var viewCasesSmall = []viewCase{
	{name: "dialog", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		settle(h)
		h.press("d")
	}},
	{name: "instances", snap: func() Snapshot { return fixture(false) }, setup: func(h *harness) {
		settle(h)
		h.press("tab", "j")
	}},
	{name: "filter", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		settle(h)
		h.press("/")
		h.typeText("client")
	}},
	{name: "readonly_paused", opts: Options{ReadOnly: true}, snap: func() Snapshot { return fixture(true) },
		setup: func(h *harness) {
			settle(h)
			h.press("p", "s")
		}},
	{name: "many", snap: func() Snapshot { return bigSnapshot(10_000) }, setup: func(h *harness) {
		settle(h)
		h.press("pgdown", "j")
	}},
	{name: "sorted_by_owner_reversed", snap: func() Snapshot { return fixture(false) }, setup: func(h *harness) {
		settle(h)
		h.press("o", "o", "o", "o", "O")
	}},
	{name: "filter_field_regex", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		settle(h)
		h.press("/")
		h.typeText("owner:inst-a key:/^client-[1-3]$/")
		h.press("enter")
	}},
	{name: "first_refresh_failed", opts: Options{Addr: "redis.internal:6379"},
		snap: func() Snapshot { return Snapshot{} }, setup: func(h *harness) {}},
	{name: "paused", snap: pausedFixture, setup: settle},
	{name: "pause_dialog", snap: pausedFixture, setup: func(h *harness) {
		settle(h)
		h.cursorOn("client-4")
		h.press("P")
		h.typeText("billing of client-4 is down, OPS-42")
	}},
	{name: "throttled", snap: throttledFixture, setup: settle},
	{name: "refresh_slow", snap: func() Snapshot { return fixture(true) }, setup: func(h *harness) {
		settle(h)
		h.src.set(Snapshot{}, fmt.Errorf("engine: redis unavailable: %w", errRefreshTimeout))
		h.advance(600 * time.Millisecond) // the refresh due at +2 s runs out of time
	}},
	{name: "sampled", snap: sampledFixture, setup: settle},
	{name: "resume_dialog", snap: pausedFixture, setup: func(h *harness) {
		settle(h)
		h.cursorOn("client-1")
		h.press("U")
	}},
}

// Extra states, at 120x40 only (at 80 columns the GEN column is dropped).
var viewCasesLarge = []viewCase{
	{name: "generations", snap: generationsSnapshot, setup: settle},
	{name: "throttled_detail", snap: throttledFixture, setup: func(h *harness) {
		settle(h)
		h.cursorOn("client-2")
		h.press("enter")
	}},
	{name: "paused_detail", snap: pausedFixture, setup: func(h *harness) {
		settle(h)
		h.cursorOn("client-2")
		h.press("enter")
	}},
}

// generationsSnapshot is two partitions alike but for their keys and their generations,
// which are Redis times in microseconds that differ only in their last digits.
func generationsSnapshot() Snapshot {
	s := fixture(false)
	a, b := part("client-1", StateRunning, 120, 2*time.Second), part("client-2", StateRunning, 120, 2*time.Second)
	a.Generation, b.Generation = 1796123456789012, 1796123456789047
	s.Partitions = []Partition{a, b}
	return s
}

func TestView(t *testing.T) {
	type sized struct {
		viewCase
		w, h int
	}
	var all []sized
	for _, c := range viewCases {
		all = append(all, sized{c, 80, 24}, sized{c, 120, 40})
	}
	for _, c := range viewCasesSmall {
		all = append(all, sized{c, 80, 24})
	}
	for _, c := range viewCasesLarge {
		all = append(all, sized{c, 120, 40})
	}
	for _, c := range all {
		t.Run(fmt.Sprintf("%s_%dx%d", c.name, c.w, c.h), func(t *testing.T) {
			src := newFake(c.snap())
			if c.name == "first_refresh_failed" {
				src.snapErr = errRedisDown
			}
			h := newHarness(t, src, c.opts, c.w, c.h)
			c.setup(h)
			out := h.m.View()
			checkScreen(t, out, c.w, c.h)
			golden.RequireEqual(t, []byte(out+"\n"))
		})
	}
}

// Two generations that differ only in their last digits look different in the table at
// 120 columns; the detail pane shows the whole number.
func TestViewTellsGenerationsApart(t *testing.T) {
	h := newHarness(t, newFake(generationsSnapshot()), Options{}, 120, 40)
	settle(h)
	rows := map[string]string{}
	for _, l := range strings.Split(h.m.View(), "\n") {
		for _, key := range []string{"client-1", "client-2"} {
			if strings.Contains(l, " "+key+" ") {
				rows[key] = strings.Replace(l[gutterWidth:], key, "KEY", 1) // without the cursor mark
			}
		}
	}
	if len(rows) != 2 {
		t.Fatalf("rows of client-1 and client-2 not found:\n%s", h.m.View())
	}
	if rows["client-1"] == rows["client-2"] {
		t.Errorf("the rows of generations 1796123456789012 and 1796123456789047 differ only by key:\n%s\n%s", rows["client-1"], rows["client-2"])
	}
	h.press("enter") // client-1, the first row
	if out := h.m.View(); !strings.Contains(out, "1796123456789012") {
		t.Errorf("the detail pane does not show the whole generation 1796123456789012:\n%s", out)
	}
}

// checkScreen: exactly h lines, none wider than w, and no escape sequence (colour off).
func checkScreen(t testing.TB, out string, w, h int) {
	t.Helper()
	if n := strings.Count(out, "\n") + 1; n != h {
		t.Errorf("%d lines, want %d", n, h)
	}
	checkScreenWidth(t, out, w)
	if strings.Contains(out, "\x1b") {
		t.Error("escape sequences with NoColor")
	}
}

// TestViewColour checks that colour mode does colour (halted rows, the banner) while
// keeping the same text.
func TestViewColour(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24)
	h.colour(termenv.ANSI256)
	src.set(Snapshot{}, errRedisDown)
	h.advance(time.Second)
	out := h.m.View()
	if !strings.Contains(out, "\x1b[") {
		t.Fatal("no escape sequences in colour mode")
	}
	plain := ansi.Strip(out)
	for _, s := range []string{"HALTED", "REDIS UNREACHABLE", "client-3"} {
		if !strings.Contains(plain, s) {
			t.Errorf("colour view lacks %q", s)
		}
	}
	checkScreenWidth(t, out, 80)
}

// checkScreenWidth: no line wider than w.
func checkScreenWidth(t testing.TB, out string, w int) {
	t.Helper()
	for i, l := range strings.Split(out, "\n") {
		if n := ansi.StringWidth(l); n > w {
			t.Errorf("line %d is %d cells wide, more than %d: %q", i+1, n, w, l)
		}
	}
}

// "partitions" counts partition streams, as the CLI and seqctl dev do; "rows" counts the
// table's (handler, partition) rows.
func TestPartitionsCountStreams(t *testing.T) {
	s := fixture(false)
	second := s.Partitions[0]
	second.Handler = "mailer"
	s.Partitions = append(s.Partitions, second)
	h := newHarness(t, newFake(s), Options{}, 120, 40)
	if h.m.sum.streams != 8 || h.m.sum.total != 9 {
		t.Fatalf("streams %d rows %d, want 8 and 9", h.m.sum.streams, h.m.sum.total)
	}
	if v := h.m.View(); !strings.Contains(v, "partitions 8  rows 9") {
		t.Errorf("header lacks \"partitions 8  rows 9\":\n%s", v)
	}
}

// The header sums the handler slots of the live instances; one unbounded instance makes
// the total unbounded, shown without a limit.
func TestHeaderSlotQueue(t *testing.T) {
	for _, tt := range []struct {
		name      string
		instances []Instance
		want      string
	}{
		{"bounded", []Instance{
			{ID: "a", LastHeartbeat: base, SlotsInUse: 4, SlotsLimit: 4, SlotsWaiting: 4996},
			{ID: "b", LastHeartbeat: base, SlotsInUse: 3, SlotsLimit: 4, SlotsWaiting: 1},
		}, "slots 7/8  waiting 4,997"},
		{"one unbounded", []Instance{
			{ID: "a", LastHeartbeat: base, SlotsInUse: 4, SlotsLimit: 4},
			{ID: "go", LastHeartbeat: base, SlotsInUse: 12},
		}, "slots 16  waiting 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := fixture(false)
			s.Instances = tt.instances
			h := newHarness(t, newFake(s), Options{}, 160, 30)
			if v := h.m.View(); !strings.Contains(v, tt.want) {
				t.Errorf("header lacks %q:\n%s", tt.want, strings.Join(strings.SplitN(v, "\n", 3)[:2], "\n"))
			}
		})
	}
}
