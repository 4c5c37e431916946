package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// An event on a quiet partition costs one read: the read that takes it reports that it
// took everything the unit held, and once it is handled the owner goes idle without
// reading again, its acknowledgement confirmed in the background. A second event, a
// burst that fills more than a batch, and an event on a key whose backfill lane exists
// are all handled, in order, and leave nothing pending. On one node and on a Redis
// Cluster, one event at a time and with read-ahead.
func TestQuietEventCostsOneRead(t *testing.T) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		for _, mu := range []int{1, 16} {
			t.Run(fmt.Sprintf("max_unacked=%d", mu), func(t *testing.T) { testQuietEventCostsOneRead(t, tg, mu) })
		}
	})
}

func testQuietEventCostsOneRead(t *testing.T, tg redisTarget, maxUnacked int) {
	rdb, b := tg.broker(t)
	ctx := context.Background()
	log := newSeqLog("")
	d := testDomain(t, log.handle, func(d *Domain) { d.LanesEnabled, d.LanesThreshold = true, 0 })
	startEngineOn(t, tg, d, "i1", func(c *EngineConfig) {
		c.MaxUnacked = maxUnacked
		// Longer than the test: on Redis Cluster a lease idle for a TTL goes dormant,
		// which takes a read of its own.
		c.Timing = fastTiming(20 * time.Second)
	})
	k := keyspace.For(rdb)
	key := fmt.Sprintf("quiet-%d", maxUnacked)
	stream := k.PartitionStream("order", key)
	pending := func() int64 {
		p, err := rdb.XPending(ctx, stream, "Projector").Result()
		if err != nil {
			return -1
		}
		return p.Count
	}
	publish(t, b, d, key, 0, false)
	testkit.WaitFor(t, 10*time.Second, "the first event handled and acknowledged", func() bool { return len(log.of(key)) == 1 && pending() == 0 })
	time.Sleep(300 * time.Millisecond) // idle, its lane watched
	// Each read of a partition claims its oldest pending entry first (XAUTOCLAIM): their
	// count is the count of reads.
	reads := func() int64 { return tg.commandCalls(t, "xautoclaim") }
	before := reads()
	for i := 1; i <= 3; i++ {
		publish(t, b, d, key, i, false)
		testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("event %d handled and acknowledged", i), func() bool { return len(log.of(key)) == i+1 && pending() == 0 })
		time.Sleep(100 * time.Millisecond)
	}
	if n := reads() - before; n != 3 {
		t.Errorf("3 quiet events took %d reads, want 3", n)
	}
	// A burst of more than a batch: read in batches, then idle again.
	for i := 4; i < 40; i++ {
		publish(t, b, d, key, i, false)
	}
	testkit.WaitFor(t, 5*time.Second, "the burst handled and acknowledged", func() bool { return len(log.of(key)) == 40 && pending() == 0 })
	// A backfill lane that exists: the read of the primary lane no longer takes everything.
	data := []byte(fmt.Sprintf(`{"client_id":%q,"seq":40}`, key))
	if _, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{Priority: -1}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the backfill event handled", func() bool { return len(log.of(key)) == 41 })
	publish(t, b, d, key, 41, false)
	testkit.WaitFor(t, 5*time.Second, "an event after it handled and acknowledged", func() bool { return len(log.of(key)) == 42 && pending() == 0 })
	if got := log.of(key); fmt.Sprint(got) != fmt.Sprint(seqs(0, 42)) {
		t.Errorf("handled %v, want %v", got, seqs(0, 42))
	}
}
