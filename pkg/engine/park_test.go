package engine

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// An owned idle partition costs no goroutine. 300 partitions are
// owned and idle: the engine's goroutines do not grow with them; an event on one of them
// is handled at once (its worker resumes), and shutting down releases every lease.
func TestIdlePartitionsCostNoGoroutine(t *testing.T) {
	srv, rdb, b := startNode(t)
	d := sinkDomain(t, srv.Client(t), "i1", nil)
	const parts = 300
	for i := 0; i < parts; i++ {
		publish(t, b, d, "p"+strconv.Itoa(i), 0, false)
	}
	before := runtime.NumGoroutine()
	e := startEngine(t, srv, d, "i1", 2*time.Second)
	testkit.WaitFor(t, 20*time.Second, "every partition handled and owned", func() bool {
		return len(e.Owned()) == parts && len(logOf(t, rdb, "p"+strconv.Itoa(parts-1))) == 1 && len(logOf(t, rdb, "p0")) == 1
	})
	var grown int
	testkit.WaitFor(t, 10*time.Second, "idle partitions parked", func() bool {
		grown = runtime.NumGoroutine() - before
		return grown < 60
	})
	t.Logf("goroutines: %d before the engine, %d more with %d idle owned partitions", before, grown, parts)

	publish(t, b, d, "p7", 1, false)
	testkit.WaitFor(t, 5*time.Second, "a parked partition's event handled", func() bool { return len(logOf(t, rdb, "p7")) == 2 })

	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ks := keyspace.For(rdb)
	for i := 0; i < parts; i++ {
		if n := rdb.Exists(context.Background(), ks.LeaseKey(ks.PartitionStream("order", "p"+strconv.Itoa(i)), "Projector")).Val(); n != 0 {
			t.Fatalf("lease of p%d still held after shutdown", i)
		}
	}
}

// A worker that parks checks for a wake-up that came meanwhile, and resumes for it. That
// check must not take a wake-up meant for a later park of the same worker: a poke that
// found the worker running (and its wake-up slot already full) relies on that slot being
// seen by the worker's next park. Here the first park's goroutine is held right after it
// marked the worker parked; a poke resumes the worker, whose read finds nothing; then an
// entry arrives that rings nobody (a bare XADD) and a second poke says so while the
// resumed worker is about to park. The entry must be handled.
func TestParkNeverTakesALaterWakeUp(t *testing.T) {
	srv, rdb, b := startNode(t)
	d := sinkDomain(t, srv.Client(t), "i1", nil)
	publish(t, b, d, "k1", 0, false)
	e := startEngine(t, srv, d, "i1", 2*time.Second)
	testkit.WaitFor(t, 10*time.Second, "the first event handled", func() bool { return len(logOf(t, rdb, "k1")) == 1 })
	var w *worker
	testkit.WaitFor(t, 10*time.Second, "the worker parked", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, x := range e.workers {
			w = x
		}
		return w != nil && w.parked.Load()
	})
	var stage atomic.Int32
	secondIdle := make(chan struct{})
	park := func(pw *worker) {
		if pw != w || !stage.CompareAndSwap(0, 1) {
			return
		}
		w.poke() // the worker resumes in another goroutine while this one is held here
		<-secondIdle
	}
	idle := func(iw *worker) {
		if iw != w || !stage.CompareAndSwap(1, 2) {
			return
		}
		data, _ := json.Marshal(testPayload{Client: "k1", Seq: 1})
		if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: e.keys.PartitionStream("order", "k1"),
			Values: []any{"id", NewEventID(), "type", "OrderPlaced", "category", "order", "key", "k1", "data", string(data)}}).Err(); err != nil {
			t.Error(err)
		}
		w.poke()
		close(secondIdle)
		time.Sleep(100 * time.Millisecond) // the held goroutine goes on first
	}
	e.bell.onIdle.Store(&idle)
	e.parkHook.Store(&park)
	// Park the worker again, through the hooks: poke it; its read finds nothing and it parks.
	w.poke()
	testkit.WaitFor(t, 5*time.Second, "the entry that rang nobody handled", func() bool { return len(logOf(t, rdb, "k1")) == 2 })
	e.parkHook.Store(nil)
	e.bell.onIdle.Store(nil)
}
