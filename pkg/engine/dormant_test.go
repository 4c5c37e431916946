package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// On Redis Cluster every lease carries its own expiry; an idle partition's lease goes
// dormant (no expiry, no renewal) one lease TTL after it went idle, and is re-armed
// before its owner starts an event again. These tests run on a real 3-master cluster.

// dormantTTL is the lease TTL of these tests: a lease goes dormant about a TTL after
// its partition went idle.
const dormantTTL = 600 * time.Millisecond

// dormantCluster starts a 3-master cluster and returns a client and a broker on it.
func dormantCluster(t *testing.T) (redisTarget, redis.UniversalClient, *RedisBroker) {
	t.Helper()
	tg := redisTarget{cl: redistest.StartCluster(t, 3)}
	rdb, b := tg.broker(t)
	return tg, rdb, b
}

// TestDormantLeasesOnCluster: idle partitions stop costing renewals, their owner keeps
// them (same generation) when events come again, and a crashed owner's dormant
// partitions are taken over once its session is gone, at a higher generation.
func TestDormantLeasesOnCluster(t *testing.T) {
	tg, rdb, b := dormantCluster(t)
	k, ctx := keyspace.For(rdb), context.Background()
	const ttl = dormantTTL
	timing := func(c *EngineConfig) { c.Timing = fastTiming(ttl) }
	d := sinkDomain(t, tg.client(t), "i1", nil)
	keys := keysOf(12)
	for _, key := range keys {
		publish(t, b, d, key, 0, false)
	}
	e1 := startEngineOn(t, tg, d, "i1", timing)
	e2 := startEngineOn(t, tg, sinkDomain(t, tg.client(t), "i2", nil), "i2", timing)
	handledAll(t, rdb, keys, 1, 10*time.Second)
	lease := func(key string) string { return k.LeaseKey(k.PartitionStream("order", key), "Projector") }
	dormant := func() bool {
		for _, key := range keys {
			if rdb.PTTL(ctx, lease(key)).Val() != -1 {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, 10*ttl, "every idle lease dormant (no expiry)", dormant)
	gens := map[string]int64{}
	for _, o := range append(e1.Owned(), e2.Owned()...) {
		gens[o.Stream] = o.Generation
	}
	if len(gens) != len(keys) {
		t.Fatalf("owned units %d, want %d", len(gens), len(keys))
	}

	// Dormant leases are not renewed: over 5 lease TTLs the masters run the sessions'
	// PEXPIRE (one per instance and heartbeat) and nothing per partition.
	p0 := tg.commandCalls(t, "pexpire")
	time.Sleep(5 * ttl)
	beats := int64(5 * ttl / (ttl / 5))
	if n := tg.commandCalls(t, "pexpire") - p0; n > 2*(beats+2) {
		t.Fatalf("%d PEXPIRE calls in 5 TTLs with 12 dormant partitions: leases are still renewed (sessions alone make at most %d)", n, 2*(beats+2))
	}
	if !dormant() {
		t.Fatal("a dormant lease got an expiry back while its partition stayed idle")
	}

	// Events come again: each is handled by its owner at the same generation (no
	// hand-over), and the lease carries an expiry while the partition is busy.
	for _, key := range keys {
		publish(t, b, d, key, 1, false)
	}
	handledAll(t, rdb, keys, 2, 10*time.Second)
	for _, o := range append(e1.Owned(), e2.Owned()...) {
		if gens[o.Stream] != o.Generation {
			t.Errorf("%s: generation %d after the partition woke, want %d kept", o.Stream, o.Generation, gens[o.Stream])
		}
	}
	armed := 0
	for _, key := range keys {
		if rdb.PTTL(ctx, lease(key)).Val() > 0 {
			armed++
		}
	}
	if armed == 0 {
		t.Error("no lease carries an expiry right after its partition woke: dormant leases are not re-armed")
	}
	testkit.WaitFor(t, 10*ttl, "leases dormant again", dormant)

	// e1 crashes: its dormant partitions go to e2 once e1's session is gone, at a
	// higher generation, and their next events are handled there in order.
	var mine []string
	for _, o := range e1.Owned() {
		mine = append(mine, o.Stream)
	}
	if len(mine) == 0 {
		t.Fatal("i1 owns nothing: the shares did not settle")
	}
	crash(e1)
	testkit.WaitFor(t, 20*ttl, "i2 owns every partition", func() bool { return len(e2.Owned()) == len(keys) })
	took := map[string]bool{}
	for _, m := range mine {
		took[m] = true
	}
	for _, o := range e2.Owned() {
		if took[o.Stream] && o.Generation <= gens[o.Stream] {
			t.Errorf("%s: generation %d after the takeover, want above %d", o.Stream, o.Generation, gens[o.Stream])
		}
	}
	for _, key := range keys {
		publish(t, b, d, key, 2, false)
	}
	handledAll(t, rdb, keys, 3, 10*time.Second)
	checkOrderAndOverlap(t, rdb, keys, 3)
}

// TestDormantLeaseRearmedBeforeAnEvent: the session key of an instance vanishes (the
// master holding it lost data: a failover to a replica that had not received it, a
// restart without persistence) while the instance runs an event on a partition whose
// lease was dormant just before. The event's lease was re-armed before it started, so the
// other instance, which finds the session gone, waits for the lease's expiry: the two
// never run the partition at once.
func TestDormantLeaseRearmedBeforeAnEvent(t *testing.T) {
	tg, rdb, b := dormantCluster(t)
	k, ctx := keyspace.For(rdb), context.Background()
	const ttl = dormantTTL

	var mu sync.Mutex
	type run struct {
		inst       string
		start, end time.Time
		gen        int64
	}
	var runs []run
	var slow, running atomic.Bool
	slow.Store(true)
	handler := func(inst string) HandlerFunc {
		return func(ctx context.Context, ev Event) error {
			var p testPayload
			_ = json.Unmarshal(ev.Data, &p)
			dl, _ := DeliveryFrom(ctx)
			r := run{inst: inst, start: time.Now(), gen: dl.Generation}
			if p.Seq == 1 && slow.CompareAndSwap(true, false) {
				// The slow event, once: it runs until its owner's context ends.
				running.Store(true)
				select {
				case <-ctx.Done():
				case <-time.After(20 * ttl):
				}
			}
			r.end = time.Now()
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			return ctx.Err()
		}
	}
	// i1's heartbeat comes every half TTL: it notices the lost session late, and only its
	// local lease deadline stops the slow event in time.
	timing := func(c *EngineConfig) { c.Timing = fastTiming(ttl); c.Timing.HeartbeatInterval = ttl / 2 }
	d1 := testDomain(t, handler("i1"), nil)
	publish(t, b, d1, "A", 0, false)
	e1 := startEngineOn(t, tg, d1, "i1", timing)
	testkit.WaitFor(t, 5*time.Second, "i1 owns A", func() bool { return len(e1.Owned()) == 1 })
	lease := k.LeaseKey(k.PartitionStream("order", "A"), "Projector")
	testkit.WaitFor(t, 10*ttl, "A's lease dormant", func() bool { return rdb.PTTL(ctx, lease).Val() == -1 })
	startEngineOn(t, tg, testDomain(t, handler("i2"), nil), "i2", func(c *EngineConfig) { c.Timing = fastTiming(ttl) })

	publish(t, b, d1, "A", 1, false)
	testkit.WaitFor(t, 5*time.Second, "i1 runs A's slow event", running.Load)
	v := rdb.Get(ctx, lease).Val()
	if err := rdb.Del(ctx, k.SessionKey(ownerOf(v))).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*ttl, "A's slow event handled again after the loss", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	for i, a := range runs {
		for _, b := range runs[i+1:] {
			if a.gen != b.gen && a.start.Before(b.end) && b.start.Before(a.end) {
				t.Errorf("%s (generation %d, %s to %s) and %s (generation %d, %s to %s) ran A at once",
					a.inst, a.gen, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"),
					b.inst, b.gen, b.start.Format("15:04:05.000"), b.end.Format("15:04:05.000"))
			}
		}
	}
	var slowGen, maxGen int64
	for _, r := range runs {
		if r.end.Sub(r.start) > ttl/4 {
			slowGen = r.gen
		}
		maxGen = max(maxGen, r.gen)
	}
	if maxGen <= slowGen {
		t.Errorf("no run of A above the slow run's generation %d after the loss (%d runs)", slowGen, len(runs))
	}
}

// TestDormantProcessManagerUnitOnCluster: a process manager's unit holds its lease and a
// guard on each category's stream; all of them go dormant together and get their expiry
// back before the next event starts.
func TestDormantProcessManagerUnitOnCluster(t *testing.T) {
	tg, rdb, b := dormantCluster(t)
	ctx := context.Background()
	const ttl = dormantTTL
	var handled atomic.Int64
	var armedAtStart atomic.Bool
	var keys []string // the unit's lease and guards, set once it is owned
	var mu sync.Mutex
	d := pmDomain(t, func(ctx context.Context, ev Event) error {
		mu.Lock()
		ks := keys
		mu.Unlock()
		if len(ks) > 0 {
			armed := true
			for _, k := range ks {
				if rdb.PTTL(ctx, k).Val() <= 0 {
					armed = false
				}
			}
			armedAtStart.Store(armed)
		}
		handled.Add(1)
		return nil
	})
	pub := func(event, field string, seq int) {
		data := fmt.Sprintf(`{%q:"o-1","seq":%d}`, field, seq)
		if _, err := b.Publish(ctx, d, event, []byte(data), PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pub("OrderPlaced", "order_id", 0)
	pub("PaymentConfirmed", "order_ref", 0)
	e := startEngineOn(t, tg, d, "i1", func(c *EngineConfig) { c.Timing = fastTiming(ttl) })
	testkit.WaitFor(t, 5*time.Second, "both events handled", func() bool { return handled.Load() == 2 })
	e.mu.Lock()
	for _, w := range e.workers {
		keys = append([]string{w.leaseKey}, w.u.guards...)
	}
	e.mu.Unlock()
	if len(keys) != 3 {
		t.Fatalf("the unit holds %d lease keys, want its lease and 2 guards", len(keys))
	}
	testkit.WaitFor(t, 10*ttl, "the lease and guards dormant", func() bool {
		for _, k := range keys {
			if rdb.PTTL(ctx, k).Val() != -1 {
				return false
			}
		}
		return true
	})
	pub("PaymentConfirmed", "order_ref", 1)
	testkit.WaitFor(t, 5*time.Second, "the next event handled", func() bool { return handled.Load() == 3 })
	if !armedAtStart.Load() {
		t.Error("the event started while the unit's lease or a guard had no expiry")
	}
}

// lostDormancyReply is a client hook that lets the first call making a lease dormant
// (renew.lua with a TTL of "0") run in Redis and then loses its reply, as a timeout or a
// dropped connection would: the caller cannot tell whether the lease lost its expiry.
type lostDormancyReply struct{ lost atomic.Int32 }

func (h *lostDormancyReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lostDormancyReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *lostDormancyReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if len(a) > 4 && fmt.Sprint(a[0]) == "evalsha" && fmt.Sprint(a[1]) == scripts.Hash("renew.lua") && fmt.Sprint(a[4]) == "0" &&
			err == nil && h.lost.CompareAndSwap(0, 1) {
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return err
	}
}

// A lease whose move to dormancy got no answer may be dormant in Redis (no expiry): its
// worker must treat it as dormant, so that the next event starts only after the lease got
// its expiry back. Otherwise the event would run on a lease that lives only while the
// session key does, and another instance that finds the session gone (a failover that
// lost it) would take the partition while the event runs.
func TestDormancyWithoutAnAnswerRearmsBeforeTheNextEvent(t *testing.T) {
	tg, rdb, b := dormantCluster(t)
	k, ctx := keyspace.For(rdb), context.Background()
	lease := k.LeaseKey(k.PartitionStream("order", "k1"), "Projector")
	var ttlAtRun sync.Map // seq -> the lease's PTTL when the handler ran
	handler := func(ctx context.Context, ev Event) error {
		var p testPayload
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			return err
		}
		ttlAtRun.Store(p.Seq, rdb.PTTL(ctx, lease).Val())
		return nil
	}
	d := testDomain(t, handler, nil)
	hook := &lostDormancyReply{}
	client := tg.client(t)
	client.AddHook(hook)
	startEngineOn(t, tg, d, "i1", func(c *EngineConfig) {
		c.Client = client
		c.Timing = fastTiming(3 * time.Second) // heartbeats 600 ms apart
	})
	publish(t, b, d, "k1", 0, false)
	testkit.WaitFor(t, 10*time.Second, "the first event handled", func() bool { _, ok := ttlAtRun.Load(0); return ok })
	testkit.WaitFor(t, 20*time.Second, "the move to dormancy sent, its reply lost", func() bool { return hook.lost.Load() == 1 })
	if pttl := rdb.PTTL(ctx, lease).Val(); pttl != -1 {
		t.Fatalf("the lease has a PTTL of %v after the dormancy call ran: the call did not run", pttl)
	}
	publish(t, b, d, "k1", 1, false)
	testkit.WaitFor(t, 10*time.Second, "the next event handled", func() bool { _, ok := ttlAtRun.Load(1); return ok })
	if v, _ := ttlAtRun.Load(1); v.(time.Duration) <= 0 {
		t.Errorf("the next event ran on a lease without an expiry (PTTL %v): it was not re-armed first", v)
	}
}
