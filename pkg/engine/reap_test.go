package engine

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// A drained idle partition disappears from the index and Redis;
// a partition with a pending (halted) head, with a group that is behind, or with a
// registered group that has never read it, is not reaped; a publish to a just-reaped key
// is handled, under a higher generation than before.
func TestReaping(t *testing.T) { onBoth(t, testReaping) }

func testReaping(t *testing.T, tg redisTarget) {
	rdb, b := tg.broker(t)
	ks := keyspace.For(rdb)
	ctx := context.Background()
	d := sinkDomain(t, tg.client(t), "i1", func(d *Domain) { d.Handlers[0].MaxRetries = 1 })
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
	testkit.WaitFor(t, 5*time.Second, "first events handled", func() bool {
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
	testkit.WaitFor(t, 10*time.Second, "cold reaped", func() bool {
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
	testkit.WaitFor(t, 5*time.Second, "re-created partition handled", func() bool { return len(logOf(t, rdb, "cold")) == 2 })
	if g := leaseGen(t, rdb, "cold"); g <= genBefore {
		t.Errorf("generation after re-creation %d, want above %d", g, genBefore)
	}
	_ = e
}

// After 100,000 events through one hot partition the stream holds
// only a small bounded number of acknowledged entries; after 5 takeovers the group has at
// most 2 consumers.
func TestBoundedGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 events: skipped with -short")
	}
	srv, rdb, b := startNode(t)
	ctx := context.Background()
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
	// About 20 s alone, 40 s with -race; the bound leaves room for a loaded machine (a
	// whole `make test` runs the deploy module's build beside it).
	testkit.WaitFor(t, 120*time.Second, "100,000 handled", func() bool { return count() >= total })
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
		testkit.WaitFor(t, 10*time.Second, "handled", func() bool { return count() >= total+i+0 })
		crash(prev)
		prev = startEngine(t, srv, testDomain(t, h, nil), "c"+strconv.Itoa(i), ttl)
	}
	publish(t, b, d, "hot", total+6, false)
	testkit.WaitFor(t, 10*time.Second, "last handled", func() bool { return count() >= total+6 })
	testkit.WaitFor(t, 5*time.Second, "old consumers removed", func() bool {
		return len(rdb.XInfoConsumers(ctx, "order:hot", "Projector").Val()) <= 2
	})
}
