package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Low-priority events land on the backfill lane; a key with events
// on both lanes has its primary events handled first; order within each lane equals
// publish order; reaping removes both lanes.
func TestPriorityLanes(t *testing.T) { onBoth(t, testPriorityLanes) }

func testPriorityLanes(t *testing.T, tg redisTarget) {
	rdb := tg.client(t)
	ks := keyspace.For(rdb)
	b := NewRedisBroker(rdb)
	var mu sync.Mutex
	var got []string // "lane/seq"
	handler := func(ctx context.Context, ev Event) error {
		d, _ := DeliveryFrom(ctx)
		var p testPayload
		_ = json.Unmarshal(ev.Data, &p)
		mu.Lock()
		got = append(got, d.Stream+"/"+strconv.Itoa(p.Seq))
		mu.Unlock()
		return nil
	}
	d := testDomain(t, handler, func(d *Domain) { d.LanesEnabled, d.LanesThreshold = true, 5 })
	var wantPrimary, wantBackfill []string
	for seq := 0; seq < 40; seq++ {
		prio := 10
		if seq%2 == 0 {
			prio = 1 // below the threshold: backfill
		}
		data, _ := json.Marshal(testPayload{Client: "A", Seq: seq})
		p, err := b.Publish(context.Background(), d, "OrderPlaced", data, PublishOptions{Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		want := ks.PartitionStream("order", "A")
		if prio < 5 {
			want = ks.LaneStream("order", "A", "backfill")
		}
		if p.Stream != want {
			t.Fatalf("priority %d routed to %s, want %s", prio, p.Stream, want)
		}
		if prio < 5 {
			wantBackfill = append(wantBackfill, want+"/"+strconv.Itoa(seq))
		} else {
			wantPrimary = append(wantPrimary, want+"/"+strconv.Itoa(seq))
		}
	}
	startEngineOn(t, tg, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(time.Second)
		c.Timing.ReapIdle = 500 * time.Millisecond
	})
	waitFor(t, 10*time.Second, "all handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 40 })
	mu.Lock()
	if diff := cmp.Diff(append(wantPrimary, wantBackfill...), got); diff != "" {
		t.Errorf("primary lane first, then backfill, each in publish order (-want +got):\n%s", diff)
	}
	mu.Unlock()
	waitFor(t, 10*time.Second, "both lanes reaped", func() bool {
		return rdb.Exists(context.Background(), ks.PartitionStream("order", "A"), ks.LaneStream("order", "A", "backfill")).Val() == 0 &&
			len(ks.IndexMembers(context.Background(), rdb, "order").Val()) == 0
	})
}

// pmDomain declares order and payment categories and a sequential process manager that
// correlates both on the order id.
func pmDomain(tb testing.TB, fn HandlerFunc) *Domain {
	tb.Helper()
	return pmDomainWith(tb, true, fn, nil)
}

// pmDomainWith declares the process manager Fulfillment over order and payment, with
// sequential_by as given; mod adds to the domain before Init.
func pmDomainWith(tb testing.TB, sequential bool, fn HandlerFunc, mod func(*Domain)) *Domain {
	tb.Helper()
	d := NewDomain("pm").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "seq"}}).
		AddEvent(EventType{Name: "PaymentConfirmed", Category: "payment", Fields: []string{"order_ref", "seq"}}).
		AddProcessManager(ProcessManager{Name: "Fulfillment", SequentialBy: sequential, Func: fn, Handles: []PMHandle{
			{Event: "OrderPlaced", Correlate: Correlate{PMField: "order_id", EventField: "order_id"}, Start: true},
			{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}},
		}})
	if mod != nil {
		mod(d)
	}
	if err := d.Init(NewRedisBroker(nil)); err != nil {
		tb.Fatal(err)
	}
	return d
}

// A process manager over order and payment correlated by order id,
// two instances, two correlation values with interleaved events: no two events of one
// value in the handler at once (cross-instance marker), the two values progress in
// parallel, and a category partition that appears after the lease joins the unit.
func TestProcessManagerOwnsCorrelationValue(t *testing.T) {
	onBoth(t, testProcessManagerOwnsCorrelationValue)
}

func testProcessManagerOwnsCorrelationValue(t *testing.T, tg redisTarget) {
	rdb := tg.client(t)
	b := NewRedisBroker(rdb)
	mk := func(id string) HandlerFunc {
		c := tg.client(t)
		return func(ctx context.Context, ev Event) error {
			var m map[string]any
			_ = json.Unmarshal(ev.Data, &m)
			value, _ := m["order_id"].(string)
			if value == "" {
				value, _ = m["order_ref"].(string)
			}
			bg := context.Background()
			if !c.SetNX(bg, "t:pm:"+value, id, time.Minute).Val() {
				c.Incr(bg, "t:overlap")
			}
			now := strconv.FormatInt(time.Now().UnixNano(), 10)
			c.HSetNX(bg, "t:win:"+value, "first", now)
			time.Sleep(2 * time.Millisecond)
			c.HSet(bg, "t:win:"+value, "last", strconv.FormatInt(time.Now().UnixNano(), 10))
			c.RPush(bg, "t:pmlog:"+value, ev.Type+"/"+fmt.Sprint(m["seq"])+"/"+id)
			c.Del(bg, "t:pm:"+value)
			return nil
		}
	}
	d1 := pmDomain(t, mk("i1"))
	e1 := startEngineOn(t, tg, d1, "i1", func(c *EngineConfig) { c.Timing = fastTiming(time.Second) })
	startEngineOn(t, tg, pmDomain(t, mk("i2")), "i2", func(c *EngineConfig) { c.Timing = fastTiming(time.Second) })

	pub := func(event, field, value string, seq int) {
		data := fmt.Sprintf(`{%q:%q,"seq":%d}`, field, value, seq)
		if _, err := b.Publish(context.Background(), d1, event, []byte(data), PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// First only order events: the lease is taken before any payment stream exists.
	for seq := 0; seq < 5; seq++ {
		pub("OrderPlaced", "order_id", "o-1", seq)
		pub("OrderPlaced", "order_id", "o-2", seq)
	}
	waitFor(t, 10*time.Second, "order events handled", func() bool {
		return rdb.LLen(context.Background(), "t:pmlog:o-1").Val() == 5 && rdb.LLen(context.Background(), "t:pmlog:o-2").Val() == 5
	})
	for seq := 5; seq < 60; seq++ {
		pub("OrderPlaced", "order_id", "o-1", seq)
		pub("PaymentConfirmed", "order_ref", "o-1", seq)
		pub("OrderPlaced", "order_id", "o-2", seq)
		pub("PaymentConfirmed", "order_ref", "o-2", seq)
	}
	for _, v := range []string{"o-1", "o-2"} {
		waitFor(t, 20*time.Second, v+" handled", func() bool { return rdb.LLen(context.Background(), "t:pmlog:"+v).Val() == 115 })
	}
	if n, _ := rdb.Get(context.Background(), "t:overlap").Int(); n != 0 {
		t.Errorf("%d events of one correlation value overlapped", n)
	}
	// Per category, per value: publish order.
	for _, v := range []string{"o-1", "o-2"} {
		var orders, payments []int
		owners := map[string]bool{}
		for _, s := range rdb.LRange(context.Background(), "t:pmlog:"+v, 0, -1).Val() {
			f := strings.Split(s, "/")
			n, _ := strconv.Atoi(f[1])
			owners[f[2]] = true
			if f[0] == "OrderPlaced" {
				orders = append(orders, n)
			} else {
				payments = append(payments, n)
			}
		}
		if diff := cmp.Diff(seqs(0, 60), orders); diff != "" {
			t.Errorf("%s order events (-want +got):\n%s", v, diff)
		}
		if diff := cmp.Diff(seqs(5, 60), payments); diff != "" {
			t.Errorf("%s payment events (-want +got):\n%s", v, diff)
		}
		if len(owners) != 1 {
			t.Errorf("%s was handled by %v; the payment partition should have joined the unit's owner", v, owners)
		}
	}
	w1 := rdb.HGetAll(context.Background(), "t:win:o-1").Val()
	w2 := rdb.HGetAll(context.Background(), "t:win:o-2").Val()
	if !(w1["first"] < w2["last"] && w2["first"] < w1["last"]) {
		t.Errorf("the two correlation values did not progress in parallel: %v %v", w1, w2)
	}
	_ = e1
}

// A drained idle partition disappears from the index and Redis;
// a partition with a pending (halted) head, with a group that is behind, or with a
// registered group that has never read it, is not reaped; a publish to a just-reaped key
// is handled, under a higher generation than before.
func TestReaping(t *testing.T) { onBoth(t, testReaping) }

func testReaping(t *testing.T, tg redisTarget) {
	rdb := tg.client(t)
	ks := keyspace.For(rdb)
	ctx := context.Background()
	b := NewRedisBroker(rdb)
	s := &sink{rdb: tg.client(t), instance: "i1"}
	d := testDomain(t, s.handle, func(d *Domain) { d.Handlers[0].MaxRetries = 1 })
	const idle = time.Second
	e := startEngineOn(t, tg, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(time.Second)
		c.Timing.ReapIdle = idle
	})
	publish(t, b, d, "cold", 0, false)
	publish(t, b, d, "halted", 0, true) // poison, halts at once (max_retries 1)
	publish(t, b, d, "behind", 0, false)
	publish(t, b, d, "ghost", 0, false)
	publish(t, b, d, "stray", 0, false)
	waitFor(t, 5*time.Second, "first events handled", func() bool {
		return len(logOf(t, rdb, "cold")) == 1 && len(logOf(t, rdb, "behind")) == 1 && len(logOf(t, rdb, "ghost")) == 1 &&
			len(logOf(t, rdb, "stray")) == 1
	})
	genBefore := leaseGen(t, rdb, "cold")
	// Two more groups are expected on the category. Both are caught up on "cold" and
	// "halted"; "Lagging" has read nothing of "behind"; "Ghost" has never read "ghost".
	for _, k := range []string{"cold", "halted", "behind", "ghost", "stray"} {
		for _, g := range []string{"Lagging", "Ghost"} {
			switch {
			case k == "behind" && g == "Lagging":
				rdb.XGroupCreate(ctx, ks.PartitionStream("order", k), g, "0")
			case k == "ghost" && g == "Ghost":
			default:
				rdb.XGroupCreate(ctx, ks.PartitionStream("order", k), g, "$")
			}
		}
	}
	rdb.SAdd(ctx, keyspace.SingleNode.GroupRegistry("order"), "Lagging", "Ghost")
	// "stray" has a group that no registry names (it registered after the reaper read the
	// registry, say, or was never registered): present on the stream and behind, it keeps
	// the partition too.
	rdb.XGroupCreate(ctx, ks.PartitionStream("order", "stray"), "Stray", "0")
	waitFor(t, 10*time.Second, "cold reaped", func() bool {
		return rdb.Exists(ctx, ks.PartitionStream("order", "cold")).Val() == 0 && !isIndexed(t, rdb, "order", "cold")
	})
	if rdb.Exists(ctx, ks.LeaseKey(ks.PartitionStream("order", "cold"), "Projector")).Val() != 0 {
		t.Error("the reaped partition's lease is still there")
	}
	if tg.cl != nil && rdb.Exists(ctx, ks.GenerationKey(ks.PartitionStream("order", "cold"), "Projector")).Val() != 0 {
		t.Error("the reaped partition's generation counter is still there")
	}
	time.Sleep(3 * idle)
	for _, k := range []string{"halted", "behind", "ghost", "stray"} {
		if !isIndexed(t, rdb, "order", k) || rdb.Exists(ctx, ks.PartitionStream("order", k)).Val() == 0 {
			t.Errorf("partition %s was reaped", k)
		}
	}

	// A publish to the just-reaped key is handled, under a higher generation.
	publish(t, b, d, "cold", 1, false)
	waitFor(t, 5*time.Second, "re-created partition handled", func() bool { return len(logOf(t, rdb, "cold")) == 2 })
	if g := leaseGen(t, rdb, "cold"); g <= genBefore {
		t.Errorf("generation after re-creation %d, want above %d", g, genBefore)
	}
	_ = e
}

// 60 partitions; one instance, then a second, then a third: each
// ends up owning 20 +/- 2 within 10 heartbeat intervals, with no event lost or reordered.
func TestFairShare(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := NewRedisBroker(rdb)
	keys := keysOf(60)
	const ttl = time.Second
	const hb = ttl / 5
	var engines []*Engine
	start := func(id string) {
		s := &sink{rdb: srv.Client(t), instance: id}
		engines = append(engines, startEngine(t, srv, testDomain(t, s.handle, nil), id, ttl))
	}
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	for _, k := range keys {
		publish(t, b, d, k, 0, false)
	}
	start("i1")
	waitFor(t, 10*time.Second, "i1 owns all", func() bool { return len(engines[0].Owned()) == 60 })
	seq := 1
	publishRound := func() {
		for _, k := range keys {
			publish(t, b, d, k, seq, false)
		}
		seq++
	}
	balanced := func(n int) {
		t.Helper()
		want := 60 / n
		deadline := time.Now().Add(10 * hb)
		for {
			publishRound()
			ok := true
			counts := []int{}
			for _, e := range engines {
				c := len(e.Owned())
				counts = append(counts, c)
				if c < want-2 || c > want+2 {
					ok = false
				}
			}
			if ok {
				t.Logf("%d instances own %v", n, counts)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d instances own %v after 10 heartbeat intervals, want %d +/- 2 each", n, counts, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	start("i2")
	balanced(2)
	start("i3")
	balanced(3)
	for r := 0; r < 5; r++ {
		publishRound()
	}
	for _, k := range keys {
		waitFor(t, 20*time.Second, k+" drained", func() bool { return len(logOf(t, rdb, k)) >= seq })
		got, _ := dedupFirst(logOf(t, rdb, k))
		if diff := cmp.Diff(seqs(0, seq), got); diff != "" {
			t.Fatalf("%s lost or reordered events across hand-overs (-want +got):\n%s", k, diff)
		}
	}
}

// After 100,000 events through one hot partition the stream holds
// only a small bounded number of acknowledged entries; after 5 takeovers the group has at
// most 2 consumers.
func TestBoundedGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 events: skipped with -short")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	b := NewRedisBroker(rdb)
	var handled sync.Map
	count := func() int { n := 0; handled.Range(func(any, any) bool { n++; return true }); return n }
	h := func(_ context.Context, ev Event) error { handled.Store(ev.ID, true); return nil }
	d := testDomain(t, h, nil)
	const total = 100_000
	events := make([]testPayload, total)
	for i := range events {
		events[i] = testPayload{Client: "hot", Seq: i}
	}
	startEngine(t, srv, d, "i0", time.Second)
	bulkPublish(t, b, d, events)
	waitFor(t, 60*time.Second, "100,000 handled", func() bool { return count() >= total })
	n := rdb.XLen(ctx, "order:hot").Val()
	t.Logf("stream length after %d events: %d", total, n)
	if n > 2*trimEvery {
		t.Errorf("stream holds %d entries after the handler kept up; want at most %d", n, 2*trimEvery)
	}

	// Five takeovers after crashes: each new owner reclaims and cleans old consumers.
	const ttl = 400 * time.Millisecond
	prev := startEngine(t, srv, testDomain(t, h, nil), "c0", ttl)
	for i := 1; i <= 5; i++ {
		publish(t, b, d, "hot", total+i, false)
		waitFor(t, 10*time.Second, "handled", func() bool { return count() >= total+i+0 })
		crash(prev)
		prev = startEngine(t, srv, testDomain(t, h, nil), "c"+strconv.Itoa(i), ttl)
	}
	publish(t, b, d, "hot", total+6, false)
	waitFor(t, 10*time.Second, "last handled", func() bool { return count() >= total+6 })
	waitFor(t, 5*time.Second, "old consumers removed", func() bool {
		return len(rdb.XInfoConsumers(ctx, "order:hot", "Projector").Val()) <= 2
	})
}

// Crossing the live-partitions threshold logs a warning once and
// shows in Stats.
func TestCardinalityWarning(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := NewRedisBroker(rdb)
	var buf syncBuffer
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	e := startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.MaxPartitionsWarning = 3
		c.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	})
	for _, k := range keysOf(5) {
		publish(t, b, d, k, 0, false)
	}
	waitFor(t, 5*time.Second, "stats", func() bool { return e.Stats().LivePartitions["order"] == 5 })
	time.Sleep(300 * time.Millisecond) // several discovery passes
	if n := strings.Count(buf.String(), "live partitions above the threshold"); n != 1 {
		t.Errorf("warning logged %d times, want once per crossing:\n%s", n, buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A fresh instance whose fair share leaves room for a few units takes the free one on its
// first pass, instead of spending the room on attempts against units held by live owners
// it has not seen yet.
func TestFairShareRoomGoesToFreeUnits(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	b := NewRedisBroker(rdb)
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	keys := keysOf(31)
	for _, k := range keys {
		publish(t, b, d, k, 0, false)
	}
	// Nine live instances (sessions and registry entries) hold every key but the last.
	for i := 0; i < 9; i++ {
		owner := fmt.Sprintf("ghost%d.1", i)
		rdb.Set(ctx, keyspace.SingleNode.SessionKey(owner), "x", time.Hour)
		info := keyspace.Instance{ID: fmt.Sprintf("ghost%d", i), Owner: owner}.Encode()
		rdb.HSet(ctx, keyspace.SingleNode.InstancesKey(), fmt.Sprintf("ghost%d", i), info)
	}
	for i, k := range keys[:30] {
		rdb.Set(ctx, keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector"), fmt.Sprintf("ghost%d.1:%d", i%9, i+1), 0)
	}
	e := startEngineWith(t, srv, d, "fresh", func(c *EngineConfig) { c.DiscoveryInterval = time.Hour }) // the first pass only
	waitFor(t, 5*time.Second, "the free unit owned", func() bool {
		o := e.Owned()
		return len(o) == 1 && o[0].Stream == keyspace.SingleNode.PartitionStream("order", keys[30])
	})
}

// A lease value read by a discovery pass is not cached when the unit's release notice
// arrived during that pass: the value may predate the release, and a cached live owner
// would make every instance skip the now free unit.
func TestReleaseDuringPassIsNotCachedAsOwned(t *testing.T) {
	e := &Engine{knownOwner: map[string]string{}, releasedAt: map[string]uint64{}}
	id := "Projector\x00order:A"
	passStart := e.releaseSeq
	e.forgetOwner("Projector", "order:A") // the doorbell handles the release mid-pass
	e.cacheOwner(id, "other.1:7", passStart)
	if _, ok := e.knownOwner[id]; ok {
		t.Fatal("a lease read before the release was cached as the owner")
	}
	e.cacheOwner(id, "other.1:8", e.releaseSeq) // a later pass may cache it
	if e.knownOwner[id] != "other.1:8" {
		t.Fatalf("cache = %q", e.knownOwner[id])
	}
}
