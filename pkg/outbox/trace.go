package outbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/pkg/engine"
)

// The relay's part of a trace: a row keeps its enqueuer's trace context
// (Outbox.Enqueue), and with a tracer the relay appends the event under a producer span
// of its own, child of the enqueuer's, whose context the event then carries.

func relayTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer("github.com/seqctl/seqctl/pkg/outbox")
}

var producerKind = trace.WithSpanKind(trace.SpanKindProducer)

// traced returns the event to append for rw and, with a tracer, the span of its append
// (nil without one): the event then carries the span's trace context.
func (r *Relay) traced(ctx context.Context, rw *row) (engine.Event, trace.Span) {
	ev := rw.event
	if r.tracer == nil {
		return ev, nil
	}
	sctx, span := r.tracer.Start(engine.ContextWithEventTrace(ctx, ev), "publish "+rw.category, producerKind)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "redis"),
			attribute.String("messaging.operation.name", "publish"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", rw.route.Stream),
			attribute.String("messaging.destination.template", rw.category),
			attribute.String("messaging.message.id", rw.eventID),
			attribute.Int64("seqctl.outbox.row", rw.id),
		)
	}
	ev.TraceParent, ev.TraceState = engine.TraceHeaders(sctx)
	return ev, span
}

// endSpan ends an append's span, recording a failure as an error.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
