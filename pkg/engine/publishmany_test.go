package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// PublishMany appends a batch over many keys in one round trip, each event indexed (an
// engine started afterwards finds every partition) and handled in the order of the batch
// per key; the same batch sent again appends nothing; a batch with an invalid key writes
// nothing and names the event. On one node and on a Redis Cluster.
func TestPublishMany(t *testing.T) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		rdb := tg.client(t)
		// Round trips as the caller makes them: a pipeline is one (a cluster client then
		// sends each master its part at once).
		var rt atomic.Int64
		counted := tg.client(t)
		counted.AddHook(rtHook{&rt})
		b := NewRedisBroker(counted)
		ctx := context.Background()
		if err := loadScripts(ctx, counted); err != nil {
			t.Fatal(err)
		}
		d := sinkDomain(t, rdb, "i1", nil)
		const keys, perKey = 8, 25
		var batch []BatchEvent
		for i := range keys * perKey {
			data, _ := json.Marshal(testPayload{Client: fmt.Sprintf("pm-%d", i%keys), Seq: i / keys})
			batch = append(batch, BatchEvent{Type: "OrderPlaced", Data: data, ID: fmt.Sprintf("ev-%d", i)})
		}
		rt.Store(0)
		pubs, err := b.PublishMany(ctx, d, batch, BatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// On a cluster, a new partition's index is written after its append: a round trip
		// per new partition more.
		if n := rt.Load(); (tg.cl == nil && n != 1) || n > 1+3*int64(keys)+3 {
			t.Errorf("the batch took %d round trips", n)
		}
		k := keyspace.For(rdb)
		for i, p := range pubs {
			if p.EntryID == "" || p.Duplicate || p.EventID != batch[i].ID || p.Stream != k.PartitionStream("order", fmt.Sprintf("pm-%d", i%keys)) {
				t.Fatalf("event %d: %+v", i, p)
			}
		}
		again, err := b.PublishMany(ctx, d, batch, BatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range again {
			if !p.Duplicate || p.EntryID != pubs[i].EntryID {
				t.Fatalf("event %d sent again: %+v, want a duplicate of %s", i, p, pubs[i].EntryID)
			}
		}
		bad := append(append([]BatchEvent{}, batch[:3]...), BatchEvent{Type: "OrderPlaced", Data: []byte(`{"client_id":"a:b","seq":1}`)})
		_, err = b.PublishMany(ctx, d, bad, BatchOptions{})
		var be *BatchError
		var ike *InvalidKeyError
		if !errors.As(err, &be) || be.Index != 3 || !errors.As(err, &ike) {
			t.Fatalf("a batch with an invalid key: %v, want a *BatchError of event 3 with an *InvalidKeyError", err)
		}
		if n := rdb.Exists(ctx, k.PartitionStream("order", "a:b")).Val(); n != 0 {
			t.Fatal("the invalid key's stream exists")
		}
		startEngineOn(t, tg, d, "i1", nil)
		for key := range keys {
			name := fmt.Sprintf("pm-%d", key)
			testkit.WaitFor(t, 10*time.Second, name+" handled", func() bool { return len(logOf(t, rdb, name)) == perKey })
			if got := joinInts(logOf(t, rdb, name)); got != joinInts(seqs(0, perKey)) {
				t.Errorf("%s handled %s, want publish order", name, got)
			}
		}
	})
}
