package engine

import (
	"sync/atomic"
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
	t := newTPTracker(keys, keys, 0)
	d := testDomain(b, t.handle, nil)
	pubRate := publishAll(b, tgt.admin, d, keys, keys, 0)
	b.Logf("published %d events over %d keys at %.0f ev/s (publishing is not measured)", keys, keys, pubRate)
	tgt.resetStats(b)

	var rt atomic.Int64
	stop := startProfile(b)
	s0 := snapRedis(b, tgt)
	c0 := readCPU(s0)
	start := time.Now()
	e1 := benchEngine(b, tgt, d, "bench-a", &rt)
	e2 := benchEngine(b, tgt, d, "bench-b", &rt)
	if !waitUntil(120*time.Second, func() bool { return t.unique.Load() >= int64(keys) }) {
		b.Logf("TIME LIMIT: handled %d of %d in 120s", t.unique.Load(), keys)
	}
	s1 := snapRedis(b, tgt)
	c1 := readCPU(s1)
	stop()

	handled := t.unique.Load()
	drain := -1.0
	if handled >= int64(keys) {
		drain = t.base.Add(time.Duration(t.last.Load())).Sub(start).Seconds()
	}
	first := t.base.Add(time.Duration(t.first.Load())).Sub(start).Seconds()
	bd, total := callsBetween(s0, s1)
	b.Logf("owned per instance: %v; first handler start %.2fs after the start, last handler end %.2fs", ownedBy(e1, e2), first, drain)
	b.Logf("redis calls per event: %s", breakdown(bd, float64(max(handled, 1)), "calls/ev"))
	b.Logf("redis time per event: %s", breakdown(usecBetween(s0, s1), float64(max(handled, 1)), "µs/ev; a script's time includes its calls"))
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(drain, "drain_s")
	b.ReportMetric(first, "first_s")
	if drain > 0 {
		b.ReportMetric(float64(keys)/drain, "ev/s")
	}
	b.ReportMetric(float64(int64(keys)-handled), "loss")
	b.ReportMetric(float64(t.dups.Load()), "dups")
	b.ReportMetric(float64(t.inversions.Load()), "inversions")
	b.ReportMetric(float64(total)/float64(max(handled, 1)), "cmd/ev")
	b.ReportMetric(float64(rt.Load())/float64(max(handled, 1)), "rt/ev")
	b.ReportMetric(1e6*(c1.redis-c0.redis)/float64(max(handled, 1)), "rcpu_us/ev")
	c0.report(b, c1)
}
