package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// foreignAppend appends an event to a partition stream as another publisher that follows
// the documented layout does: a plain XADD of the envelope, no script, no doorbell.
func foreignAppend(t *testing.T, rdb redis.UniversalClient, key string, seq int) {
	t.Helper()
	data, _ := json.Marshal(testPayload{Client: key, Seq: seq})
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: keyspace.For(rdb).PartitionStream("order", key), Values: []any{
		"id", fmt.Sprintf("foreign-%s-%d", key, seq), "type", "OrderPlaced", "category", "order", "key", key,
		"data", string(data), "priority", "0", "published_at", time.Now().UnixMilli(),
	}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// foreignIndex adds a key to the category index as another publisher does: SADD on one
// node, HSET on Redis Cluster (any value), with no notice on the control stream.
func foreignIndex(t *testing.T, rdb redis.UniversalClient, key string) {
	t.Helper()
	k, ctx := keyspace.For(rdb), context.Background()
	var err error
	if k.IsCluster() {
		err = rdb.HSet(ctx, k.PartitionIndex("order"), key, "foreign").Err()
	} else {
		err = rdb.SAdd(ctx, k.PartitionIndex("order"), key).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Events another publisher appends with a plain XADD, and a partition it indexes with a
// plain SADD (HSET on a cluster), are handled in publish order within the sweep bound:
// for a new partition, and for one an instance owns that is idle. With keyspace
// notifications (the default) the idle owner is woken by Redis itself; without them, by
// the sweep.
func TestEventsFromAnotherPublisher(t *testing.T) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		onBothWakeups(t, func(t *testing.T, mode string) {
			rdb := tg.client(t)
			d := sinkDomain(t, tg.client(t), "i1", nil)
			for _, id := range []string{"i1", "i2"} {
				startEngineOn(t, tg, d, id, func(c *EngineConfig) {
					c.Timing = fastTiming(2 * time.Second)
					c.DiscoveryInterval = 2 * time.Second // the default
					c.KeyspaceNotifications = mode
				})
			}
			const bound = 5 * time.Second
			// Past the instances' first full read of the index: a seqctl event first.
			publish(t, NewRedisBroker(rdb), d, "warm-"+mode, 1, false)
			testkit.WaitFor(t, bound, "the first event handled", func() bool { return len(logOf(t, rdb, "warm-"+mode)) == 1 })
			key := "x-" + mode // both modes run on one Redis
			for i := 1; i <= 3; i++ {
				foreignAppend(t, rdb, key, i)
			}
			foreignIndex(t, rdb, key)
			start := time.Now()
			testkit.WaitFor(t, bound, "a new partition's events handled", func() bool { return len(logOf(t, rdb, key)) == 3 })
			t.Logf("new partition: handled in %v", time.Since(start).Round(time.Millisecond))
			time.Sleep(500 * time.Millisecond) // its owner is idle now
			foreignAppend(t, rdb, key, 4)
			start = time.Now()
			testkit.WaitFor(t, bound, "an owned idle partition's event handled", func() bool { return len(logOf(t, rdb, key)) == 4 })
			t.Logf("owned idle partition: handled in %v", time.Since(start).Round(time.Millisecond))
			if got := joinInts(logOf(t, rdb, key)); got != "1,2,3,4" {
				t.Errorf("handled %s, want 1,2,3,4 in publish order", got)
			}
		})
	})
}

// An entry that is not a seqctl envelope (no id or type) is not dropped: its attempts fail
// with that reason and its partition halts on it, as on a poison event, with the reason
// in the halt record; the entries behind it wait.
func TestEntryThatIsNotAnEnvelopeHalts(t *testing.T) {
	tg := redisTarget{srv: redistest.Start(t)}
	rdb := tg.client(t)
	d := sinkDomain(t, tg.client(t), "i1", nil)
	startEngineOn(t, tg, d, "i1", nil)
	stream := keyspace.SingleNode.PartitionStream("order", "bad")
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []any{"foo", "bar"}}).Err(); err != nil {
		t.Fatal(err)
	}
	foreignAppend(t, rdb, "bad", 1)
	foreignIndex(t, rdb, "bad")
	var h *HaltRecord
	testkit.WaitFor(t, 10*time.Second, "the partition halted on the entry", func() bool {
		h, _ = NewRedisBroker(rdb).Halt(context.Background(), HeadRef{Group: "Projector", Category: "order", Key: "bad"})
		return h != nil
	})
	if h.Attempts != 3 || !strings.Contains(h.Error, "not a seqctl envelope") {
		t.Errorf("halt record: %d attempts, error %q; want 3 and the reason", h.Attempts, h.Error)
	}
	if n := len(logOf(t, rdb, "bad")); n != 0 {
		t.Errorf("%d events handled behind the halted entry, want 0", n)
	}
}
