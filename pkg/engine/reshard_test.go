package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
)

// Issue 14, acceptance 2: the slots holding live partitions move to another master while
// events flow and two instances own the partitions. Clients see ASK and MOVED (and
// TRYAGAIN for a script over keys half moved); nothing is lost, no two events of a key
// overlap, and every key's order holds.
func TestSlotMigrationWhileEventsFlow(t *testing.T) {
	skipShort(t)
	cl := redistest.StartCluster(t, 3)
	tg := redisTarget{cl: cl}
	rdb := tg.client(t)
	keys := keysOf(8)
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
			published <- seq
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// Once a third of the events are out, move the slot of every other key to the next
	// master, one after another, while the rest flows.
	for seq := range published {
		if seq == perKey/3 {
			break
		}
	}
	moved := 0
	for i, k := range keys {
		if i%2 == 1 {
			continue
		}
		slot := redistest.Slot(ClusterKeys.PartitionStream("order", k))
		from := cl.NodeOf(t, ClusterKeys.PartitionStream("order", k))
		to := (from + 1) % len(cl.Nodes)
		cl.MoveSlot(t, slot, from, to)
		if got := cl.NodeOf(t, ClusterKeys.PartitionStream("order", k)); got != to {
			t.Fatalf("slot %d of %s is on node %d after the move, want %d", slot, k, got, to)
		}
		moved++
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
	t.Logf("moved %d slots with live partitions; %d publishes retried; %d events re-run", moved, n, dups)
}
