package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkLimitFairness: tenant A has a backlog of 100,000 events over 1,000 keys
// (SEQCTL_BENCH_FAIRNESS_EVENTS to change), tenant B publishes one event a second; two
// instances, 8 handler slots each (SEQCTL_BENCH_FAIRNESS_SLOTS), a 5 ms handler,
// limit_by = "tenant_id" with limit_concurrency = 4 per tenant (SEQCTL_BENCH_FAIRNESS_CAP):
// A's thousand busy keys take at most 4 slots, fleet-wide, and B's key finds one free on
// its instance. With fewer slots than the cap, B waits for a slot, served in turn with
// A's line (slots.go): at most one release, a handler's time. Reported: B's start
// latency (publish to handler start, p50 and p99) over SEQCTL_BENCH_WINDOW seconds (20)
// without A, then with A's backlog draining, and the ratio of the p99s (goal: at most 2).
//
//	go test -run '^$' -bench 'BenchmarkLimitFairness' -benchtime 1x -v ./pkg/engine/
func BenchmarkLimitFairness(b *testing.B) {
	onTargets(b, benchLimitFairness)
}

func benchLimitFairness(b *testing.B, t *benchTarget) {
	window := time.Duration(envInt("SEQCTL_BENCH_WINDOW", 20)) * time.Second
	backlog := envInt("SEQCTL_BENCH_FAIRNESS_EVENTS", 100_000)
	const keysA = 1000
	var mu sync.Mutex
	sent := map[string]time.Time{} // B's event id -> publish time
	var lats []time.Duration
	var handledA atomic.Int64
	d := limitDomain(b, func(_ context.Context, ev Event) error {
		now := time.Now()
		var p limitPayload
		_ = json.Unmarshal(ev.Data, &p)
		if p.Tenant == "B" {
			mu.Lock()
			if at, ok := sent[ev.ID]; ok {
				lats = append(lats, now.Sub(at))
			}
			mu.Unlock()
		} else {
			handledA.Add(1)
		}
		time.Sleep(5 * time.Millisecond)
		return nil
	}, HandlerLimit{Concurrency: envInt("SEQCTL_BENCH_FAIRNESS_CAP", 4)})
	var rt atomic.Int64
	for _, id := range []string{"bench-a", "bench-b"} {
		benchEngineWith(b, t, d, id, &rt, func(c *EngineConfig) {
			c.HandlerLimits = map[string]int{"Projector": envInt("SEQCTL_BENCH_FAIRNESS_SLOTS", 8)}
		})
	}
	broker := NewRedisBroker(t.admin)
	ctx := context.Background()
	publishB := func(seq int) {
		data, _ := json.Marshal(limitPayload{Client: "b-key", Tenant: "B", Seq: seq})
		id := NewEventID()
		mu.Lock()
		sent[id] = time.Now()
		mu.Unlock()
		if _, err := broker.Publish(ctx, d, "OrderPlaced", data, PublishOptions{ID: id}); err != nil {
			b.Fatal(err)
		}
	}
	measure := func(from int) []time.Duration {
		mu.Lock()
		lats = nil
		mu.Unlock()
		n := int(window / time.Second)
		for i := range n {
			publishB(from + i)
			time.Sleep(time.Second)
		}
		time.Sleep(time.Second)
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), lats...)
	}
	publishB(0) // the partition exists and is owned before the measurement
	time.Sleep(3 * time.Second)
	alone := measure(1)

	// A's backlog, published in batches while the engines run.
	var batch []BatchEvent
	for i := range backlog {
		data, _ := json.Marshal(limitPayload{Client: fmt.Sprintf("a-%d", i%keysA), Tenant: "A", Seq: i / keysA})
		batch = append(batch, BatchEvent{Type: "OrderPlaced", Data: data})
		if len(batch) == 500 || i == backlog-1 {
			if _, err := broker.PublishMany(ctx, d, batch, BatchOptions{}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	b.Logf("A's backlog of %d events published; %d handled so far", backlog, handledA.Load())
	aStart := handledA.Load()
	withA := measure(1 + len(alone))
	aDone := handledA.Load() - aStart
	pct := func(v []time.Duration, p float64) float64 {
		if len(v) == 0 {
			return math.NaN()
		}
		s := append([]time.Duration(nil), v...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[max(int(math.Ceil(p*float64(len(s))))-1, 0)]) / 1e6
	}
	b.Logf("B alone: %d events, p50 %.2f ms, p99 %.2f ms; with A's backlog: %d events, p50 %.2f ms, p99 %.2f ms; A handled %d events meanwhile (%.0f ev/s)",
		len(alone), pct(alone, 0.5), pct(alone, 0.99), len(withA), pct(withA, 0.5), pct(withA, 0.99), aDone, float64(aDone)/window.Seconds())
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(pct(alone, 0.99), "alone_p99_ms")
	b.ReportMetric(pct(withA, 0.99), "withA_p99_ms")
	b.ReportMetric(pct(withA, 0.99)/pct(alone, 0.99), "p99_ratio")
	b.ReportMetric(float64(aDone)/window.Seconds(), "A_ev/s")
}
