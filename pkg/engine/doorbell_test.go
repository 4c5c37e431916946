package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The publish and replay scripts ring the lane's doorbell: SPUBLISH from inside a Lua
// script, with the new entry id, on the lane's sharded channel.
func TestScriptsRingTheLaneBell(t *testing.T) {
	srv, rdb, b := startNode(t)
	ctx := context.Background()
	d := testDomain(t, nil, nil)
	stream := keyspace.SingleNode.PartitionStream("order", "A")
	ps := srv.Client(t).SSubscribe(ctx, keyspace.SingleNode.BellChannel(stream))
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		m, err := ps.ReceiveMessage(rctx)
		if err != nil {
			t.Fatal(err)
		}
		return m.Channel + " " + m.Payload
	}

	p := publish(t, b, d, "A", 0, true)
	if diff := cmp.Diff(keyspace.SingleNode.BellChannel(stream)+" "+p.EntryID, next()); diff != "" {
		t.Errorf("publish ring (-want +got):\n%s", diff)
	}

	// A duplicate publish appends nothing and rings nothing: the next ring is the replay's.
	data, _ := json.Marshal(testPayload{Client: "A", Seq: 1})
	first, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{ID: "ev-1"})
	if err != nil {
		t.Fatal(err)
	}
	if dup, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{ID: "ev-1"}); err != nil || !dup.Duplicate {
		t.Fatalf("second publish of ev-1: %+v, %v; want a duplicate", dup, err)
	}
	if got := next(); got != keyspace.SingleNode.BellChannel(stream)+" "+first.EntryID {
		t.Errorf("ring of ev-1: %q", got)
	}
	ref := HeadRef{Group: "Projector", Category: "order", Key: "A"}
	if err := rdb.XGroupCreate(ctx, stream, "Projector", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "Projector", Consumer: "c", Streams: []string{stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.MoveToDLQ(ctx, ref, p.EntryID, true); err != nil {
		t.Fatal(err)
	}
	r, err := d.Route("OrderPlaced", []byte(`{"client_id":"A","seq":0}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := rdb.XRange(ctx, keyspace.SingleNode.DLQStream("order", "A"), "-", "+").Result()
	if err != nil || len(dl) != 1 {
		t.Fatalf("DLQ: %v, %v", dl, err)
	}
	rp, err := b.ReplayDLQ(ctx, keyspace.SingleNode.DLQStream("order", "A"), dl[0].ID, r)
	if err != nil {
		t.Fatal(err)
	}
	if got := next(); got != keyspace.SingleNode.BellChannel(stream)+" "+rp.EntryID {
		t.Errorf("replay ring: %q, want the replayed entry %s", got, rp.EntryID)
	}
}

// handledCounter counts handled events per key.
type handledCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *handledCounter) handle(_ context.Context, ev Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[ev.Key]++
	return nil
}

func (h *handledCounter) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[key]
}

// startCounting starts a redis-server with o and returns it, a client of it, a broker on
// a client of its own, and a domain whose Projector counts in h the events it handles.
func startCounting(t *testing.T, o redistest.Options) (*redistest.Server, *redis.Client, *RedisBroker, *Domain, *handledCounter) {
	t.Helper()
	srv := redistest.StartWith(t, o)
	h := &handledCounter{}
	return srv, srv.Client(t), NewRedisBroker(srv.Client(t)), testDomain(t, h.handle, nil), h
}

// An entry published right as its partition goes idle, between the owner's empty read
// and its subscription (the first time) or its registration as waiting (after that), is
// never stuck: the test hook publishes at exactly that point, each time the worker goes
// idle. The reap period is an hour and nothing polls, so a lost wake-up would leave the
// event unhandled.
func TestDoorbellEntryPublishedAsPartitionGoesIdle(t *testing.T) {
	onBothWakeups(t, testDoorbellEntryPublishedAsPartitionGoesIdle)
}

// onBothWakeups runs a test with the idle partitions' wake-ups on keyspace notifications
// (the default where Redis allows them) and on the bells alone.
func onBothWakeups(t *testing.T, fn func(t *testing.T, mode string)) {
	for _, mode := range []string{KeyspaceAuto, KeyspaceOff} {
		t.Run("keyspace="+mode, func(t *testing.T) { fn(t, mode) })
	}
}

// subscribers returns how many clients subscribe the lane's bell and its keyspace channel.
func subscribers(t *testing.T, rdb *redis.Client, stream string) int64 {
	t.Helper()
	ctx := context.Background()
	bell, ks := keyspace.SingleNode.BellChannel(stream), keyspace.SingleNode.KeyspaceChannel(0, stream)
	return rdb.PubSubShardNumSub(ctx, bell).Val()[bell] + rdb.PubSubNumSub(ctx, ks).Val()[ks]
}

func testDoorbellEntryPublishedAsPartitionGoesIdle(t *testing.T, mode string) {
	srv, rdb, b, d, h := startCounting(t, redistest.Options{})
	const rounds = 20
	var fired atomic.Int32
	var subscribedRounds atomic.Int32
	e := startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(2 * time.Second)
		c.KeyspaceNotifications = mode
	})
	hook := func(w *worker) {
		n := fired.Add(1)
		if n > rounds {
			return
		}
		// Was the lane subscribed (and confirmed) before this round? Then also make the
		// ring reach the doorbell before the worker registers as waiting.
		e.bell.mu.Lock()
		bl := e.bell.lanes[w.lanes[0]]
		var before uint64
		if bl != nil {
			before = bl.seq
		}
		e.bell.mu.Unlock()
		data, _ := json.Marshal(testPayload{Client: "A", Seq: int(n)})
		if _, err := b.Publish(context.Background(), d, "OrderPlaced", data, PublishOptions{}); err != nil {
			t.Error(err)
			return
		}
		if bl != nil {
			subscribedRounds.Add(1)
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				e.bell.mu.Lock()
				moved := bl.seq != before
				e.bell.mu.Unlock()
				if moved {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	e.bell.onIdle.Store(&hook)
	t.Cleanup(func() { e.bell.onIdle.Store(nil) })

	publish(t, b, d, "A", 0, false)
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("all %d events of A handled", rounds+1), func() bool { return h.count("A") >= rounds+1 })
	if subscribedRounds.Load() == 0 {
		t.Error("no round ran with the lane already subscribed")
	}
	t.Logf("%d rounds, %d with the lane subscribed; subscribers of the lane: %d", rounds, subscribedRounds.Load(), subscribers(t, rdb, keyspace.SingleNode.PartitionStream("order", "A")))
}

// Redis restarts (from its append-only file, so sessions and leases survive) while the
// partitions are idle: the doorbell's pub/sub connection drops, the client reconnects
// and subscribes again, every idle worker reads again, and an event published after the
// restart is handled promptly by the same owner, without a takeover.
func TestDoorbellAfterRedisRestart(t *testing.T) {
	skipShort(t)
	srv, rdb, b, d, h := startCounting(t, redistest.Options{AOF: true})
	keys := keysOf(20)
	startEngine(t, srv, d, "i1", 10*time.Second)
	startEngine(t, srv, d, "i2", 10*time.Second)
	// Round seq publishes event seq of every key; it is handled once each key has seq+1.
	publishRound := func(seq int) {
		for _, k := range keys {
			publish(t, b, d, k, seq, false)
		}
	}
	roundHandled := func(seq int) func() bool {
		return func() bool {
			for _, k := range keys {
				if h.count(k) < seq+1 {
					return false
				}
			}
			return true
		}
	}
	publishRound(0)
	testkit.WaitFor(t, 10*time.Second, "the first events handled", roundHandled(0))
	time.Sleep(500 * time.Millisecond) // every worker idle and subscribed
	leases := func() map[string]string {
		out := map[string]string{}
		for _, k := range keys {
			out[k] = rdb.Get(context.Background(), keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector")).Val()
		}
		return out
	}
	before := leases()

	srv.Stop()
	time.Sleep(300 * time.Millisecond)
	srv.StartAgain()
	start := time.Now()
	publishRound(1)
	testkit.WaitFor(t, 5*time.Second, "the events published after the restart handled", roundHandled(1))
	t.Logf("%d events published after the restart handled within %v", len(keys), time.Since(start).Round(time.Millisecond))
	if diff := cmp.Diff(before, leases()); diff != "" {
		t.Errorf("leases moved across the restart (-before +after); the test is meant to keep the owners:\n%s", diff)
	}

	// Idle again: one more event per key is still a wake-up away.
	time.Sleep(300 * time.Millisecond)
	start = time.Now()
	publishRound(2)
	testkit.WaitFor(t, 3*time.Second, "the next events handled", roundHandled(2))
	t.Logf("next round handled within %v", time.Since(start).Round(time.Millisecond))
}

// A worker that exits (here: its partition is reaped) unsubscribes its lane, and the
// doorbell forgets it; the engine keeps running.
func TestDoorbellUnsubscribesOnExit(t *testing.T) { onBothWakeups(t, testDoorbellUnsubscribesOnExit) }

func testDoorbellUnsubscribesOnExit(t *testing.T, mode string) {
	srv, rdb, b, d, h := startCounting(t, redistest.Options{})
	e := startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(2 * time.Second)
		c.Timing.ReapIdle = 1500 * time.Millisecond
		c.KeyspaceNotifications = mode
	})
	stream := keyspace.SingleNode.PartitionStream("order", "A")
	subs := func() int64 { return subscribers(t, rdb, stream) }
	publish(t, b, d, "A", 0, false)
	testkit.WaitFor(t, 5*time.Second, "the lane subscribed", func() bool { return subs() == 1 })
	testkit.WaitFor(t, 10*time.Second, "the partition reaped", func() bool { return rdb.Exists(context.Background(), stream).Val() == 0 })
	testkit.WaitFor(t, 5*time.Second, "the subscription gone", func() bool { return subs() == 0 })
	testkit.WaitFor(t, 5*time.Second, "the doorbell to forget the lane", func() bool {
		e.bell.mu.Lock()
		defer e.bell.mu.Unlock()
		return len(e.bell.lanes) == 0
	})
	// Published again, the partition is discovered, owned and woken as before.
	publish(t, b, d, "A", 1, false)
	testkit.WaitFor(t, 5*time.Second, "the partition back", func() bool { return h.count("A") == 2 })
	publish(t, b, d, "A", 2, false)
	testkit.WaitFor(t, 5*time.Second, "the next event", func() bool { return h.count("A") == 3 })
}

// A ring or a confirmation finds its lane from the channel's name: bellLanes inverts
// Keys.BellChannel in both layouts, for every kind of lane stream, and finds nothing for
// another channel.
func TestBellLanesInvertBellChannel(t *testing.T) {
	for _, k := range []keyspace.Keys{keyspace.SingleNode, keyspace.Cluster} {
		streams := []string{
			k.CategoryStream("order"), k.PartitionStream("order", "A"), k.LaneStream("order", "A", "backfill"),
			k.PartitionStream("order", "a:b}{c"), k.PMUnit("pm", "v"), "{odd}", "odd",
		}
		d := &doorbell{e: &Engine{keys: k}, lanes: map[string]*bellLane{}}
		for _, s := range streams {
			d.lanes[s] = &bellLane{stream: s}
		}
		for _, s := range streams {
			var found []string
			d.bellLanes(k.BellChannel(s), func(b *bellLane) { found = append(found, b.stream) })
			if !slices.Contains(found, s) {
				t.Errorf("cluster %v: the channel %q of %q finds %q", k.IsCluster(), k.BellChannel(s), s, found)
			}
			for _, f := range found {
				if k.BellChannel(f) != k.BellChannel(s) {
					t.Errorf("cluster %v: the channel %q finds %q, whose channel is %q", k.IsCluster(), k.BellChannel(s), f, k.BellChannel(f))
				}
			}
		}
		for _, ch := range []string{"order", "{order}", "{order}:__bell", "order:__bell__", "x" + k.BellChannel(streams[1])} {
			d.bellLanes(ch, func(b *bellLane) { t.Errorf("cluster %v: the channel %q finds %q", k.IsCluster(), ch, b.stream) })
		}
	}
}
