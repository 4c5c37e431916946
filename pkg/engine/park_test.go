package engine

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
)

// Issue 14, point 6: an owned idle partition costs no goroutine. 300 partitions are
// owned and idle: the engine's goroutines do not grow with them; an event on one of them
// is handled at once (its worker resumes), and shutting down releases every lease.
func TestIdlePartitionsCostNoGoroutine(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := NewRedisBroker(rdb)
	s := &sink{rdb: srv.Client(t), instance: "i1"}
	d := testDomain(t, s.handle, nil)
	const parts = 300
	for i := 0; i < parts; i++ {
		publish(t, b, d, "p"+strconv.Itoa(i), 0, false)
	}
	before := runtime.NumGoroutine()
	e := startEngine(t, srv, d, "i1", 2*time.Second)
	waitFor(t, 20*time.Second, "every partition handled and owned", func() bool {
		return len(e.Owned()) == parts && len(logOf(t, rdb, "p"+strconv.Itoa(parts-1))) == 1 && len(logOf(t, rdb, "p0")) == 1
	})
	var grown int
	waitFor(t, 10*time.Second, "idle partitions parked", func() bool {
		grown = runtime.NumGoroutine() - before
		return grown < 60
	})
	t.Logf("goroutines: %d before the engine, %d more with %d idle owned partitions", before, grown, parts)

	publish(t, b, d, "p7", 1, false)
	waitFor(t, 5*time.Second, "a parked partition's event handled", func() bool { return len(logOf(t, rdb, "p7")) == 2 })

	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ks := KeysFor(rdb)
	for i := 0; i < parts; i++ {
		if n := rdb.Exists(context.Background(), ks.LeaseKey(ks.PartitionStream("order", "p"+strconv.Itoa(i)), "Projector")).Val(); n != 0 {
			t.Fatalf("lease of p%d still held after shutdown", i)
		}
	}
}
