package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Two instances, interleaved events for several keys; each key's
// committed sequence equals its publish sequence, no two events of one key are ever in
// the handler at once (cross-instance marker), and different keys do run concurrently.
// Half-way the first instance shuts down, so ownership changes hands mid-stream.
func TestPerKeyOrderAndNoOverlapAcrossInstances(t *testing.T) {
	onBoth(t, testPerKeyOrderAndNoOverlap)
}

func testPerKeyOrderAndNoOverlap(t *testing.T, tg redisTarget) {
	rdb, b := tg.broker(t)
	keys := keysOf(6)
	const perKey = 120

	mk := func(id string) (*Domain, *sink) {
		s := &sink{rdb: tg.client(t), instance: id, work: 300 * time.Microsecond}
		return testDomain(t, s.handle, nil), s
	}
	d1, _ := mk("i1")
	d2, _ := mk("i2")
	timing := func(c *EngineConfig) { c.Timing = fastTiming(2 * time.Second) }
	e1 := startEngineOn(t, tg, d1, "i1", timing)
	for _, k := range keys {
		publish(t, b, d1, k, 0, false)
	}
	testkit.WaitFor(t, 10*time.Second, "i1 owns every key", func() bool { return len(e1.Owned()) == len(keys) })
	startEngineOn(t, tg, d2, "i2", timing)

	for seq := 1; seq < perKey; seq++ {
		for _, k := range keys {
			publish(t, b, d1, k, seq, false)
		}
		if seq == perKey/2 {
			if err := e1.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range keys {
		testkit.WaitFor(t, 30*time.Second, "key "+k+" drained", func() bool { return len(logOf(t, rdb, k)) >= perKey })
	}
	for _, k := range keys {
		if diff := cmp.Diff(seqs(0, perKey), logOf(t, rdb, k)); diff != "" {
			t.Errorf("key %s: committed order differs from publish order (-want +got):\n%s", k, diff)
		}
	}
	if n, _ := rdb.Get(context.Background(), "t:overlap").Int(); n != 0 {
		t.Errorf("%d events entered the handler while another event of the same key was inside", n)
	}
	// Cross-key parallelism: every pair of keys has overlapping [first, last] windows.
	type win struct{ first, last int64 }
	wins := map[string]win{}
	for _, k := range keys {
		m := rdb.HGetAll(context.Background(), sinkKey("win", k)).Val()
		f, _ := strconv.ParseInt(m["first"], 10, 64)
		l, _ := strconv.ParseInt(m["last"], 10, 64)
		wins[k] = win{f, l}
	}
	a, bb := wins[keys[0]], wins[keys[1]]
	if !(a.first < bb.last && bb.first < a.last) {
		t.Errorf("keys %s and %s never ran concurrently: %v %v", keys[0], keys[1], a, bb)
	}
	i1 := rdb.LLen(context.Background(), "t:starts:i1").Val()
	i2 := rdb.LLen(context.Background(), "t:starts:i2").Val()
	if i1 == 0 || i2 == 0 {
		t.Errorf("both instances should have handled events (i1=%d i2=%d)", i1, i2)
	}
}

// A poison event at A's head halts A only; B drains; the halt record is
// readable; nothing goes to a DLQ; a stale Skip changes nothing; the right Skip resumes A
// without a restart.
func TestHaltIsScopedAndSkipResumes(t *testing.T) { onBoth(t, testHaltIsScopedAndSkipResumes) }

func testHaltIsScopedAndSkipResumes(t *testing.T, tg redisTarget) {
	rdb, b := tg.broker(t)
	d := sinkDomain(t, tg.client(t), "i1", func(d *Domain) { d.Handlers[0].MaxRetries = 2 })
	timing := func(c *EngineConfig) { c.Timing = fastTiming(2 * time.Second) }
	startEngineOn(t, tg, d, "i1", timing)
	startEngineOn(t, tg, sinkDomain(t, tg.client(t), "i2", func(d *Domain) { d.Handlers[0].MaxRetries = 2 }), "i2", timing)

	var first Published
	for seq := 0; seq < 20; seq++ {
		poison := seq == 5
		p := publish(t, b, d, "A", seq, poison)
		if poison {
			first = p
		}
		publish(t, b, d, "B", seq, false)
	}
	testkit.WaitFor(t, 20*time.Second, "B drained", func() bool { return len(logOf(t, rdb, "B")) == 20 })
	ref := HeadRef{Group: "Projector", Category: "order", Key: "A"}
	var h *HaltRecord
	testkit.WaitFor(t, 20*time.Second, "A halted", func() bool {
		var err error
		h, err = b.Halt(context.Background(), ref)
		return err == nil && h != nil
	})
	if h.EntryID != first.EntryID || h.Attempts != 2 || h.Stream != b.Keys().PartitionStream("order", "A") || h.Error == "" {
		t.Fatalf("halt record = %+v, want entry %s after 2 attempts on %s with an error", h, first.EntryID, b.Keys().PartitionStream("order", "A"))
	}
	time.Sleep(300 * time.Millisecond) // give a broken engine the chance to advance A
	if diff := cmp.Diff(seqs(0, 5), logOf(t, rdb, "A")); diff != "" {
		t.Fatalf("A advanced past its poison head (-want +got):\n%s", diff)
	}
	if n := rdb.Exists(context.Background(), b.Keys().DLQStream("order", "A")).Val(); n != 0 {
		t.Fatal("the poison head was moved to a DLQ automatically")
	}

	// A stale expected id changes nothing.
	err := b.Skip(context.Background(), ref, "1-1", false)
	var moved *HeadMovedError
	if !errors.As(err, &moved) || !errors.Is(err, ErrHeadMoved) || moved.Head != first.EntryID {
		t.Fatalf("Skip with a stale id: err = %v, want HeadMovedError naming %s", err, first.EntryID)
	}
	if h2, _ := b.Halt(context.Background(), ref); h2 == nil || h2.EntryID != first.EntryID {
		t.Fatalf("stale Skip changed the halt record: %+v", h2)
	}

	if err := b.Skip(context.Background(), ref, first.EntryID, false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "A resumed", func() bool { return len(logOf(t, rdb, "A")) == 19 })
	want := append(seqs(0, 5), seqs(6, 20)...)
	if diff := cmp.Diff(want, logOf(t, rdb, "A")); diff != "" {
		t.Fatalf("A after skip (-want +got):\n%s", diff)
	}
	if h3, _ := b.Halt(context.Background(), ref); h3 != nil {
		t.Fatalf("halt record still present after skip: %+v", h3)
	}
}

// In one process: once another instance has taken the lease, the stale
// owner's read, ack and reclaim are each rejected with ErrFenced and change nothing.
func TestStaleOwnerIsFenced(t *testing.T) {
	srv, rdb, b := startNode(t)
	block := make(chan struct{})
	d := testDomain(t, func(ctx context.Context, ev Event) error { <-block; return nil }, nil)
	e1 := startEngine(t, srv, d, "stale", time.Second)
	defer close(block)
	for i := 0; i < 4; i++ {
		publish(t, b, d, "A", i, false)
	}
	var w *worker
	testkit.WaitFor(t, 5*time.Second, "stale owns A with entries in flight", func() bool {
		e1.mu.Lock()
		w = e1.workers["Projector\x00order:A"]
		e1.mu.Unlock()
		p, err := rdb.XPending(context.Background(), "order:A", "Projector").Result()
		return w != nil && err == nil && p.Count > 0
	})
	inflight := rdb.XPending(context.Background(), "order:A", "Projector").Val().Lower
	// Simulate a stall past the TTL: the session expires and another instance takes over.
	rdb.Del(context.Background(), keyspace.SingleNode.SessionKey(w.owner))
	e2 := startEngine(t, srv, testDomain(t, func(ctx context.Context, ev Event) error { <-block; return nil }, nil), "fresh", time.Second)
	testkit.WaitFor(t, 5*time.Second, "fresh owns A", func() bool { return len(e2.Owned()) == 1 })
	if got := e2.Owned()[0].Generation; got <= w.gen {
		t.Fatalf("takeover generation %d is not above the stale %d", got, w.gen)
	}
	// The new owner's first read creates its consumer (claiming the in-flight head, whose
	// handler then blocks): wait for it, so the group holds still from here on.
	testkit.WaitFor(t, 5*time.Second, "fresh's first read", func() bool {
		for _, c := range rdb.XInfoConsumers(context.Background(), "order:A", "Projector").Val() {
			if strings.HasPrefix(c.Name, "fresh.") && c.Pending > 0 {
				return true
			}
		}
		return false
	})
	before := rdb.XInfoGroups(context.Background(), "order:A").Val()

	stale := &worker{e: e1, sub: w.sub, u: w.u, lanes: w.lanes, leaseKey: w.leaseKey, haltKey: w.haltKey,
		owner: w.owner, token: w.token, gen: w.gen, consumer: w.consumer, ctx: context.Background()}
	if _, err := stale.drain(nil); !errors.Is(err, ErrFenced) {
		t.Errorf("stale read: err = %v, want ErrFenced", err)
	}
	if err := stale.ack(context.Background(), 0, []string{inflight}); !errors.Is(err, ErrFenced) {
		t.Errorf("stale ack: err = %v, want ErrFenced", err)
	}
	if _, err := stale.drain(&entry{msg: redis.XMessage{ID: inflight}}); !errors.Is(err, ErrFenced) {
		t.Errorf("stale reclaim: err = %v, want ErrFenced", err)
	}
	after := rdb.XInfoGroups(context.Background(), "order:A").Val()
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("stale calls changed the group (-before +after):\n%s", diff)
	}
}

// A handler that runs longer than the lease TTL in a healthy process keeps
// its lease: no takeover, no duplicate.
func TestLongHandlerKeepsLease(t *testing.T) { onBoth(t, testLongHandlerKeepsLease) }

// On Redis Cluster the lease carries its own expiry: the heartbeat's renew.lua keeps it.
func testLongHandlerKeepsLease(t *testing.T, tg redisTarget) {
	rdb, b := tg.broker(t)
	const ttl = 400 * time.Millisecond
	timing := func(c *EngineConfig) { c.Timing = fastTiming(ttl) }
	s1 := &sink{rdb: tg.client(t), instance: "i1", work: 3 * ttl}
	d := testDomain(t, s1.handle, nil)
	e1 := startEngineOn(t, tg, d, "i1", timing)
	publish(t, b, d, "A", 0, false)
	testkit.WaitFor(t, 5*time.Second, "i1 owns A", func() bool { return len(e1.Owned()) == 1 })
	gen := e1.Owned()[0].Generation
	s2 := &sink{rdb: tg.client(t), instance: "i2", work: 3 * ttl}
	startEngineOn(t, tg, testDomain(t, s2.handle, nil), "i2", timing)
	publish(t, b, d, "A", 1, false)
	testkit.WaitFor(t, 10*time.Second, "A handled", func() bool { return len(logOf(t, rdb, "A")) == 2 })
	if diff := cmp.Diff([]int{0, 1}, logOf(t, rdb, "A")); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if n := rdb.LLen(context.Background(), "t:starts:i2").Val(); n != 0 {
		t.Fatalf("the second instance took over a live owner's partition (%d starts)", n)
	}
	if o := e1.Owned(); len(o) != 1 || o[0].Generation != gen {
		t.Fatalf("owner changed: %+v, want generation %d kept", o, gen)
	}
}

// Unsafe keys fail at publish with the typed reason; nothing is written.
func TestUnsafeKeysFailAtPublish(t *testing.T) {
	_, rdb, b := startNode(t)
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'k'
	}
	cases := []struct {
		name string
		data string
		rule KeyRule
	}{
		{"null", `{"client_id":null}`, KeyEmpty},
		{"missing", `{"seq":1}`, KeyEmpty},
		{"empty", `{"client_id":""}`, KeyEmpty},
		{"too long", `{"client_id":"` + string(long) + `"}`, KeyTooLong},
		{"colon", `{"client_id":"a:b"}`, KeyHasColon},
		{"dlq", `{"client_id":"dlq"}`, KeyReservedToken},
		{"backfill", `{"client_id":"backfill"}`, KeyReservedToken},
		{"sentinel", `{"client_id":"__partitions__"}`, KeySentinel},
		{"float", `{"client_id":1.5}`, KeyWrongType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.Publish(context.Background(), d, "OrderPlaced", []byte(c.data), PublishOptions{})
			var ike *InvalidKeyError
			if !errors.As(err, &ike) || ike.Rule != c.rule || ike.Category != "order" {
				t.Fatalf("err = %v, want rule %v on category order", err, c.rule)
			}
			if n := rdb.DBSize(context.Background()).Val(); n != 0 {
				t.Fatalf("Redis has %d keys after a rejected publish", n)
			}
		})
	}
}

// The inline broker handles events in submission order and refuses
// partition operations with ErrNotSupported.
func TestInlineBroker(t *testing.T) {
	var got []int
	d := NewDomain("inline").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "seq"}}).
		AddHandler(Handler{Name: "P", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"}, SequentialBy: "client_id",
			Func: func(_ context.Context, ev Event) error {
				var p testPayload
				_ = jsonUnmarshal(ev.Data, &p)
				got = append(got, p.Seq)
				return nil
			}})
	ib := NewInlineBroker()
	if err := d.Init(ib); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.PartitionField("order"); ok {
		t.Fatal("the inline broker must not activate partitioning")
	}
	if err := ib.Start(d); err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	for i := 0; i < 50; i++ {
		key := "k" + strconv.Itoa(i%3)
		p, err := ib.Publish(context.Background(), d, "OrderPlaced", []byte(`{"client_id":"`+key+`","seq":`+strconv.Itoa(i)+`}`), PublishOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Stream != "order" {
			t.Fatalf("inline routes to %q, want the base category", p.Stream)
		}
	}
	ib.Wait()
	if diff := cmp.Diff(seqs(0, 50), got); diff != "" {
		t.Fatalf("inline order (-want +got):\n%s", diff)
	}
	ref := HeadRef{Group: "P", Category: "order", Key: "k0"}
	for name, err := range map[string]error{
		"skip":  ib.Skip(context.Background(), ref, "1-0", false),
		"dlq":   ib.MoveToDLQ(context.Background(), ref, "1-0", false),
		"retry": ib.Retry(context.Background(), ref, "1-0"),
	} {
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s: err = %v, want ErrNotSupported", name, err)
		}
	}
	if _, err := ib.Halt(context.Background(), ref); !errors.Is(err, ErrNotSupported) {
		t.Errorf("halt: err = %v, want ErrNotSupported", err)
	}
}

// A graceful hand-over gives back the entries the owner read but never started with
// their delivery count restored: the next owner sees them as first attempts.
func TestGracefulHandOverKeepsAttemptCounts(t *testing.T) {
	srv, _, b := startNode(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	d1 := testDomain(t, func(ctx context.Context, ev Event) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		return nil
	}, nil)
	e1 := startEngine(t, srv, d1, "i1", 2*time.Second)
	for i := 0; i < 6; i++ {
		publish(t, b, d1, "A", i, false)
	}
	<-started // event 0 in flight, 1..5 read in the same batch
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	if err := e1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	attempts := nextOwnerAttempts(t, srv, 5, "the rest handled by i2", func(ev Event) int {
		var p testPayload
		_ = json.Unmarshal(ev.Data, &p)
		return p.Seq
	})
	if diff := cmp.Diff(map[int]int{1: 1, 2: 1, 3: 1, 4: 1, 5: 1}, attempts); diff != "" {
		t.Errorf("attempt numbers after a graceful hand-over (-want +got):\n%s", diff)
	}
}

// nextOwnerAttempts starts the instance i2 on srv, waits until it delivered n events,
// and returns the attempt each was delivered at, by the key that of gives the event.
func nextOwnerAttempts[K comparable](t *testing.T, srv *redistest.Server, n int, what string, of func(Event) K) map[K]int {
	t.Helper()
	var mu sync.Mutex
	attempts := map[K]int{}
	d2 := testDomain(t, func(ctx context.Context, ev Event) error {
		dl, _ := DeliveryFrom(ctx)
		mu.Lock()
		attempts[of(ev)] = dl.Attempt
		mu.Unlock()
		return nil
	}, nil)
	startEngine(t, srv, d2, "i2", 2*time.Second)
	testkit.WaitFor(t, 5*time.Second, what, func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == n })
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(attempts)
}

// Two consumer groups of one instance waiting on the same idle stream are both woken by
// a new entry (the doorbell keeps a set of watchers per stream).
func TestTwoGroupsOnOneStreamBothWake(t *testing.T) {
	srv, _, b := startNode(t)
	var mu sync.Mutex
	seen := map[string]int{}
	rec := func(name string) HandlerFunc {
		return func(ctx context.Context, ev Event) error {
			mu.Lock()
			seen[name]++
			mu.Unlock()
			return nil
		}
	}
	d := testDomain(t, rec("Projector"), func(d *Domain) {
		d.AddHandler(Handler{Name: "Auditor", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", Func: rec("Auditor")})
	})
	startEngine(t, srv, d, "i1", 2*time.Second)
	count := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return seen["Projector"] == n && seen["Auditor"] == n }
	}
	publish(t, b, d, "A", 0, false)
	testkit.WaitFor(t, 5*time.Second, "both handled the first event", count(1))
	time.Sleep(300 * time.Millisecond) // both workers now wait on order:A
	for i := 1; i <= 3; i++ {
		publish(t, b, d, "A", i, false)
		testkit.WaitFor(t, 3*time.Second, fmt.Sprintf("both handled event %d", i), count(i+1))
		time.Sleep(100 * time.Millisecond)
	}
}
