package engine

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Trace context (W3C, https://www.w3.org/TR/trace-context/) rides in the event envelope
// (keyspace.Envelope.TraceParent and TraceState): Publish stores the span context of its
// ctx, when there is one, and a handler's context carries it back, so that a Go handler's
// trace.SpanContextFromContext, an HTTP handler's traceparent header and an exec
// handler's TRACEPARENT name the publisher's trace.

var traceContext = propagation.TraceContext{}

// stampTrace stores ctx's span context in ev, unless ev carries one already (given by the
// caller, or read from an outbox row). Without a valid span context it does nothing.
func stampTrace(ctx context.Context, ev *Event) {
	if ev.TraceParent != "" || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	ev.TraceParent, ev.TraceState = c[keyspace.FieldTraceParent], c[keyspace.FieldTraceState]
}

// withTrace returns ctx carrying ev's trace context as the remote parent span context,
// or ctx itself when ev has none.
func withTrace(ctx context.Context, ev Event) context.Context {
	if ev.TraceParent == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{
		keyspace.FieldTraceParent: ev.TraceParent, keyspace.FieldTraceState: ev.TraceState})
}
