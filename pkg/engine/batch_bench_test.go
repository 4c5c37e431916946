package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// BenchmarkBatch: a backlog drained by a BatchFunc, batch_max 1 against 32, side by side
// in one run.
//
//	hotkey:  one key, a handler call costs 10 ms whatever its size (a call to a batch
//	         API); 600 events (SEQCTL_BENCH_EVENTS). Goal: batch_max 32 >= 5x the
//	         events/s of batch_max 1.
//	64keys:  64 keys, a no-op handler, 200,000 events: what batching does where every
//	         key has a backlog and calls cost nothing (compare with BenchmarkThroughput/noop).
//
// ev/s is from the first handler start to the last handler end; ev/call is the mean run.

func BenchmarkBatch(b *testing.B) {
	for _, bm := range []int{1, 32} {
		b.Run(fmt.Sprintf("hotkey/batch_max=%d", bm), func(b *testing.B) {
			onTargets(b, func(b *testing.B, t *benchTarget) { benchBatch(b, t, 600, 1, bm, 10*time.Millisecond) })
		})
	}
	for _, bm := range []int{1, 32} {
		b.Run(fmt.Sprintf("64keys/batch_max=%d", bm), func(b *testing.B) {
			onTargets(b, func(b *testing.B, t *benchTarget) { benchBatch(b, t, 200_000, 64, bm, 0) })
		})
	}
}

// benchBatch drains n events over keys with a BatchFunc of up to batchMax events per call
// that costs perCall each. The tracker checks every event once and in order per key (each
// event is given to it with its own entry id).
func benchBatch(b *testing.B, tgt *benchTarget, n, keys, batchMax int, perCall time.Duration) {
	n = envInt("SEQCTL_BENCH_EVENTS", n)
	tr := newTPTracker(n, keys, 0)
	var calls, events atomic.Int64
	var first, last atomic.Int64
	base := time.Now()
	fn := func(ctx context.Context, evs []Event) error {
		start := int64(time.Since(base))
		first.CompareAndSwap(0, start)
		d, _ := DeliveryFrom(ctx)
		for i, ev := range evs {
			one := d
			one.EntryID, one.Entries = d.Entries[i], nil
			_ = tr.handle(WithDelivery(ctx, one), ev)
		}
		if perCall > 0 {
			time.Sleep(perCall)
		}
		calls.Add(1)
		events.Add(int64(len(evs)))
		end := int64(time.Since(base))
		for {
			old := last.Load()
			if end <= old || last.CompareAndSwap(old, end) {
				break
			}
		}
		return nil
	}
	d := batchDomain(b, fn, batchMax, nil)
	pubRate := publishAll(b, tgt.admin, d, n, keys, 0)
	b.Logf("published %d events over %d keys at %.0f ev/s (publishing is not measured)", n, keys, pubRate)
	var rt atomic.Int64
	for i := range benchInstances(tgt) {
		benchEngine(b, tgt, d, "bench-"+string(rune('a'+i)), &rt)
	}
	if !waitUntil(180*time.Second, func() bool { return tr.unique.Load() >= int64(n) }) {
		b.Logf("TIME LIMIT: handled %d of %d in 180s", tr.unique.Load(), n)
	}
	handled := tr.unique.Load()
	eps := 0.0
	if l, f := last.Load(), first.Load(); l > f {
		eps = float64(handled) / (float64(l-f) / 1e9)
	}
	if inv := tr.inversions.Load(); inv > 0 {
		b.Logf("ORDER BUG: %d per-key order inversions", inv)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(eps, "ev/s")
	b.ReportMetric(float64(events.Load())/float64(max(calls.Load(), 1)), "ev/call")
	b.ReportMetric(float64(rt.Load())/float64(max(handled, 1)), "rt/ev")
	b.ReportMetric(float64(int64(n)-handled), "loss")
	b.ReportMetric(float64(tr.dups.Load()), "dups")
	b.ReportMetric(float64(tr.inversions.Load()), "inversions")
}
