package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// A busy partition reads its next batch with a plain XREADGROUP in the same transaction
// as the fenced drain script (worker.drain). These tests break that read's three
// preconditions for real, in the middle of a backlog, and check that nothing runs out of
// order, twice, or without the fence: an older entry pending, a lease taken by another
// owner, an emptied script cache.

// gatedRecorder records every handled event and holds the first attempt of one sequence
// number until released.
type gatedRecorder struct {
	gate     int
	poison   map[int]bool // sequence numbers whose handler always fails
	reached  chan struct{}
	release  chan struct{}
	once     sync.Once
	mu       sync.Mutex
	runs     []recordedRun
	inFlight int
	overlaps int
}

type recordedRun struct {
	seq, attempt int
	gen          int64
}

func newGatedRecorder(gate int) *gatedRecorder {
	return &gatedRecorder{gate: gate, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedRecorder) handle(ctx context.Context, ev Event) error {
	var p testPayload
	if err := json.Unmarshal(ev.Data, &p); err != nil {
		return err
	}
	d, _ := DeliveryFrom(ctx)
	g.mu.Lock()
	if g.inFlight++; g.inFlight > 1 {
		g.overlaps++
	}
	g.runs = append(g.runs, recordedRun{seq: p.Seq, attempt: d.Attempt, gen: d.Generation})
	g.mu.Unlock()
	if p.Seq == g.gate {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	if g.poison[p.Seq] {
		return fmt.Errorf("poison event %d", p.Seq)
	}
	return nil
}

// runsOf returns how many times seq reached the handler.
func (g *gatedRecorder) runsOf(seq int) int {
	n := 0
	for _, r := range g.snapshot() {
		if r.seq == seq {
			n++
		}
	}
	return n
}

func (g *gatedRecorder) snapshot() []recordedRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]recordedRun(nil), g.runs...)
}

// handledAll reports whether n distinct sequence numbers have run.
func (g *gatedRecorder) handledAll(n int) bool {
	seen := map[int]bool{}
	for _, r := range g.snapshot() {
		seen[r.seq] = true
	}
	return len(seen) >= n
}

// nativeReadFixture publishes n events of one key and starts an engine whose handler
// stops at the first attempt of seq gate (in the second batch of 16, which is already
// read natively).
type nativeReadFixture struct {
	rdb    redis.UniversalClient
	rec    *gatedRecorder
	e      *Engine
	stream string
	lease  string
	n      int
}

func startNativeReadFixture(t *testing.T, tg redisTarget, n, gate, maxUnacked int, poison ...int) *nativeReadFixture {
	t.Helper()
	f := &nativeReadFixture{rdb: tg.client(t), rec: newGatedRecorder(gate), n: n}
	f.rec.poison = map[int]bool{}
	for _, s := range poison {
		f.rec.poison[s] = true
	}
	d := testDomain(t, f.rec.handle, nil)
	events := make([]testPayload, n)
	for i := range events {
		events[i] = testPayload{Client: "K", Seq: i}
	}
	bulkPublish(t, NewRedisBroker(f.rdb), d, events)
	k := keyspace.For(f.rdb)
	f.stream, f.lease = k.PartitionStream("order", "K"), k.LeaseKey(k.PartitionStream("order", "K"), "Projector")
	f.e = startEngineOn(t, tg, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(2 * time.Second)
		c.BatchSize, c.MaxUnacked = 16, maxUnacked
	})
	select {
	case <-f.rec.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never reached the gate")
	}
	return f
}

// check waits until every event ran and then checks the runs: first runs in publish
// order, no overlap, nothing left pending in the group.
func (f *nativeReadFixture) check(t *testing.T) []recordedRun {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, "every event handled", func() bool { return f.rec.handledAll(f.n) })
	runs := f.rec.snapshot()
	seqsRun := make([]int, len(runs))
	for i, r := range runs {
		seqsRun[i] = r.seq
	}
	first, _ := dedupFirst(seqsRun)
	if got, want := joinInts(first), joinInts(seqs(0, f.n)); got != want {
		t.Errorf("first runs out of publish order:\n got %s\nwant %s", got, want)
	}
	if f.rec.overlaps > 0 {
		t.Errorf("%d runs overlapped another of the same key", f.rec.overlaps)
	}
	testkit.WaitFor(t, 10*time.Second, "the group's pending list empty", func() bool {
		p, err := f.rdb.XPending(context.Background(), f.stream, "Projector").Result()
		return err == nil && p.Count == 0
	})
	return runs
}

// An entry already pending when the transaction runs (here read by another consumer, as
// a fenced owner's read or a read whose reply was lost leaves it) comes before the
// transaction's own read: the script answers with it, the worker leaves that read
// pending, and everything is claimed in order afterwards.
func TestNativeReadBehindAPendingEntry(t *testing.T) { onBoth(t, testNativeReadBehindAPendingEntry) }

func testNativeReadBehindAPendingEntry(t *testing.T, tg redisTarget) {
	f := startNativeReadFixture(t, tg, 100, 20, 1)
	before := tg.commandCalls(t, "exec")
	// Batch 2 (16..31) is in the worker's hands; take 32..39 as another consumer would.
	got, err := f.rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: "Projector", Consumer: "other", Streams: []string{f.stream, ">"}, Count: 8, Block: -1,
	}).Result()
	if err != nil || len(got[0].Messages) != 8 {
		t.Fatalf("reading 8 entries as another consumer: %v %v", got, err)
	}
	close(f.rec.release)
	runs := f.check(t)
	if tg.commandCalls(t, "exec") == before {
		t.Error("no transaction ran: the busy partition was never read natively")
	}
	for _, r := range runs {
		if r.seq >= 32 && r.seq < 40 && r.attempt != 2 {
			t.Errorf("seq %d taken from the other consumer ran as attempt %d, want 2", r.seq, r.attempt)
		}
	}
	if len(runs) != f.n {
		t.Errorf("%d runs for %d events: with max_unacked = 1 and no failure nothing runs twice", len(runs), f.n)
	}
}

// A lease taken by another owner while its partition is busy: the transaction's script
// finds the fence broken, so the old owner never starts what the transaction read; the
// next owner claims those entries in order.
func TestNativeReadFenced(t *testing.T) { onBoth(t, testNativeReadFenced) }

func testNativeReadFenced(t *testing.T, tg redisTarget) {
	ctx := context.Background()
	f := startNativeReadFixture(t, tg, 100, 20, 16)
	token, err := f.rdb.Get(ctx, f.lease).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.Set(ctx, f.lease, "thief:1", redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	close(f.rec.release)
	// The owner handles the rest of its batch (acks ride on the next read), then its
	// transaction is fenced. Give the lease back only after that.
	testkit.WaitFor(t, 10*time.Second, "the old owner's read fenced", func() bool {
		n, _ := f.rdb.XPending(ctx, f.stream, "Projector").Result()
		return n != nil && n.Count > 16
	})
	if err := f.rdb.Del(ctx, f.lease).Err(); err != nil {
		t.Fatal(err)
	}
	runs := f.check(t)
	oldGen := runs[0].gen
	for _, r := range runs {
		if r.gen == oldGen && r.seq >= 32 {
			t.Errorf("seq %d ran at the fenced generation %d (lease %s)", r.seq, oldGen, token)
		}
	}
	seqsRun := make([]int, len(runs))
	for i, r := range runs {
		seqsRun[i] = r.seq
	}
	_, dups := dedupFirst(seqsRun)
	if dups > 16 {
		t.Errorf("%d re-runs, want at most max_unacked = 16", dups)
	}
	t.Logf("%d runs, %d re-runs after the fence", len(runs), dups)
}

// SCRIPT FLUSH while a partition is busy: in the transaction the script is refused and
// the read still runs. The worker loads the scripts, sends the script alone with the
// same acknowledgements, and claims what the read took in order: nothing is lost,
// nothing acknowledged is run again.
func TestNativeReadAfterScriptFlush(t *testing.T) { onBoth(t, testNativeReadAfterScriptFlush) }

func testNativeReadAfterScriptFlush(t *testing.T, tg redisTarget) {
	f := startNativeReadFixture(t, tg, 100, 20, 16)
	if err := f.rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	close(f.rec.release)
	runs := f.check(t)
	if len(runs) != f.n {
		t.Errorf("%d runs for %d events: an acknowledgement was lost with the script cache", len(runs), f.n)
	}
}

// A Redis user that may not run MULTI/EXEC: the engine says so once, at start, and reads
// busy partitions through the script alone; nothing is lost or reordered.
func TestNativeReadWithoutTransactions(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{Users: []string{"ACL SETUSER w on >pw ~* &* +@all -multi -exec"}})
	opt, err := redis.ParseURL(srv.UserURL("w", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	worker := redis.NewClient(opt)
	t.Cleanup(func() { _ = worker.Close() })
	rec := newGatedRecorder(-1)
	d := testDomain(t, rec.handle, nil)
	const n = 100
	events := make([]testPayload, n)
	for i := range events {
		events[i] = testPayload{Client: "K", Seq: i}
	}
	bulkPublish(t, NewRedisBroker(srv.Client(t)), d, events)
	logs := &countingHandler{counts: map[string]int{}}
	startEngineWith(t, srv, d, "i1", func(c *EngineConfig) { c.Client, c.Logger = worker, slog.New(logs) })
	testkit.WaitFor(t, 20*time.Second, "every event handled", func() bool { return rec.handledAll(n) })
	var got []int
	for _, r := range rec.snapshot() {
		got = append(got, r.seq)
	}
	if joinInts(got) != joinInts(seqs(0, n)) {
		t.Errorf("runs %s, want each of 0..%d once, in order", joinInts(got), n-1)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	said := 0
	for msg, c := range logs.counts {
		if strings.Contains(msg, "may not run MULTI/EXEC") {
			said += c
		}
		if strings.HasPrefix(msg, "WARN partition read failed") {
			t.Errorf("%d reads failed: %q", c, msg)
		}
	}
	if said != 1 {
		t.Errorf("the refusal of MULTI/EXEC was logged %d times, want once: %v", said, logs.counts)
	}
}
