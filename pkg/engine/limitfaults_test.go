package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// A run that outlives its permit's TTL while Redis forgets its scripts (SCRIPT FLUSH, as
// after a failover to a replica that never loaded them) keeps its permit: the renewal is
// sent again after the scripts are loaded, never skipped while the deadline moves on. A
// run of another key of the tenant, published meanwhile, waits for it: the cap of 1
// holds.
func TestLimitPermitRenewedAfterScriptFlush(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 0)
	runs.hold = "k1/0"
	d := limitDomain(t, runs.handle, HandlerLimit{Concurrency: 1})
	startEngine(t, srv, d, "i1", time.Second)
	startEngine(t, srv, d, "i2", time.Second)
	publishLimited(t, b, d, "acme", "k1", 0)
	<-runs.held
	// Redis forgets its scripts again and again for 2.5 s (past the permit's TTL of 1 s:
	// renewals were needed), so that no other call's reload covers for the renewals.
	flushUntil := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(flushUntil) {
		if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	publishLimited(t, b, d, "acme", "k2", 0)
	time.Sleep(1500 * time.Millisecond)
	if got := runs.of("k2"); len(got) != 0 {
		t.Errorf("k2 ran %v while k1's run held the tenant's only permit", got)
	}
	close(runs.release)
	testkit.WaitFor(t, 10*time.Second, "k2 handled after k1", func() bool { return len(runs.of("k2")) == 1 })
	if m := maxConcurrent(t, rdb, "acme"); m != 1 {
		t.Errorf("the tenant had %d runs at once, want at most 1 (its cap)", m)
	}
}

// The permits are renewed on the session's own connections: a shared pool that is busy
// (every connection taken by slow calls) does not starve them, so a run that outlives
// its permit's TTL goes on with its permit and nothing else of the instance is lost.
func TestLimitPermitRenewalSurvivesABusySharedPool(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 0)
	runs.hold = "k1/0"
	var mu sync.Mutex
	var cancelled []string
	d := limitDomain(t, func(ctx context.Context, ev Event) error {
		err := runs.handle(ctx, ev)
		if ctx.Err() != nil {
			mu.Lock()
			cancelled = append(cancelled, string(ev.Data))
			mu.Unlock()
		}
		return err
	}, HandlerLimit{Concurrency: 1})
	shared := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4, MaxActiveConns: 4, PipelinePoolSize: -1, PoolTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = shared.Close() })
	e := runEngine(t, EngineConfig{Domain: d, Client: shared, InstanceID: "i1", Timing: fastTiming(time.Second),
		DiscoveryInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second})
	publishLimited(t, b, d, "acme", "k1", 0)
	<-runs.held
	inc := e.sess.live()
	// Every connection of the shared pool blocks for 3 s (three permit TTLs).
	var wg sync.WaitGroup
	blocked := time.Now()
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = shared.BLPop(context.Background(), 3*time.Second, fmt.Sprintf("t:nothing:%d", i)).Err()
		}()
	}
	wg.Wait()
	if took := time.Since(blocked); took < 3*time.Second {
		t.Fatalf("the shared pool was busy for %v only, want 3 s", took)
	}
	if got := e.sess.live(); got != inc || got == nil {
		t.Errorf("the instance's session ended while its shared pool was busy (permit renewals starved)")
	}
	close(runs.release)
	testkit.WaitFor(t, 10*time.Second, "k1 handled", func() bool { return len(runs.of("k1")) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(cancelled) != 0 {
		t.Errorf("runs cancelled: %v", cancelled)
	}
}

// A take whose reply was lost (it ran in Redis) is safe to send again: the holder gets
// the permit it holds back, not a refusal behind its own orphan, and no second one.
func TestLimitTakeAgainAfterALostReply(t *testing.T) {
	_, rdb, _ := startNode(t)
	ctx := context.Background()
	k := keyspace.For(rdb)
	take := scripts.LimitTake{Permits: k.LimitKey("Projector", "acme"), Starts: k.LimitStartsKey("Projector", "acme"),
		Holder: "i1#a:7", Concurrency: 1, Rate: 10, Window: time.Second, TTL: 2 * time.Second}
	first, err := take.Run(ctx, rdb)
	if err != nil || !first.Taken {
		t.Fatalf("first take: %+v, %v", first, err)
	}
	again, err := take.Run(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Taken || again.Slot != first.Slot || again.Generation != first.Generation {
		t.Fatalf("the take sent again got %+v, want the permit it holds back (slot %d, generation %d)", again, first.Slot, first.Generation)
	}
	if n, _ := rdb.ZCard(ctx, take.Starts).Result(); n != 1 {
		t.Errorf("%d starts counted, want 1 (the take sent again is the same start)", n)
	}
	other := take
	other.Holder = "i2#b:3"
	if g, _ := other.Run(ctx, rdb); g.Taken {
		t.Errorf("another holder got a second permit under a cap of 1: %+v", g)
	}
}

// After Redis time stepped back (a failover to a master whose clock is behind), the
// starts of the rate stay in the window one window at most: they are scored by time, a
// start scored in the future counts as now.
func TestLimitRateAfterTimeStepsBack(t *testing.T) {
	_, rdb, _ := startNode(t)
	ctx := context.Background()
	k := keyspace.For(rdb)
	take := scripts.LimitTake{Permits: k.LimitKey("Projector", "acme"), Starts: k.LimitStartsKey("Projector", "acme"),
		Rate: 2, Window: time.Second, TTL: 2 * time.Second}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The generation counter as a master 20 s ahead left it.
	ahead := strconv.FormatInt(now.Add(20*time.Second).UnixMicro(), 10)
	if err := rdb.HSet(ctx, take.Permits, "gen", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	// A start now and one 0.6 s later (which keeps the log alive), then one 1.1 s after
	// the first: by then the first has left the window of 1 s, so there is room.
	for i, wait := range []time.Duration{0, 600 * time.Millisecond, 500 * time.Millisecond} {
		time.Sleep(wait)
		take.Holder = fmt.Sprintf("h%d", i)
		g, err := take.Run(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		if !g.Taken {
			t.Fatalf("take %d was refused (%s, wait %v): a start stayed in the window longer than the window", i, g.Reason, g.Wait)
		}
	}
}

// A window of any whole number of milliseconds is written in a form that is read back:
// an override with a 2 s window is applied by the instances and listed.
func TestLimitOverrideWindowsRoundTrip(t *testing.T) {
	for _, per := range []time.Duration{time.Second, time.Minute, time.Hour, 2 * time.Second, 1500 * time.Millisecond, 250 * time.Millisecond, 90 * time.Minute} {
		o := keyspace.LimitOverride{Rate: 10, Per: per}
		back, err := keyspace.DecodeLimitOverride(o.Encode())
		if err != nil {
			t.Errorf("%v: %s is not read back: %v", per, o.Encode(), err)
			continue
		}
		if back.Rate != 10 || back.Per != per {
			t.Errorf("%v: read back as %d per %v", per, back.Rate, back.Per)
		}
	}
	_, _, b := startNode(t)
	ctx := context.Background()
	for _, per := range []time.Duration{500 * time.Microsecond, 1500 * time.Microsecond} {
		if _, err := b.SetLimit(ctx, "Projector", "acme", LimitOverride{Rate: 5, Per: per}); err == nil {
			t.Errorf("a window of %v was accepted; a window is a whole number of milliseconds", per)
		}
	}
	if _, err := b.SetLimit(ctx, "Projector", "acme", LimitOverride{Rate: 5, Per: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	all, err := b.Limits(ctx, "Projector")
	if err != nil {
		t.Fatalf("the overrides of the handler cannot be listed: %v", err)
	}
	if o := all["acme"]; o.Rate != 5 || o.Per != 2*time.Second {
		t.Errorf("listed %+v, want 5 per 2s", o)
	}
}

// When Redis refuses one event of a PublishMany call, the later events of its stream in
// the call are not appended; sending the refused one and those after it again keeps the
// key's publish order.
func TestPublishManyKeepsOrderAfterARefusal(t *testing.T) {
	// 4 events a key fit one publishbatch.lua call on one node; 60 take two, so the events
	// of ro-a after the refused one are in both.
	for _, perKey := range []int{4, 60} {
		t.Run(fmt.Sprint(perKey), func(t *testing.T) { publishManyKeepsOrderAfterARefusal(t, perKey) })
	}
}

func publishManyKeepsOrderAfterARefusal(t *testing.T, perKey int) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		rdb, b := tg.broker(t)
		ctx := context.Background()
		d := sinkDomain(t, rdb, "i1", nil)
		var batch []BatchEvent
		for seq := range perKey {
			for _, key := range []string{"ro-a", "ro-b"} {
				data, _ := json.Marshal(testPayload{Client: key, Seq: seq})
				batch = append(batch, BatchEvent{Type: "OrderPlaced", Data: data, ID: fmt.Sprintf("ev-%s-%d", key, seq)})
			}
		}
		k := keyspace.For(rdb)
		streamA := k.PartitionStream("order", "ro-a")
		// Event 1 of ro-a (batch index 2) is refused: its event mark is of the wrong type.
		bad := k.EventMarkKey(streamA, "ev-ro-a-1")
		if err := rdb.HSet(ctx, bad, "x", "y").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := b.PublishMany(ctx, d, batch, BatchOptions{})
		var be *BatchError
		if !errors.As(err, &be) || be.Index != 2 {
			t.Fatalf("got %v, want a refusal of event 2", err)
		}
		// The other stream's events were all appended, the refused one's none after it.
		if n := rdb.XLen(ctx, k.PartitionStream("order", "ro-b")).Val(); n != int64(perKey) {
			t.Errorf("ro-b holds %d entries after the refusal, want %d", n, perKey)
		}
		if n := rdb.XLen(ctx, streamA).Val(); n != 1 {
			t.Errorf("ro-a holds %d entries after the refusal, want 1 (the one before it)", n)
		}
		if err := rdb.Del(ctx, bad).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.PublishMany(ctx, d, batch[be.Index:], BatchOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"ro-a", "ro-b"} {
			msgs, err := rdb.XRange(ctx, k.PartitionStream("order", key), "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, m := range msgs {
				ev, err := EventFromMessage(m)
				if err != nil {
					t.Fatal(err)
				}
				var p testPayload
				_ = json.Unmarshal(ev.Data, &p)
				got = append(got, p.Seq)
			}
			if want := seqs(0, perKey); !slices.Equal(got, want) {
				t.Errorf("%s holds %v, want %v", key, got, want)
			}
		}
		// An event whose predecessor's mark is missing (it was refused) is not appended.
		call := b.publishCall(Route{Category: "order", Key: "ro-c", Stream: k.PartitionStream("order", "ro-c")},
			Event{ID: "ev-ro-c-1", Type: "OrderPlaced", Data: []byte(`{"client_id":"ro-c"}`)}, 0)
		call.After = k.EventMarkKey(call.Stream, "ev-ro-c-0")
		res, err := call.Run(ctx, rdb)
		if err != nil || !res.AfterRefused || res.Appended {
			t.Errorf("after a missing predecessor: %+v, %v; want not appended", res, err)
		}
	})
}

// A tenant's partitions spread over three instances under limit_concurrency = 1, each
// instance with a backlog of the tenant: the instances take turns, so each one's share
// of the tenant's runs is within 2x of the others' (the instance that gives a permit back
// does not win it again while others wait).
func TestLimitTurnsAcrossInstances(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 10*time.Millisecond)
	var mu sync.Mutex
	var order []string // the instance of each run, in order
	var d *Domain
	for _, id := range []string{"i1", "i2", "i3"} {
		d = limitDomain(t, func(ctx context.Context, ev Event) error {
			if err := runs.handle(ctx, ev); err != nil {
				return err
			}
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			return nil
		}, HandlerLimit{Concurrency: 1})
		startEngine(t, srv, d, id, 2*time.Second)
	}
	// Every instance owns some of the tenant's partitions before the backlog arrives.
	const keys, events = 12, 12
	for k := range keys {
		publishLimited(t, b, d, "acme", fmt.Sprintf("t-%d", k), 0)
	}
	testkit.WaitFor(t, 20*time.Second, "the first events handled", func() bool { return runs.total() >= keys })
	owners := map[string]int{}
	mu.Lock()
	for _, id := range order {
		owners[id]++
	}
	order = nil
	mu.Unlock()
	if len(owners) < 3 {
		t.Skipf("the partitions went to %d instances only (%v): nothing to share", len(owners), owners)
	}
	for seq := 1; seq < events; seq++ {
		for k := range keys {
			publishLimited(t, b, d, "acme", fmt.Sprintf("t-%d", k), seq)
		}
	}
	// The turns while every instance still has a backlog: 3 runs per partition owned by
	// the instance that owns the fewest.
	fewest := keys
	for _, n := range owners {
		fewest = min(fewest, n)
	}
	window := 3 * 3 * fewest
	testkit.WaitFor(t, 60*time.Second, "a window of runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) >= window })
	mu.Lock()
	share := map[string]int{}
	for _, id := range order[:window] {
		share[id]++
	}
	mu.Unlock()
	lo, hi := window, 0
	for _, id := range []string{"i1", "i2", "i3"} {
		lo, hi = min(lo, share[id]), max(hi, share[id])
	}
	t.Logf("partitions per instance %v; runs per instance in the first %d: %v", owners, window, share)
	if hi > 2*lo {
		t.Errorf("runs per instance %v in the first %d runs of a backlog on every instance: not within 2x", share, window)
	}
	testkit.WaitFor(t, 60*time.Second, "every event handled", func() bool { return runs.total() >= keys*events })
	if m := maxConcurrent(t, rdb, "acme"); m != 1 {
		t.Errorf("the tenant had %d runs at once, want 1", m)
	}
}

// An instance whose handler slots are all busy does not hold a permit of a value while
// its partition waits for a slot: another instance's partition of the value runs
// meanwhile.
func TestLimitNoPermitHeldWhileWaitingForASlot(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 0)
	runs.hold = "busy-0/0"
	d := limitDomain(t, runs.handle, HandlerLimit{Concurrency: 1})
	startEngineWith(t, srv, d, "i1", func(c *EngineConfig) { c.Timing = fastTiming(2 * time.Second); c.MaxConcurrentHandlers = 1 })
	release := sync.OnceFunc(func() { close(runs.release) })
	t.Cleanup(release)                            // before the engines' shutdown, which waits for the held run
	publishLimited(t, b, d, "other", "busy-0", 0) // takes i1's only slot, until released
	<-runs.held
	publishLimited(t, b, d, "acme", "a-0", 0) // owned by i1: waits for its slot
	time.Sleep(500 * time.Millisecond)
	startEngine(t, srv, d, "i2", 2*time.Second)
	publishLimited(t, b, d, "acme", "a-1", 0)
	publishLimited(t, b, d, "acme", "a-2", 0)
	testkit.WaitFor(t, 10*time.Second, "another partition of acme handled while i1's slot is busy", func() bool {
		return len(runs.of("a-1"))+len(runs.of("a-2")) > 0
	})
	release()
	testkit.WaitFor(t, 10*time.Second, "every event handled", func() bool { return runs.total() == 4 })
}
