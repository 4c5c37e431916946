package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// batchRecorder is a BatchFunc that applies a run all or nothing: it records every call
// (its events' seqs and its delivery) and, when the run succeeds, appends the run's seqs
// to the key's log. fail, when set, decides whether a call fails.
type batchRecorder struct {
	mu    sync.Mutex
	calls []batchCall
	log   map[string][]int
	fail  func(c batchCall) error
	work  time.Duration
}

type batchCall struct {
	key  string
	seqs []int
	d    Delivery
}

func newBatchRecorder() *batchRecorder { return &batchRecorder{log: map[string][]int{}} }

func (r *batchRecorder) handle(ctx context.Context, evs []Event) error {
	d, _ := DeliveryFrom(ctx)
	c := batchCall{key: evs[0].Key, d: d}
	for _, ev := range evs {
		var p testPayload
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			return err
		}
		if ev.Key != c.key {
			return fmt.Errorf("a run mixes keys %q and %q", c.key, ev.Key)
		}
		c.seqs = append(c.seqs, p.Seq)
	}
	if r.work > 0 {
		time.Sleep(r.work)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	if r.fail != nil {
		if err := r.fail(c); err != nil {
			return err
		}
	}
	r.log[c.key] = append(r.log[c.key], c.seqs...)
	return nil
}

func (r *batchRecorder) logOf(key string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log[key])
}

func (r *batchRecorder) callsOf(key string) []batchCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []batchCall
	for _, c := range r.calls {
		if c.key == key {
			out = append(out, c)
		}
	}
	return out
}

// batchDomain is the test domain whose Projector is fn as a BatchFunc of up to max
// events per call.
func batchDomain(tb testing.TB, fn BatchFunc, max int, mod func(h *Handler)) *Domain {
	tb.Helper()
	return testDomain(tb, nil, func(d *Domain) {
		h := &d.Handlers[0]
		h.BatchFunc, h.BatchMax = fn, max
		if mod != nil {
			mod(h)
		}
	})
}

// A backlog of one key is handed over in runs of up to batch_max consecutive events, in
// publish order, each call's delivery naming its entries in order; other keys run
// beside it.
func TestBatchTakesConsecutiveEventsInOrder(t *testing.T) {
	srv, rdb, b := startNode(t)
	rec := newBatchRecorder()
	d := batchDomain(t, rec.handle, 8, nil)
	var evs []testPayload
	for seq := range 40 {
		evs = append(evs, testPayload{Client: "hot", Seq: seq})
	}
	for _, k := range keysOf(5) {
		evs = append(evs, testPayload{Client: k, Seq: 0})
	}
	bulkPublish(t, b, d, evs)
	startEngine(t, srv, d, "i1", 2*time.Second)
	testkit.WaitFor(t, 10*time.Second, "every event handled", func() bool { return len(rec.logOf("hot")) == 40 })
	for _, k := range keysOf(5) {
		testkit.WaitFor(t, 5*time.Second, "key "+k+" handled", func() bool { return len(rec.logOf(k)) == 1 })
	}
	if got := rec.logOf("hot"); !slices.Equal(got, seqs(0, 40)) {
		t.Fatalf("hot key applied %v, want 0..39 in order", got)
	}
	calls := rec.callsOf("hot")
	biggest := 0
	var ids []string
	for _, c := range calls {
		biggest = max(biggest, len(c.seqs))
		if len(c.seqs) > 8 {
			t.Errorf("a call took %d events, more than batch_max 8", len(c.seqs))
		}
		if len(c.d.Entries) != len(c.seqs) || c.d.EntryID != c.d.Entries[0] || c.d.LastEntryID() != c.d.Entries[len(c.d.Entries)-1] {
			t.Errorf("delivery %+v does not name the run's %d entries", c.d, len(c.seqs))
		}
		if c.d.Attempt != 1 {
			t.Errorf("run %v is attempt %d, want 1", c.seqs, c.d.Attempt)
		}
		ids = append(ids, c.d.Entries...)
	}
	if biggest < 2 {
		t.Errorf("no call took more than one event (%d calls for 40 events)", len(calls))
	}
	// The entries the calls named are the stream's, in order.
	if want := entryIDs(t, rdb, keyspace.SingleNode.PartitionStream("order", "hot")); !slices.Equal(ids, want) {
		t.Errorf("the calls named entries %v, want the stream's %v", ids, want)
	}
	t.Logf("40 events of one key in %d calls, the largest of %d", len(calls), biggest)
}

// A run that fails is retried whole, from the same head, as attempt 2; nothing of it is
// applied twice.
func TestBatchFailureRetriesTheWholeRun(t *testing.T) {
	srv, _, b := startNode(t)
	rec := newBatchRecorder()
	failed := false
	rec.fail = func(c batchCall) error {
		if !failed && len(c.seqs) > 1 {
			failed = true
			return errors.New("the batch API was busy")
		}
		return nil
	}
	d := batchDomain(t, rec.handle, 10, nil)
	var evs []testPayload
	for seq := range 10 {
		evs = append(evs, testPayload{Client: "k", Seq: seq})
	}
	bulkPublish(t, b, d, evs)
	startEngine(t, srv, d, "i1", 2*time.Second)
	testkit.WaitFor(t, 10*time.Second, "every event applied", func() bool { return len(rec.logOf("k")) == 10 })
	if got := rec.logOf("k"); !slices.Equal(got, seqs(0, 10)) {
		t.Fatalf("applied %v, want 0..9 once each in order", got)
	}
	calls := rec.callsOf("k")
	if len(calls) < 2 {
		t.Fatalf("%d calls, want the failed run and its retry", len(calls))
	}
	first, second := calls[0], calls[1]
	if !slices.Equal(first.seqs, second.seqs) || first.d.EntryID != second.d.EntryID {
		t.Errorf("the retry ran %v from %s, want the failed run %v from %s again", second.seqs, second.d.EntryID, first.seqs, first.d.EntryID)
	}
	if first.d.Attempt != 1 || second.d.Attempt != 2 {
		t.Errorf("attempts %d then %d, want 1 then 2", first.d.Attempt, second.d.Attempt)
	}
}

// A poison event in the middle of a run: the run fails every attempt, its last attempt
// runs the events one at a time, the ones before the poison are applied once and
// acknowledged, the partition halts at the poison event (the run's attempt count), and
// the events after it wait; skipping the poison resumes right after it.
func TestBatchPoisonInTheMiddleHaltsAtIt(t *testing.T) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		rdb, b, rec, stream, ids := poisonInTheMiddle(t, tg, 2)
		ref := HeadRef{Group: "Projector", Category: "order", Key: "k"}
		var h *HaltRecord
		testkit.WaitFor(t, 10*time.Second, "the partition halted", func() bool {
			h, _ = b.Halt(context.Background(), ref)
			return h != nil
		})
		if h.EntryID != ids[5] || h.Attempts != 2 || !strings.Contains(h.Error, "event 5") {
			t.Errorf("halted at %s after %d attempts (%q), want %s (event 5) after 2", h.EntryID, h.Attempts, h.Error, ids[5])
		}
		if got := rec.logOf("k"); !slices.Equal(got, seqs(0, 5)) {
			t.Errorf("applied %v before the halt, want 0..4 once each", got)
		}
		// The events before the poison are acknowledged: the poison is the head, and
		// nothing before it is pending.
		testkit.WaitFor(t, 5*time.Second, "the poison is the oldest pending entry", func() bool {
			p, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: stream, Group: "Projector", Start: "-", End: "+", Count: 1}).Result()
			return err == nil && len(p) == 1 && p[0].ID == ids[5]
		})
		var shape []string
		for _, c := range rec.callsOf("k") {
			shape = append(shape, fmt.Sprint(c.seqs))
		}
		t.Logf("calls: %s", strings.Join(shape, " "))
		if err := b.Skip(context.Background(), ref, ids[5], false); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, "the events after the poison applied", func() bool { return len(rec.logOf("k")) == 9 })
		if got := rec.logOf("k"); !slices.Equal(got, []int{0, 1, 2, 3, 4, 6, 7, 8, 9}) {
			t.Errorf("applied %v, want 0..4 then 6..9, each once", got)
		}
	})
}

// entryIDs returns the entry ids of a stream, in order.
func entryIDs(tb testing.TB, rdb redis.UniversalClient, stream string) []string {
	tb.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

// With batch_wait, an owner that caught up waits before it reads again: events published
// a few milliseconds apart reach the handler together instead of one call each.
func TestBatchWaitFillsBatches(t *testing.T) {
	srv, _, b := startNode(t)
	rec := newBatchRecorder()
	d := batchDomain(t, rec.handle, 16, func(h *Handler) { h.BatchWait = 400 * time.Millisecond })
	startEngine(t, srv, d, "i1", 2*time.Second)
	for seq := range 10 {
		publish(t, b, d, "k", seq, false)
		time.Sleep(15 * time.Millisecond)
	}
	testkit.WaitFor(t, 10*time.Second, "every event applied", func() bool { return len(rec.logOf("k")) == 10 })
	if got := rec.logOf("k"); !slices.Equal(got, seqs(0, 10)) {
		t.Fatalf("applied %v, want 0..9 in order", got)
	}
	calls := rec.callsOf("k")
	var shape []string
	for _, c := range calls {
		shape = append(shape, fmt.Sprint(c.seqs))
	}
	// The first event may be read alone (the partition was new); after it the owner
	// waits 400ms, and the nine events published within ~150ms come in one call.
	if len(calls) > 3 {
		t.Errorf("10 events published 15ms apart took %d calls (%s); with batch_wait 400ms, want at most 3", len(calls), strings.Join(shape, " "))
	}
	t.Logf("calls: %s", strings.Join(shape, " "))
}

// Under a limit key a run holds one permit, so it holds the events of one limit value:
// a change of value ends the run.
func TestBatchRunHoldsOneLimitValue(t *testing.T) {
	srv, _, b := startNode(t)
	type call struct {
		tenants []string
		value   string
	}
	var mu sync.Mutex
	var calls []call
	fn := func(ctx context.Context, evs []Event) error {
		d, _ := DeliveryFrom(ctx)
		c := call{value: d.Limit.Value}
		for _, ev := range evs {
			var p limitPayload
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				return err
			}
			c.tenants = append(c.tenants, p.Tenant)
		}
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		return nil
	}
	d := NewDomain("limits").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "tenant_id", "seq"}}).
		AddHandler(Handler{Name: "Projector", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", Limit: HandlerLimit{By: "tenant_id", Concurrency: 2}, BatchFunc: fn, BatchMax: 10})
	if err := d.Init(NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	tenants := []string{"a", "a", "a", "b", "b", "b", "a", "a"}
	for seq, tn := range tenants {
		publishLimited(t, b, d, tn, "k", seq)
	}
	startEngine(t, srv, d, "i1", 2*time.Second)
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range calls {
			n += len(c.tenants)
		}
		return n
	}
	testkit.WaitFor(t, 10*time.Second, "every event handled", func() bool { return total() == len(tenants) })
	mu.Lock()
	defer mu.Unlock()
	var got []string
	for _, c := range calls {
		for _, tn := range c.tenants {
			if tn != c.value {
				t.Errorf("a run under the permit of %q holds an event of %q: %v", c.value, tn, c.tenants)
			}
		}
		got = append(got, strings.Join(c.tenants, ""))
	}
	if want := []string{"aaa", "bbb", "aa"}; !slices.Equal(got, want) {
		t.Errorf("runs %v, want %v", got, want)
	}
}

// With a tracer, a run of several events is one consumer span, the root of a trace of its
// own linked to each event's publisher span, naming its first and last entry and its
// size.
func TestBatchRunIsOneSpanLinkedToEachPublisher(t *testing.T) {
	srv, _, b := startNode(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pubTP := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = pubTP.Shutdown(context.Background()) })
	done := make(chan Delivery, 1)
	d := batchDomain(t, func(ctx context.Context, evs []Event) error {
		dl, _ := DeliveryFrom(ctx)
		if trace.SpanContextFromContext(ctx).SpanID() == (trace.SpanID{}) {
			return errors.New("the run's context carries no span")
		}
		done <- dl
		return nil
	}, 8, nil)
	var publishers []trace.SpanID
	for seq := range 5 {
		ctx, span := pubTP.Tracer("publisher").Start(context.Background(), "publish")
		data, _ := json.Marshal(testPayload{Client: "k", Seq: seq})
		if _, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{}); err != nil {
			t.Fatal(err)
		}
		span.End()
		publishers = append(publishers, span.SpanContext().SpanID())
	}
	startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Timing, c.TracerProvider = fastTiming(2*time.Second), tp
	})
	dl := <-done
	testkit.WaitFor(t, 5*time.Second, "the run's span ended", func() bool { return len(rec.Ended()) == 1 })
	s := rec.Ended()[0]
	if s.SpanKind() != trace.SpanKindConsumer || s.Name() != "process order" || s.Parent().IsValid() {
		t.Errorf("span: kind %v, name %q, parent %v: want a consumer span %q, a root", s.SpanKind(), s.Name(), s.Parent(), "process order")
	}
	var linked []trace.SpanID
	for _, l := range s.Links() {
		linked = append(linked, l.SpanContext.SpanID())
	}
	if !slices.Equal(linked, publishers) {
		t.Errorf("the span links to %v, want each publisher's span %v", linked, publishers)
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["messaging.batch.message_count"].AsInt64() != 5 || attrs["seqctl.entry_id"].AsString() != dl.EntryID ||
		attrs["seqctl.last_entry_id"].AsString() != dl.LastEntryID() || len(dl.Entries) != 5 {
		t.Errorf("span attributes %v for delivery %+v", s.Attributes(), dl)
	}
}

// The inline broker runs a BatchFunc with one event per call.
func TestInlineBrokerRunsABatchFuncOneEventAtATime(t *testing.T) {
	var sizes []int
	d := NewDomain("inline").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id"}}).
		AddHandler(Handler{Name: "P", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"}, SequentialBy: "client_id",
			BatchMax: 8, BatchFunc: func(ctx context.Context, evs []Event) error {
				sizes = append(sizes, len(evs))
				return nil
			}})
	ib := NewInlineBroker()
	if err := d.Init(ib); err != nil {
		t.Fatal(err)
	}
	if err := ib.Start(d); err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	for range 3 {
		if _, err := ib.Publish(context.Background(), d, "OrderPlaced", []byte(`{"client_id":"c-1"}`), PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ib.Wait()
	if !slices.Equal(sizes, []int{1, 1, 1}) {
		t.Errorf("calls of sizes %v, want three calls of one event", sizes)
	}
}

// seqctl run binds handlers after Init: an engine refuses a Func bound to a handler whose
// batch_max asks for batches.
func TestEngineRefusesAFuncForBatches(t *testing.T) {
	_, rdb, _ := startNode(t)
	d := testDomain(t, nil, func(d *Domain) { d.Handlers[0].BatchMax = 8 })
	d.Handlers[0].Func = func(context.Context, Event) error { return nil }
	_, err := New(EngineConfig{Domain: d, Client: rdb, InstanceID: "i1"})
	if err == nil || !strings.Contains(err.Error(), `handler "Projector"`) || !strings.Contains(err.Error(), "set BatchFunc instead") {
		t.Errorf("New: %v, want the handler named and told to set BatchFunc", err)
	}
}

// batchGenSink is genSink for runs: it applies a run all or nothing, refusing one from a
// lower generation than one it applied for the key, and counts the runs it applied.
type batchGenSink struct {
	*genSink
	runs int
}

func (s *batchGenSink) handle(ctx context.Context, evs []Event) error {
	d, _ := DeliveryFrom(ctx)
	var ps []testPayload
	for _, ev := range evs {
		var p testPayload
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			return err
		}
		ps = append(ps, p)
	}
	time.Sleep(2 * time.Millisecond) // the work
	s.mu.Lock()
	defer s.mu.Unlock()
	key := evs[0].Key
	if d.Generation < s.maxGen[key] {
		s.refused++
		return nil
	}
	s.maxGen[key] = d.Generation
	for _, p := range ps {
		s.applied[key] = append(s.applied[key], appliedEv{p.Seq, d.Generation})
	}
	s.runs++
	return nil
}

// Kill, stop and restart faults while partitions are drained in runs of up to 8: every
// event is applied, in publish order, and after each change of owner at most one run (8
// events) runs again.
func TestBatchRerunsUnderFaults(t *testing.T) {
	skipShort(t)
	const batchMax, n = 8, 60
	faults := []struct {
		name  string
		fault func(t *testing.T, srv *redistest.Server, engines []*Engine, start func(id string) *Engine)
	}{
		{"kill an instance", func(t *testing.T, _ *redistest.Server, engines []*Engine, _ func(string) *Engine) {
			crash(engines[0])
		}},
		{"stop an instance and start another", func(t *testing.T, _ *redistest.Server, engines []*Engine, start func(string) *Engine) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := engines[0].Shutdown(ctx); err != nil {
				t.Error(err)
			}
			start("i3")
		}},
		{"restart Redis", func(t *testing.T, srv *redistest.Server, _ []*Engine, _ func(string) *Engine) {
			srv.Stop()
			time.Sleep(1500 * time.Millisecond)
			srv.StartAgain()
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			srv := redistest.StartWith(t, redistest.Options{AOF: true})
			tg := redisTarget{srv: srv}
			b := NewRedisBroker(tg.client(t))
			sink := &batchGenSink{genSink: newGenSink()}
			start := func(id string) *Engine {
				d := batchDomain(t, sink.handle, batchMax, nil)
				return startEngineOn(t, tg, d, id, func(c *EngineConfig) { c.Timing = fastTiming(time.Second) })
			}
			engines := []*Engine{start("i1"), start("i2")}
			keys := keysOf(20)
			var events []testPayload
			for seq := range n {
				for _, k := range keys {
					events = append(events, testPayload{Client: k, Seq: seq})
				}
			}
			bulkPublish(t, b, testDomain(t, nil, nil), events)
			count := func() int {
				sink.mu.Lock()
				defer sink.mu.Unlock()
				c := 0
				for _, evs := range sink.applied {
					c += len(evs)
				}
				return c
			}
			testkit.WaitFor(t, 20*time.Second, "a third applied", func() bool { return count() >= len(events)/3 })
			f.fault(t, srv, engines, start)
			testkit.WaitFor(t, 30*time.Second, "every event applied", func() bool {
				sink.mu.Lock()
				defer sink.mu.Unlock()
				for _, k := range keys {
					if analyse(sink.applied[k], n).missing > 0 {
						return false
					}
				}
				return true
			})
			applied := count()
			sink.mu.Lock()
			defer sink.mu.Unlock()
			dups, longest := 0, 0
			for _, k := range keys {
				st := analyse(sink.applied[k], n)
				dups += st.dups
				longest = max(longest, st.longestRerun)
				if st.outOfOrder > 0 {
					t.Errorf("key %s: %d applications out of publish order: %v", k, st.outOfOrder, sink.applied[k])
				}
				if st.longestRerun > batchMax {
					t.Errorf("key %s: a run of %d re-applied events by one owner, more than one batch (%d): %v", k, st.longestRerun, batchMax, sink.applied[k])
				}
				if changes := st.owners - 1; st.dups > batchMax*changes {
					t.Errorf("key %s: %d re-applied events over %d changes of owner, more than one batch (%d) each: %v", k, st.dups, changes, batchMax, sink.applied[k])
				}
			}
			t.Logf("%d events in %d runs (%.1f events a run); %d re-applied, the longest re-run %d, %d stale runs refused",
				len(events), sink.runs, float64(applied)/float64(max(sink.runs, 1)), dups, longest, sink.refused)
		})
	}
}

// A retry of a partition halted in the middle of a batch gives the poison event one more
// try, as Retry promises: one call of it alone, then the halt again, at the attempt
// after the halt's.
func TestBatchHaltRetryIsOneMoreTry(t *testing.T) {
	_, b, rec, _, ids := poisonInTheMiddle(t, redisTarget{srv: redistest.Start(t)}, 3)
	ctx := context.Background()
	ref := HeadRef{Group: "Projector", Category: "order", Key: "k"}
	var h *HaltRecord
	halted := func() bool { h, _ = b.Halt(ctx, ref); return h != nil }
	testkit.WaitFor(t, 10*time.Second, "the partition halted", halted)
	if h.EntryID != ids[5] || h.Attempts != 3 {
		t.Fatalf("halted at %s after %d attempts, want %s after 3", h.EntryID, h.Attempts, ids[5])
	}
	before, first := len(callsWith(rec, "k", 5)), h.Since
	if err := b.Retry(ctx, ref, ids[5]); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "halted again", func() bool { return halted() && h.Since.After(first) })
	time.Sleep(200 * time.Millisecond)
	after := callsWith(rec, "k", 5)[before:]
	var shape []string
	for _, c := range after {
		shape = append(shape, fmt.Sprint(c.seqs))
	}
	if len(after) != 1 || !slices.Equal(after[0].seqs, []int{5}) {
		t.Errorf("the retry ran the poison in calls %v, want one call of it alone", shape)
	}
	if h.EntryID != ids[5] || h.Attempts != 4 {
		t.Errorf("halted again at %s after %d attempts, want %s after 4 (one more try)", h.EntryID, h.Attempts, ids[5])
	}
}

// callsWith returns the calls of a key's runs that held seq.
func callsWith(r *batchRecorder, key string, seq int) []batchCall {
	var out []batchCall
	for _, c := range r.callsOf(key) {
		if slices.Contains(c.seqs, seq) {
			out = append(out, c)
		}
	}
	return out
}

// poisonInTheMiddle publishes events 0..9 of key "k", of which 5 fails every call that
// holds it, for a batch handler of up to 10 events and maxRetries attempts, and starts
// an engine. It returns the broker, the recorder, the key's stream and its entry ids.
func poisonInTheMiddle(tb testing.TB, tg redisTarget, maxRetries int) (redis.UniversalClient, *RedisBroker, *batchRecorder, string, []string) {
	tb.Helper()
	rdb, b := tg.broker(tb)
	rec := newBatchRecorder()
	rec.fail = func(c batchCall) error {
		if slices.Contains(c.seqs, 5) {
			return errors.New("event 5 breaks a constraint")
		}
		return nil
	}
	d := batchDomain(tb, rec.handle, 10, func(h *Handler) { h.MaxRetries = maxRetries })
	var evs []testPayload
	for seq := range 10 {
		evs = append(evs, testPayload{Client: "k", Seq: seq})
	}
	bulkPublish(tb, b, d, evs)
	stream := keyspace.For(rdb).PartitionStream("order", "k")
	ids := entryIDs(tb, rdb, stream)
	startEngineOn(tb, tg, d, "i1", nil)
	return rdb, b, rec, stream, ids
}
