package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// seqLog records, per key, the seq of each event a handler started, in order.
type seqLog struct {
	mu   sync.Mutex
	runs map[string][]int
	// retried lists the runs that were not a first attempt, as "key/seq attempt N".
	retried []string
	// hold, when set, blocks the handler of this key/seq until released.
	hold    string
	held    chan struct{} // closed when the held event started
	release chan struct{}
}

func newSeqLog(hold string) *seqLog {
	return &seqLog{runs: map[string][]int{}, hold: hold, held: make(chan struct{}), release: make(chan struct{})}
}

func (l *seqLog) handle(ctx context.Context, ev Event) error {
	var p testPayload
	if err := json.Unmarshal(ev.Data, &p); err != nil {
		return err
	}
	d, _ := DeliveryFrom(ctx)
	l.mu.Lock()
	l.runs[ev.Key] = append(l.runs[ev.Key], p.Seq)
	if d.Attempt != 1 {
		l.retried = append(l.retried, fmt.Sprintf("%s/%d attempt %d", ev.Key, p.Seq, d.Attempt))
	}
	l.mu.Unlock()
	if fmt.Sprintf("%s/%d", ev.Key, p.Seq) == l.hold {
		close(l.held)
		<-l.release
	}
	return nil
}

func (l *seqLog) of(key string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs[key])
}

// A paused key finishes its event in flight and starts no other, also of those its
// owner read ahead, while another key drains; Stats counts it; a resume drains the key
// in publish order. On one node and on a Redis Cluster, one event at a time and with
// read-ahead (max_unacked 16).
func TestPauseStopsOneKey(t *testing.T) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		for _, mu := range []int{1, 16} {
			t.Run(fmt.Sprintf("max_unacked=%d", mu), func(t *testing.T) { testPauseStopsOneKey(t, tg, mu) })
		}
	})
}

func testPauseStopsOneKey(t *testing.T, tg redisTarget, maxUnacked int) {
	_, b := tg.broker(t)
	ctx := context.Background()
	pfx := fmt.Sprintf("m%d-", maxUnacked)
	A, B := pfx+"A", pfx+"B"
	log := newSeqLog(A + "/0")
	d := testDomain(t, log.handle, nil)
	e := startEngineOn(t, tg, d, "i1", func(c *EngineConfig) { c.MaxUnacked = maxUnacked })
	const n = 20
	for i := range n {
		publish(t, b, d, A, i, false)
	}
	<-log.held // A/0 is in its handler; its next events are read ahead with max_unacked 16
	ref := HeadRef{Group: "Projector", Category: "order", Key: A}
	rec, replaced, err := b.Pause(ctx, ref, PauseRecord{Reason: "migrating", By: "test"}, 0)
	if err != nil || replaced || rec.Since.IsZero() || !rec.Until.IsZero() {
		t.Fatalf("Pause = %+v, %v, %v", rec, replaced, err)
	}
	time.Sleep(100 * time.Millisecond) // the owner's notice arrives while A/0 runs
	close(log.release)
	for i := range n {
		publish(t, b, d, B, i, false)
	}
	testkit.WaitFor(t, 10*time.Second, "B drained while A is paused", func() bool { return len(log.of(B)) == n })
	testkit.WaitFor(t, 5*time.Second, "the paused partition counted", func() bool { return e.Stats().Paused == 1 })
	time.Sleep(300 * time.Millisecond)
	if got := log.of(A); !slices.Equal(got, []int{0}) {
		t.Fatalf("paused key ran %v, want only its event in flight [0]", got)
	}
	if p, err := b.Paused(ctx, ref); err != nil || p == nil || p.Reason != "migrating" || p.By != "test" {
		t.Fatalf("Paused = %+v, %v", p, err)
	}
	if err := b.Resume(ctx, ref); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "A drained after the resume", func() bool { return len(log.of(A)) >= n })
	if got := log.of(A); !slices.Equal(got, seqs(0, n)) {
		t.Fatalf("A ran %v after the resume, want %v", got, seqs(0, n))
	}
	// The read-ahead given back at the pause was never started: each run is a first
	// attempt.
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.retried) > 0 {
		t.Fatalf("runs counted as retries after the pause: %v", log.retried)
	}
	if e.Stats().Paused != 0 {
		t.Fatal("still counted as paused")
	}
}

// A pause given a duration ends by itself (its record expires) and the owner starts again
// without any notice.
func TestPauseForEndsByItself(t *testing.T) {
	srv, _, b := startNode(t)
	ctx := context.Background()
	log := newSeqLog("")
	d := testDomain(t, log.handle, nil)
	startEngine(t, srv, d, "i1", 2*time.Second)
	ref := HeadRef{Group: "Projector", Category: "order", Key: "A"}
	publish(t, b, d, "A", 0, false)
	testkit.WaitFor(t, 5*time.Second, "A/0 handled", func() bool { return len(log.of("A")) == 1 })
	rec, _, err := b.Pause(ctx, ref, PauseRecord{Reason: "r", By: "test"}, 1500*time.Millisecond)
	if err != nil || rec.Until.Sub(rec.Since) != 1500*time.Millisecond {
		t.Fatalf("Pause = %+v, %v", rec, err)
	}
	publish(t, b, d, "A", 1, false)
	time.Sleep(time.Second)
	if got := log.of("A"); len(got) != 1 {
		t.Fatalf("ran %v during the pause", got)
	}
	testkit.WaitFor(t, 3*time.Second, "A/1 handled once the pause ended", func() bool { return len(log.of("A")) == 2 })
	if p, _ := b.Paused(ctx, ref); p != nil {
		t.Fatalf("pause record still there: %+v", p)
	}
}

// The pause is Redis's, not an instance's: it holds when its owner crashes and another
// instance takes the partition, and for a partition nobody owned when it was paused.
func TestPauseHoldsAcrossOwners(t *testing.T) {
	srv, _, b := startNode(t)
	ctx := context.Background()
	log := newSeqLog("")
	d := testDomain(t, log.handle, nil)
	e1 := startEngine(t, srv, d, "i1", time.Second)
	publish(t, b, d, "A", 0, false)
	testkit.WaitFor(t, 5*time.Second, "A/0 handled", func() bool { return len(log.of("A")) == 1 })
	for _, k := range []string{"A", "never-owned"} {
		if _, _, err := b.Pause(ctx, HeadRef{Group: "Projector", Category: "order", Key: k}, PauseRecord{Reason: "r"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	crash(e1)
	startEngine(t, srv, d, "i2", time.Second)
	publish(t, b, d, "A", 1, false)
	publish(t, b, d, "never-owned", 0, false)
	publish(t, b, d, "B", 0, false)
	testkit.WaitFor(t, 10*time.Second, "B handled by the new instance", func() bool { return len(log.of("B")) == 1 })
	time.Sleep(500 * time.Millisecond)
	if a, n := log.of("A"), log.of("never-owned"); len(a) != 1 || len(n) != 0 {
		t.Fatalf("paused keys ran: A %v, never-owned %v", a, n)
	}
	for _, k := range []string{"A", "never-owned"} {
		if err := b.Resume(ctx, HeadRef{Group: "Projector", Category: "order", Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "both drained after the resume", func() bool {
		return len(log.of("A")) == 2 && len(log.of("never-owned")) == 1
	})
}

// A halted partition cannot be paused (its head needs an operator first); resuming a
// partition that is not paused says so; pausing twice replaces the record.
func TestPauseRefusals(t *testing.T) {
	srv, rdb, b := startNode(t)
	ctx := context.Background()
	d := sinkDomain(t, rdb, "i1", func(d *Domain) { d.Handlers[0].MaxRetries = 1 })
	startEngine(t, srv, d, "i1", time.Second)
	publish(t, b, d, "H", 0, true)
	ref := HeadRef{Group: "Projector", Category: "order", Key: "H"}
	testkit.WaitFor(t, 5*time.Second, "halted", func() bool { h, _ := b.Halt(ctx, ref); return h != nil })
	if _, _, err := b.Pause(ctx, ref, PauseRecord{Reason: "r"}, 0); !errors.Is(err, ErrHalted) {
		t.Fatalf("pause of a halted partition: err = %v, want ErrHalted", err)
	}
	if p, _ := b.Paused(ctx, ref); p != nil {
		t.Fatalf("a refused pause left a record: %+v", p)
	}
	other := HeadRef{Group: "Projector", Category: "order", Key: "other"}
	if err := b.Resume(ctx, other); !errors.Is(err, ErrNotPaused) {
		t.Fatalf("resume of a partition not paused: err = %v, want ErrNotPaused", err)
	}
	if _, replaced, err := b.Pause(ctx, other, PauseRecord{Reason: "first"}, time.Minute); err != nil || replaced {
		t.Fatalf("first pause: replaced %v, %v", replaced, err)
	}
	rec, replaced, err := b.Pause(ctx, other, PauseRecord{Reason: "second"}, 0)
	if err != nil || !replaced {
		t.Fatalf("second pause: replaced %v, %v", replaced, err)
	}
	p, _ := b.Paused(ctx, other)
	if p == nil || p.Reason != "second" || !p.Until.IsZero() || !rec.Until.IsZero() {
		t.Fatalf("record after the second pause: %+v", p)
	}
	if ttl := rdb.PTTL(ctx, keyspace.SingleNode.PauseKey("order:other", "Projector")).Val(); ttl != -1 {
		t.Fatalf("a pause without an end kept the first one's expiry: %v", ttl)
	}
}

// A partition paused for one handler is not reaped by another handler's owner, though
// every group is caught up; once resumed it is.
func TestPausedPartitionIsNotReaped(t *testing.T) {
	srv, rdb, b := startNode(t)
	ctx := context.Background()
	log := newSeqLog("")
	d := testDomain(t, log.handle, func(d *Domain) {
		d.AddHandler(Handler{Name: "Audit", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", MaxRetries: 1, Func: func(context.Context, Event) error { return nil }})
	})
	startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(time.Second)
		c.Timing.ReapIdle = 500 * time.Millisecond
	})
	for _, k := range []string{"kept", "cold"} {
		publish(t, b, d, k, 0, false)
	}
	testkit.WaitFor(t, 5*time.Second, "handled", func() bool { return len(log.of("kept")) == 1 && len(log.of("cold")) == 1 })
	ref := HeadRef{Group: "Audit", Category: "order", Key: "kept"}
	if _, _, err := b.Pause(ctx, ref, PauseRecord{Reason: "r"}, 0); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "cold reaped", func() bool { return rdb.Exists(ctx, "order:cold").Val() == 0 })
	time.Sleep(2 * time.Second)
	if rdb.Exists(ctx, "order:kept").Val() == 0 || !isIndexed(t, rdb, "order", "kept") {
		t.Fatal("the paused partition was reaped")
	}
	if err := b.Resume(ctx, ref); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "reaped once resumed", func() bool { return rdb.Exists(ctx, "order:kept").Val() == 0 })
}

// On Redis Cluster a paused partition's lease goes dormant as an idle one's does (the
// heartbeat stops renewing it), though it holds a backlog; the resume gives it its
// expiry back with the first entries and the backlog drains in order.
func TestPausedLeaseGoesDormantOnCluster(t *testing.T) {
	tg, rdb, b := dormantCluster(t)
	k, ctx := keyspace.For(rdb), context.Background()
	log := newSeqLog("A/0") // paused while busy: A/0 in its handler, A/1..5 behind it
	d := testDomain(t, log.handle, nil)
	startEngineOn(t, tg, d, "i1", func(c *EngineConfig) { c.Timing = fastTiming(dormantTTL) })
	for i := 0; i <= 5; i++ {
		publish(t, b, d, "A", i, false)
	}
	<-log.held
	ref := HeadRef{Group: "Projector", Category: "order", Key: "A"}
	if _, _, err := b.Pause(ctx, ref, PauseRecord{Reason: "r"}, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the owner's notice arrives while A/0 runs
	close(log.release)
	lease := k.LeaseKey(k.PartitionStream("order", "A"), "Projector")
	testkit.WaitFor(t, 10*dormantTTL, "the paused lease dormant", func() bool { return rdb.PTTL(ctx, lease).Val() == -1 })
	if got := log.of("A"); len(got) != 1 {
		t.Fatalf("ran %v while paused", got)
	}
	if err := b.Resume(ctx, ref); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "A drained after the resume", func() bool { return len(log.of("A")) == 6 })
	if got := log.of("A"); !slices.Equal(got, seqs(0, 6)) {
		t.Fatalf("ran %v, want %v", got, seqs(0, 6))
	}
	if pttl := rdb.PTTL(ctx, lease).Val(); pttl <= 0 {
		t.Fatalf("the lease has PTTL %v after the resume: not re-armed", pttl)
	}
}

// A pause of a process manager's correlation value reaches the unit's owner: the event in
// flight is the last one that starts, the events read ahead wait, and a resume drains the
// value at once, in publish order. On one node and on a Redis Cluster, with read-ahead.
func TestPauseStopsOneProcessManagerValue(t *testing.T) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		_, b := tg.broker(t)
		ctx := context.Background()
		log := newSeqLog("o-1/0")
		d := pmDomainWith(t, true, func(ctx context.Context, ev Event) error {
			var p struct {
				Order string `json:"order_id"`
				Seq   int    `json:"seq"`
			}
			_ = json.Unmarshal(ev.Data, &p)
			data, _ := json.Marshal(testPayload{Client: p.Order, Seq: p.Seq})
			ev.Key, ev.Data = p.Order, data
			return log.handle(ctx, ev)
		}, nil)
		startEngineOn(t, tg, d, "i1", func(c *EngineConfig) { c.MaxUnacked = 16 })
		const n = 20
		for i := range n {
			pmPublish(t, b, d, "OrderPlaced", "order_id", "o-1", i)
		}
		<-log.held // o-1/0 is in its handler, o-1/1.. read ahead
		ref := HeadRef{Group: "Fulfillment", Category: "order", Key: "o-1", ProcessManager: true}
		if _, _, err := b.Pause(ctx, ref, PauseRecord{Reason: "r", By: "test"}, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the owner's notice arrives while o-1/0 runs
		close(log.release)
		time.Sleep(500 * time.Millisecond)
		if got := log.of("o-1"); !slices.Equal(got, []int{0}) {
			t.Fatalf("the paused value ran %v, want only its event in flight [0]", got)
		}
		if err := b.Resume(ctx, ref); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 3*time.Second, "the value drained after the resume", func() bool { return len(log.of("o-1")) >= n })
		if got := log.of("o-1"); !slices.Equal(got, seqs(0, n)) {
			t.Fatalf("ran %v after the resume, want %v", got, seqs(0, n))
		}
	})
}

// An entry that waits for a handler slot when its partition is paused does not start
// once the slot is free: it goes back with the rest of the read-ahead, and runs after the
// resume as a first attempt.
func TestPauseStopsAnEntryWaitingForASlot(t *testing.T) {
	srv, _, b := startNode(t)
	ctx := context.Background()
	log := newSeqLog("A/0")
	d := testDomain(t, log.handle, nil)
	startEngineWith(t, srv, d, "i1", func(c *EngineConfig) { c.MaxConcurrentHandlers = 1 })
	publish(t, b, d, "A", 0, false)
	<-log.held // A/0 holds the instance's only handler slot
	publish(t, b, d, "B", 0, false)
	publish(t, b, d, "B", 1, false)
	time.Sleep(300 * time.Millisecond) // B's owner read B/0 and waits in line for the slot
	ref := HeadRef{Group: "Projector", Category: "order", Key: "B"}
	if _, _, err := b.Pause(ctx, ref, PauseRecord{Reason: "r"}, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the notice arrives while B/0 waits
	close(log.release)
	time.Sleep(500 * time.Millisecond)
	if got := log.of("B"); len(got) > 0 {
		t.Fatalf("the paused key ran %v: an entry waiting for a slot started after the pause", got)
	}
	if err := b.Resume(ctx, ref); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 3*time.Second, "B drained after the resume", func() bool { return len(log.of("B")) == 2 })
	if got := log.of("B"); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("B ran %v, want [0 1]", got)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.retried) > 0 {
		t.Fatalf("runs counted as retries after the pause: %v", log.retried)
	}
}

// An entry that waits for the acknowledgement of the one before it (max_unacked = 1) when
// its partition is paused does not start once the acknowledgement is confirmed.
func TestPauseStopsAnEntryWaitingForItsAcks(t *testing.T) {
	srv, _, b := startNode(t)
	ctx := context.Background()
	log := newSeqLog("A/0")
	d := testDomain(t, log.handle, nil)
	e := startEngine(t, srv, d, "i1", 2*time.Second)
	for i := range 3 {
		publish(t, b, d, "A", i, false)
	}
	<-log.held // A/0 runs; A/1 and A/2 are read ahead
	// Hold the instance's next acknowledgements until the pause notice is noted.
	noted := make(chan struct{})
	hold := func() { <-noted }
	e.ackHook.Store(&hold)
	close(log.release) // A/1 now waits for the acknowledgement of A/0
	ref := HeadRef{Group: "Projector", Category: "order", Key: "A"}
	if _, _, err := b.Pause(ctx, ref, PauseRecord{Reason: "r"}, 0); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 3*time.Second, "the owner noted the pause", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		w := e.workers[unitID("Projector", "order:A")]
		return w != nil && w.pauseNoted.Load()
	})
	e.ackHook.Store(nil)
	close(noted)
	time.Sleep(500 * time.Millisecond)
	if got := log.of("A"); !slices.Equal(got, []int{0}) {
		t.Fatalf("the paused key ran %v, want only its event in flight [0]", got)
	}
	if err := b.Resume(ctx, ref); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 3*time.Second, "A drained after the resume", func() bool { return len(log.of("A")) == 3 })
	if got := log.of("A"); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("A ran %v, want [0 1 2]", got)
	}
}

// A partition that a handler and a process manager both read is kept while either is
// paused: a pause of the process manager's correlation value keeps it from the handler's
// reap, and a pause of the handler's partition keeps it from the process manager's reap.
// On one node and on a Redis Cluster.
func TestPausedPartitionIsNotReapedByAnotherKindOfUnit(t *testing.T) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		rdb, b := tg.broker(t)
		ctx := context.Background()
		log := newSeqLog("")
		pmRuns := newSeqLog("")
		d := testDomain(t, log.handle, func(d *Domain) {
			d.AddProcessManager(ProcessManager{Name: "Fulfillment", SequentialBy: true, MaxRetries: 1, Func: pmRuns.handle,
				Handles: []PMHandle{{Event: "OrderPlaced", Start: true, Correlate: Correlate{PMField: "client_id", EventField: "client_id"}}}})
		})
		startEngineOn(t, tg, d, "i1", func(c *EngineConfig) { c.Timing.ReapIdle = 500 * time.Millisecond })
		keys := []string{"pm-paused", "handler-paused", "cold"}
		for _, k := range keys {
			publish(t, b, d, k, 0, false)
		}
		testkit.WaitFor(t, 5*time.Second, "handled by both", func() bool {
			for _, k := range keys {
				if len(log.of(k)) != 1 || len(pmRuns.of(k)) != 1 {
					return false
				}
			}
			return true
		})
		pauses := []HeadRef{
			{Group: "Fulfillment", Category: "order", Key: "pm-paused", ProcessManager: true},
			{Group: "Projector", Category: "order", Key: "handler-paused"},
		}
		for _, ref := range pauses {
			if _, _, err := b.Pause(ctx, ref, PauseRecord{Reason: "r"}, 0); err != nil {
				t.Fatal(err)
			}
		}
		k := keyspace.For(rdb)
		exists := func(key string) bool { return rdb.Exists(ctx, k.PartitionStream("order", key)).Val() == 1 }
		testkit.WaitFor(t, 10*time.Second, "cold reaped", func() bool { return !exists("cold") })
		time.Sleep(2 * time.Second) // several reap periods
		for _, key := range keys[:2] {
			if !exists(key) || !isIndexed(t, rdb, "order", key) {
				t.Errorf("%s was reaped while paused", key)
			}
		}
		for _, ref := range pauses {
			if err := b.Resume(ctx, ref); err != nil {
				t.Fatal(err)
			}
		}
		testkit.WaitFor(t, 10*time.Second, "reaped once resumed", func() bool { return !exists("pm-paused") && !exists("handler-paused") })
	})
}
