package engine

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkPublish: one sequential publisher over 64 keys, no engine running, in one
// window: a plain XADD of the same envelope (the floor a publisher without the index, the
// dedupe window or the doorbell pays), RedisBroker.Publish, and PublishMany in batches of
// 100. Reported: events/s, Redis calls per event, Redis CPU per event (rcpu_us/ev, the
// change of INFO cpu's used_cpu_sys + used_cpu_user: what a Redis core pays per event,
// reading the commands off the connection included) and client allocations per event.
//
//	go test -run '^$' -bench 'BenchmarkPublish$' -benchtime 1x ./pkg/engine/
//
// SEQCTL_BENCH_PUBLISH_EVENTS=N publishes N events per variant (default 20,000).
func BenchmarkPublish(b *testing.B) {
	n := envInt("SEQCTL_BENCH_PUBLISH_EVENTS", 20_000)
	const keys = 64
	onTargets(b, func(b *testing.B, t *benchTarget) {
		d := testDomain(b, func(context.Context, Event) error { return nil }, nil)
		broker := NewRedisBroker(t.admin)
		ctx := context.Background()
		if err := loadScripts(ctx, t.admin); err != nil {
			b.Fatal(err)
		}
		plain := func(i int) error {
			ev := Event{ID: NewEventID(), Type: "OrderPlaced", Category: "order", Key: fmt.Sprintf("client-%d", i%keys),
				Data: benchPayload(i%keys, i/keys), PublishedAt: time.Now()}
			return t.admin.XAdd(ctx, &redis.XAddArgs{Stream: t.keys.PartitionStream("plain", ev.Key), Values: ev.Fields()}).Err()
		}
		one := func(i int) error {
			_, err := broker.Publish(ctx, d, "OrderPlaced", benchPayload(i%keys, i/keys), PublishOptions{})
			return err
		}
		const batch = 100
		var buf []BatchEvent
		many := func(i int) error {
			buf = append(buf, BatchEvent{Type: "OrderPlaced", Data: benchPayload(i%keys, i/keys)})
			if len(buf) < batch && i != n-1 {
				return nil
			}
			_, err := broker.PublishMany(ctx, d, buf, BatchOptions{})
			buf = buf[:0]
			return err
		}
		for _, v := range []struct {
			name string
			pub  func(i int) error
		}{{"xadd", plain}, {"publish", one}, {"publishmany100", many}} {
			b.Run(v.name, func(b *testing.B) {
				var ms0, ms1 runtime.MemStats
				s0 := snapRedis(b, t)
				runtime.ReadMemStats(&ms0)
				start := time.Now()
				for i := range n {
					if err := v.pub(i); err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start)
				runtime.ReadMemStats(&ms1)
				s1 := snapRedis(b, t)
				bd, total := callsBetween(s0, s1)
				b.Logf("%s: %d events in %v; redis calls per event: %s", v.name, n, el.Round(time.Millisecond), breakdown(bd, float64(n), "calls/ev"))
				b.Logf("%s: redis time per event: %s", v.name, breakdown(usecBetween(s0, s1), float64(n), "µs/ev; a script's time includes its calls"))
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(n)/el.Seconds(), "ev/s")
				b.ReportMetric(float64(total)/float64(n), "cmd/ev")
				b.ReportMetric(1e6*(s1.cpu-s0.cpu)/float64(n), "rcpu_us/ev")
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(n), "allocs/ev")
				b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(n), "B/ev")
			})
		}
	})
}
