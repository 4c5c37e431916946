package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The slots holding live partitions move to another master while
// events flow and two instances own the partitions. Clients see ASK and MOVED (and
// TRYAGAIN for a script over keys half moved); nothing is lost, no two events of a key
// overlap, and every key's order holds.
func TestSlotMigrationWhileEventsFlow(t *testing.T) {
	skipShort(t)
	// The slot of every other key, one after another (IMPORTING/MIGRATING, MIGRATE,
	// SETSLOT NODE, as redis-cli does for each slot).
	t.Run("slot by slot", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		keys := keysOf(8)
		migrateWhileFlowing(t, cl, keys, func() int {
			moved := 0
			for i, k := range keys {
				if i%2 == 1 {
					continue
				}
				stream := keyspace.Cluster.PartitionStream("order", k)
				from := cl.NodeOf(t, stream)
				to := (from + 1) % len(cl.Nodes)
				cl.MoveSlot(t, redistest.Slot(stream), from, to)
				if got := cl.NodeOf(t, stream); got != to {
					t.Fatalf("the slot of %s is on node %d after the move, want %d", k, got, to)
				}
				moved++
			}
			return moved
		})
	})
	// redis-cli --cluster reshard of 512 slots of the first master, with six partitions in
	// those slots and two elsewhere.
	t.Run("redis-cli reshard", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		const nslots = 512
		lowest := map[int]bool{}
		for _, s := range cl.LowestSlots(t, 0, nslots) {
			lowest[s] = true
		}
		var inMoved, elsewhere []string
		for i := 0; len(inMoved) < 6 || len(elsewhere) < 2; i++ {
			k := "rk-" + strconv.Itoa(i)
			if lowest[redistest.Slot(keyspace.Cluster.PartitionStream("order", k))] {
				if len(inMoved) < 6 {
					inMoved = append(inMoved, k)
				}
			} else if len(elsewhere) < 2 {
				elsewhere = append(elsewhere, k)
			}
		}
		keys := append(inMoved, elsewhere...)
		migrateWhileFlowing(t, cl, keys, func() int {
			cl.Reshard(t, 0, 1, nslots)
			for _, k := range inMoved {
				if got := cl.NodeOf(t, keyspace.Cluster.PartitionStream("order", k)); got != 1 {
					t.Fatalf("%s is on node %d after the reshard, want 1", k, got)
				}
			}
			return len(inMoved)
		})
	})
}

// migrateWhileFlowing runs two instances and a publisher over keys, calls move once a
// third of the events are out, and checks that every event was handled, in order per key,
// with no overlap. move returns how many live partitions it moved.
func migrateWhileFlowing(t *testing.T, cl *redistest.Cluster, keys []string, move func() int) {
	tg := redisTarget{cl: cl}
	rdb := tg.client(t)
	const perKey = 150
	for _, id := range []string{"i1", "i2"} {
		s := &sink{rdb: tg.client(t), instance: id, work: 500 * time.Microsecond}
		startEngineOn(t, tg, testDomain(t, s.handle, nil), id, func(c *EngineConfig) { c.Timing = fastTiming(2 * time.Second) })
	}

	// The publisher retries a failed publish with the same event id, as a caller should:
	// the publish dedupe appends it once.
	b := NewRedisBroker(rdb)
	d := testDomain(t, nil, nil)
	var wg sync.WaitGroup
	var failures sync.Map
	published := make(chan int, perKey)
	var lastSeq atomic.Int64 // the last sequence published to every key
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(published)
		for seq := 0; seq < perKey; seq++ {
			for _, k := range keys {
				data, _ := json.Marshal(testPayload{Client: k, Seq: seq})
				id := fmt.Sprintf("%s/%d", k, seq)
				for try := 0; ; try++ {
					_, err := b.Publish(context.Background(), d, "OrderPlaced", data, PublishOptions{ID: id})
					if err == nil {
						break
					}
					failures.Store(id, err.Error())
					if try == 50 {
						t.Errorf("publish %s failed 50 times: %v", id, err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			lastSeq.Store(int64(seq))
			published <- seq
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// Once a third of the events are out, move while the rest flows.
	for seq := range published {
		if seq == perKey/3 {
			break
		}
	}
	before := lastSeq.Load()
	moved := move()
	during := lastSeq.Load() - before
	if during == 0 {
		t.Errorf("no event was published while the slots moved: the move did not overlap the flow")
	}
	for range published {
	}
	wg.Wait()
	dups := checkLogsOn(t, rdb, keys, perKey)
	if n, _ := rdb.Get(context.Background(), "t:overlap").Int(); n != 0 {
		t.Errorf("%d events entered the handler while another event of the same key was inside", n)
	}
	n := 0
	failures.Range(func(k, v any) bool {
		if n < 3 {
			t.Logf("publish %v retried after: %v", k, v)
		}
		n++
		return true
	})
	t.Logf("moved %d live partitions while %d rounds of events were published; %d publishes retried; %d events re-run", moved, during, n, dups)
}
