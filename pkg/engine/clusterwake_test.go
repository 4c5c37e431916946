package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// wakeBound is how long an idle owner may take to handle an entry appended to its lane
// in keyspace mode: a round trip, and a re-subscription after a slot moved. Far below
// every timer that would find the entry otherwise (the reap timer is an hour; an
// unpartitioned stream has none).
const wakeBound = 3 * time.Second

// On Redis Cluster with keyspace notifications, an idle unpartitioned category stream
// (no hash tag: its keyspace channel hashes to another slot than the stream) is woken by
// an entry appended with a plain XADD and by a seqctl publish: keyspace notifications are
// sent by the master that holds the stream, so the doorbell subscribes there.
func TestIdleCategoryStreamWokenOnCluster(t *testing.T) {
	skipShort(t)
	cl := redistest.StartCluster(t, 3)
	tg := redisTarget{cl: cl}
	rdb := tg.client(t)
	ctx := context.Background()
	// A category whose stream and keyspace channel are served by different masters.
	cat := ""
	for i := 0; cat == "" && i < 100; i++ {
		c := fmt.Sprintf("pay%d", i)
		if cl.NodeOf(t, c) != cl.NodeOf(t, keyspace.Cluster.KeyspaceChannel(0, c)) {
			cat = c
		}
	}
	if cat == "" {
		t.Fatal("no category name among 100 has its keyspace channel on another master")
	}
	logKey := "t:ledger"
	d := NewDomain("wake").
		AddEvent(EventType{Name: "Paid", Category: cat, Fields: []string{"n"}}).
		AddHandler(Handler{Name: "Ledger", Kind: EventHandlerKind, PartOf: cat, Handles: []string{"Paid"},
			MaxRetries: 3, Func: func(ctx context.Context, ev Event) error {
				var p struct{ N int }
				_ = json.Unmarshal(ev.Data, &p)
				return rdb.RPush(context.Background(), logKey, p.N).Err()
			}})
	if err := d.Init(NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	b := NewRedisBroker(rdb)
	e := startEngineOn(t, tg, d, "i1", func(c *EngineConfig) { c.KeyspaceNotifications = KeyspaceAuto })
	handled := func() int64 { return rdb.LLen(ctx, logKey).Val() }
	pub := func(n int) {
		t.Helper()
		if _, err := b.Publish(ctx, d, "Paid", []byte(fmt.Sprintf(`{"n":%d}`, n)), PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pub(1)
	testkit.WaitFor(t, 10*time.Second, "the first event handled", func() bool { return handled() == 1 })
	waitKeyspaceWatched(t, e, cat)
	// Another publisher's plain XADD.
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: cat, Values: []any{
		"id", "foreign-2", "type", "Paid", "category", cat, "key", "", "data", `{"n":2}`, "priority", "0",
		"published_at", time.Now().UnixMilli(),
	}}).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testkit.WaitFor(t, wakeBound, "a plain XADD to the idle stream handled", func() bool { return handled() == 2 })
	t.Logf("plain XADD: handled in %v", time.Since(start).Round(time.Millisecond))
	waitKeyspaceWatched(t, e, cat)
	pub(3)
	testkit.WaitFor(t, wakeBound, "a seqctl publish to the idle stream handled", func() bool { return handled() == 3 })
}

// On Redis Cluster with keyspace notifications, an idle partition whose slot moves to
// another master is still woken by the next entry: a plain XADD and a seqctl publish, on
// the new master, each handled within a round trip and a re-subscription.
func TestIdlePartitionWokenAfterItsSlotMoved(t *testing.T) {
	skipShort(t)
	cl := redistest.StartCluster(t, 3)
	tg := redisTarget{cl: cl}
	rdb := tg.client(t)
	d := sinkDomain(t, tg.client(t), "i1", nil)
	b := NewRedisBroker(rdb)
	e := startEngineOn(t, tg, d, "i1", func(c *EngineConfig) { c.KeyspaceNotifications = KeyspaceAuto })
	const key = "mover"
	stream := keyspace.Cluster.PartitionStream("order", key)
	publish(t, b, d, key, 1, false)
	testkit.WaitFor(t, 10*time.Second, "the first event handled", func() bool { return len(logOf(t, rdb, key)) == 1 })
	waitKeyspaceWatched(t, e, stream)
	from := cl.NodeOf(t, stream)
	to := (from + 1) % len(cl.Nodes)
	cl.MoveSlot(t, redistest.Slot(stream), from, to)
	foreignAppend(t, rdb, key, 2)
	start := time.Now()
	testkit.WaitFor(t, wakeBound, "a plain XADD to the moved idle partition handled", func() bool { return len(logOf(t, rdb, key)) == 2 })
	t.Logf("plain XADD after the move: handled in %v", time.Since(start).Round(time.Millisecond))
	waitKeyspaceWatched(t, e, stream)
	publish(t, b, d, key, 3, false)
	testkit.WaitFor(t, wakeBound, "a seqctl publish to the moved idle partition handled", func() bool { return len(logOf(t, rdb, key)) == 3 })
	if got := joinInts(logOf(t, rdb, key)); got != "1,2,3" {
		t.Errorf("handled %s, want 1,2,3", got)
	}
}

// waitKeyspaceWatched waits until the owner of stream is parked with its lease dormant
// (idle for a lease TTL: nothing of the engine's own wakes it any more) and the doorbell
// is in keyspace mode with the lane's keyspace channel subscribed.
func waitKeyspaceWatched(t *testing.T, e *Engine, stream string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "the idle lane watched on its keyspace channel", func() bool {
		e.mu.Lock()
		dormant := false
		for _, w := range e.workers {
			if w.u.name == stream {
				dormant = w.dormant.Load() && w.parked.Load()
			}
		}
		e.mu.Unlock()
		if !dormant {
			return false
		}
		if !e.bell.keyspace.Load() {
			return false
		}
		e.bell.mu.Lock()
		defer e.bell.mu.Unlock()
		b := e.bell.lanes[stream]
		return b != nil && b.hasWaiting() && laneSubscribedKS(b)
	})
	time.Sleep(200 * time.Millisecond) // the confirmation's check has run
}

// laneSubscribedKS reports whether the lane's keyspace channel is subscribed.
func laneSubscribedKS(b *bellLane) bool { return b.ks.on && b.ks.shard != nil }

// CONFIG SET is not replicated: the engine turns keyspace notifications on on the
// replicas too, so that a replica promoted by a failover sends them from its first write.
func TestKeyspaceNotificationsOnReplicas(t *testing.T) {
	skipShort(t)
	cl := redistest.StartClusterReplicated(t, 3, redistest.Options{})
	ctx := context.Background()
	// Every node lists every replica in CLUSTER SLOTS (the client's map of the cluster)
	// once the nodes have told each other, shortly after the start.
	testkit.WaitFor(t, 10*time.Second, "every replica in every node's slot map", func() bool {
		for _, n := range cl.Nodes {
			slots, err := n.Client(t).ClusterSlots(ctx).Result()
			if err != nil {
				return false
			}
			for _, s := range slots {
				if len(s.Nodes) < 2 {
					return false
				}
			}
		}
		return true
	})
	startEngineOn(t, redisTarget{cl: cl}, testDomain(t, func(context.Context, Event) error { return nil }, nil), "a", nil)
	for _, n := range cl.Nodes {
		c := n.Client(t)
		v := c.ConfigGet(ctx, "notify-keyspace-events").Val()["notify-keyspace-events"]
		role := c.Do(ctx, "ROLE").Val().([]any)[0]
		if missing := missingKeyspaceFlags(v); missing != "" {
			t.Errorf("%s (%v): notify-keyspace-events %q lacks %s", n.Addr, role, v, missing)
		}
	}
}
