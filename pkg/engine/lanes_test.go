package engine

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Low-priority events land on the backfill lane; a key with events
// on both lanes has its primary events handled first; order within each lane equals
// publish order; reaping removes both lanes.
func TestPriorityLanes(t *testing.T) { onBoth(t, testPriorityLanes) }

func testPriorityLanes(t *testing.T, tg redisTarget) {
	rdb, b := tg.broker(t)
	ks := keyspace.For(rdb)
	var mu sync.Mutex
	var got []string // "lane/seq"
	handler := func(ctx context.Context, ev Event) error {
		d, _ := DeliveryFrom(ctx)
		var p testPayload
		_ = json.Unmarshal(ev.Data, &p)
		mu.Lock()
		got = append(got, d.Stream+"/"+strconv.Itoa(p.Seq))
		mu.Unlock()
		return nil
	}
	d := testDomain(t, handler, func(d *Domain) { d.LanesEnabled, d.LanesThreshold = true, 5 })
	var wantPrimary, wantBackfill []string
	for seq := 0; seq < 40; seq++ {
		prio := 10
		if seq%2 == 0 {
			prio = 1 // below the threshold: backfill
		}
		data, _ := json.Marshal(testPayload{Client: "A", Seq: seq})
		p, err := b.Publish(context.Background(), d, "OrderPlaced", data, PublishOptions{Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		want := ks.PartitionStream("order", "A")
		if prio < 5 {
			want = ks.LaneStream("order", "A", "backfill")
		}
		if p.Stream != want {
			t.Fatalf("priority %d routed to %s, want %s", prio, p.Stream, want)
		}
		if prio < 5 {
			wantBackfill = append(wantBackfill, want+"/"+strconv.Itoa(seq))
		} else {
			wantPrimary = append(wantPrimary, want+"/"+strconv.Itoa(seq))
		}
	}
	startEngineOn(t, tg, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(time.Second)
		c.Timing.ReapIdle = 500 * time.Millisecond
	})
	testkit.WaitFor(t, 10*time.Second, "all handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 40 })
	mu.Lock()
	if diff := cmp.Diff(append(wantPrimary, wantBackfill...), got); diff != "" {
		t.Errorf("primary lane first, then backfill, each in publish order (-want +got):\n%s", diff)
	}
	mu.Unlock()
	testkit.WaitFor(t, 10*time.Second, "both lanes reaped", func() bool {
		return rdb.Exists(context.Background(), ks.PartitionStream("order", "A"), ks.LaneStream("order", "A", "backfill")).Val() == 0 &&
			len(ks.IndexMembers(context.Background(), rdb, "order").Val()) == 0
	})
}
