package engine

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkSpanPerRun is the cost of a handler run's trace context, per run, apart from
// the handler and Redis: none (no tracer provider) or drop (a provider whose sampler
// drops every span), for an event without and with its publisher's traceparent. It is
// what BenchmarkThroughput's SEQCTL_BENCH_TRACING=drop adds per event, measured without
// the noise of a full engine.
func BenchmarkSpanPerRun(b *testing.B) {
	for _, mode := range []string{"none", "drop"} {
		for _, tp := range []string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
			b.Run(mode+"/parent="+map[bool]string{true: "yes", false: "no"}[tp != ""], func(b *testing.B) {
				e := &Engine{}
				if mode == "drop" {
					p := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
					e.tracer = tracerOf(p)
				}
				ev := Event{ID: "x", TraceParent: tp}
				d := Delivery{Attempt: 1}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_, sp := e.handlerContext(context.Background(), "process order", ev, d, trace.SpanContext{})
						endSpan(sp, nil)
					}
				})
			})
		}
	}
}
