package engine

import (
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// BenchmarkDrainKeys: 10,000 keys with one event each (SEQCTL_BENCH_DRAIN_KEYS to change),
// published while no engine runs, then two instances with the default timing and an
// in-process no-op handler; drain_s is the time from just before the first engine is
// created until the last handler call ends. Every partition is new to the engines, so
// this is the cost of taking 10,000 leases and reading each partition once, not of
// handling events. Goal: at most 10 s.

func BenchmarkDrainKeys(b *testing.B) {
	onTargets(b, benchDrainKeys)
}

func benchDrainKeys(b *testing.B, tgt *benchTarget) {
	keys := envInt("SEQCTL_BENCH_DRAIN_KEYS", 10_000)
	r := startTPRun(b, tgt, keys, keys, 0)
	t := r.t
	start := time.Now()
	e1 := benchEngine(b, tgt, r.d, "bench-a", &r.rt)
	e2 := benchEngine(b, tgt, r.d, "bench-b", &r.rt)
	s1, c1 := r.finish(b, tgt)

	handled := t.unique.Load()
	drain := -1.0
	if handled >= int64(keys) {
		drain = t.base.Add(time.Duration(t.last.Load())).Sub(start).Seconds()
	}
	first := t.base.Add(time.Duration(t.first.Load())).Sub(start).Seconds()
	b.Logf("owned per instance: %v; first handler start %.2fs after the start, last handler end %.2fs", ownedBy(e1, e2), first, drain)
	r.report(b, s1, c1, handled)
	b.ReportMetric(drain, "drain_s")
	b.ReportMetric(first, "first_s")
	if drain > 0 {
		b.ReportMetric(float64(keys)/drain, "ev/s")
	}
}
