package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// 60 partitions; one instance, then a second, then a third: each
// ends up owning 20 +/- 2 within 10 heartbeat intervals, with no event lost or reordered.
func TestFairShare(t *testing.T) {
	srv, rdb, b := startNode(t)
	keys := keysOf(60)
	const ttl = time.Second
	const hb = ttl / 5
	var engines []*Engine
	start := func(id string) {
		engines = append(engines, startEngine(t, srv, sinkDomain(t, srv.Client(t), id, nil), id, ttl))
	}
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	for _, k := range keys {
		publish(t, b, d, k, 0, false)
	}
	start("i1")
	testkit.WaitFor(t, 10*time.Second, "i1 owns all", func() bool { return len(engines[0].Owned()) == 60 })
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
		testkit.WaitFor(t, 20*time.Second, k+" drained", func() bool { return len(logOf(t, rdb, k)) >= seq })
		got, _ := dedupFirst(logOf(t, rdb, k))
		if diff := cmp.Diff(seqs(0, seq), got); diff != "" {
			t.Fatalf("%s lost or reordered events across hand-overs (-want +got):\n%s", k, diff)
		}
	}
}

// A fresh instance whose fair share leaves room for a few units takes the free one on its
// first pass, instead of spending the room on attempts against units held by live owners
// it has not seen yet.
func TestFairShareRoomGoesToFreeUnits(t *testing.T) {
	srv, rdb, b := startNode(t)
	ctx := context.Background()
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
	testkit.WaitFor(t, 5*time.Second, "the free unit owned", func() bool {
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

// leaseCounter counts the leases taken.
type leaseCounter struct {
	nopObserver
	n atomic.Int64
}

func (c *leaseCounter) LeaseAcquired(string) { c.n.Add(1) }

// Two instances started back to back share the partitions from their first passes: no
// instance takes everything and hands half over a discovery interval later.
func TestStartTogetherTakesFairShares(t *testing.T) {
	const parts = 64
	srv, _, d := startBacklog(t, parts)
	var taken leaseCounter
	start := time.Now()
	var es []*Engine
	for _, id := range []string{"a", "b"} {
		es = append(es, startEngineWith(t, srv, d, id, func(c *EngineConfig) {
			c.DiscoveryInterval = 2 * time.Second // the default: start-up settle 125-250 ms
			c.Observer = &taken
		}))
	}
	balanced := func() bool {
		a, b := len(es[0].Owned()), len(es[1].Owned())
		return a+b == parts && a >= parts/2-1 && a <= parts/2+1
	}
	testkit.WaitFor(t, 5*time.Second, "fair shares", balanced)
	t.Logf("balanced %v after the starts: owned %d and %d", time.Since(start).Round(time.Millisecond), len(es[0].Owned()), len(es[1].Owned()))
	time.Sleep(2 * es[0].cfg.DiscoveryInterval) // any hand-over would come within a pass or two
	moves := taken.n.Load() - parts
	t.Logf("%d leases taken for %d partitions: %d hand-overs", taken.n.Load(), parts, moves)
	if moves > 2 {
		t.Errorf("%d hand-overs after starting together; want at most 2", moves)
	}
	if !balanced() {
		t.Errorf("owned %d and %d, want %d each +/- 1", len(es[0].Owned()), len(es[1].Owned()), parts/2)
	}
}

// A lone instance owns every partition on its first pass, a start-up settle (at most
// 250 ms at the default 2 s interval) after Start.
func TestLoneInstanceOwnsAllOnFirstPass(t *testing.T) {
	srv, _, d := startBacklog(t, 64)
	start := time.Now()
	e := startEngineWith(t, srv, d, "alone", func(c *EngineConfig) { c.DiscoveryInterval = 2 * time.Second })
	testkit.WaitFor(t, 2*time.Second, "every partition owned before a second pass", func() bool { return len(e.Owned()) == 64 })
	t.Logf("owned all 64 %v after Start", time.Since(start).Round(time.Millisecond))
}

// An instance whose record of a unit's owner went stale (the release notice was trimmed
// from the capped control stream before it read it, as in a mass hand-over) still takes
// the unit once it is short of its share: it does not trust the record while that owner
// lives.
func TestStaleOwnerRecordDoesNotStrandPartitions(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	keys := keysOf(20)
	// A live "ghost" instance holds half of the partitions.
	const ghost = "ghost.x"
	rdb.Set(ctx, keyspace.SingleNode.SessionKey(ghost), "ghost", time.Minute)
	info := keyspace.Instance{ID: "ghost", Owner: ghost, HeartbeatMS: time.Now().UnixMilli()}.Encode()
	rdb.HSet(ctx, keyspace.SingleNode.InstancesKey(), "ghost#1", info)
	var handled atomic.Int64
	d := testDomain(t, func(context.Context, Event) error { handled.Add(1); return nil }, nil)
	for i, k := range keys {
		publish(t, NewRedisBroker(rdb), d, k, 0, false)
		if i%2 == 0 {
			rdb.Set(ctx, keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector"), ghost+":5", 0)
		}
	}
	b := startEngine(t, srv, d, "b", time.Second)
	testkit.WaitFor(t, 5*time.Second, "b takes the free half", func() bool { return len(b.Owned()) == len(keys)/2 })
	// The ghost releases its partitions and leaves, and b misses every notice.
	for i, k := range keys {
		if i%2 == 0 {
			rdb.Del(ctx, keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector"))
		}
	}
	rdb.HDel(ctx, keyspace.SingleNode.InstancesKey(), "ghost#1")
	testkit.WaitFor(t, 5*time.Second, "b takes the partitions the ghost released", func() bool { return len(b.Owned()) == len(keys) })
	testkit.WaitFor(t, 5*time.Second, "every event handled", func() bool { return handled.Load() == int64(len(keys)) })
}
