package engine

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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

// TraceHeaders returns the W3C traceparent and tracestate of ctx's span context, or ""
// when ctx has none. The outbox stores them with a row, so that the event it becomes is
// published with the enqueuer's trace context.
func TraceHeaders(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c[keyspace.FieldTraceParent], c[keyspace.FieldTraceState]
}

// stampTrace stores ctx's span context in ev, unless ev carries one already (given by the
// caller, or read from an outbox row). Without a valid span context it does nothing.
func stampTrace(ctx context.Context, ev *Event) {
	if ev.TraceParent == "" {
		ev.TraceParent, ev.TraceState = TraceHeaders(ctx)
	}
}

// ContextWithEventTrace returns ctx carrying ev's trace context as the remote parent
// span context, or ctx itself when ev has none: what a span about the event (the outbox
// relay's append) is started under.
func ContextWithEventTrace(ctx context.Context, ev Event) context.Context { return withTrace(ctx, ev) }

// withTrace returns ctx carrying ev's trace context as the remote parent span context,
// or ctx itself when ev has none. It runs for every event that carries one, traced or
// not, so the common form is read here without the propagator's map and copies; any
// other form goes through the propagator, which reads it the same way.
func withTrace(ctx context.Context, ev Event) context.Context {
	if ev.TraceParent == "" {
		return ctx
	}
	if sc, ok := parseTraceParent(ev.TraceParent, ev.TraceState); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{
		keyspace.FieldTraceParent: ev.TraceParent, keyspace.FieldTraceState: ev.TraceState})
}

// parseTraceParent reads a version-00 traceparent (what every publisher of seqctl
// writes: 00-{32 hex}-{16 hex}-{2 hex}, lowercase) and a tracestate as
// propagation.TraceContext does (a tracestate that does not parse is dropped). ok is
// false for anything else, which the caller leaves to the propagator.
func parseTraceParent(tp, ts string) (sc trace.SpanContext, ok bool) {
	if len(tp) != 55 || tp[0] != '0' || tp[1] != '0' || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return sc, false
	}
	var cfg trace.SpanContextConfig
	var flags [1]byte
	if !lowerHex(cfg.TraceID[:], tp[3:35]) || !lowerHex(cfg.SpanID[:], tp[36:52]) || !lowerHex(flags[:], tp[53:55]) ||
		!cfg.TraceID.IsValid() || !cfg.SpanID.IsValid() {
		return sc, false
	}
	if flags[0] > 1 {
		return sc, false // version 00 defines the sampled flag only: the propagator decides
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0])
	cfg.Remote = true
	if ts != "" {
		if state, err := trace.ParseTraceState(ts); err == nil {
			cfg.TraceState = state
		}
	}
	return trace.NewSpanContext(cfg), true
}

// lowerHex decodes s, lowercase hex digits only, into dst (len(s) == 2*len(dst)).
func lowerHex(dst []byte, s string) bool {
	for i := range dst {
		hi, ok1 := hexDigit(s[2*i])
		lo, ok2 := hexDigit(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// tracerName names the engine's spans' instrumentation scope.
const tracerName = "github.com/seqctl/seqctl/pkg/engine"

func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// handlerContext returns the context of one handler run: ev's trace context as the
// remote parent and, with a tracer, a consumer span (OpenTelemetry messaging
// conventions) named name ("process {category}", see worker.spanName) with the run's
// stream, entry, handler, attempt and generation. The first attempt's span is a child of
// the publisher's; a later one (a re-run after a failover, a retry) starts a trace of its
// own linked to the publisher's span and, for a retry in this process, to the failed
// run's (prev), so that a retried event does not stretch its publisher's trace. The span
// is nil without a tracer.
func (e *Engine) handlerContext(ctx context.Context, name string, ev Event, d Delivery, prev trace.SpanContext) (context.Context, trace.Span) {
	ctx = withTrace(ctx, ev)
	if e.tracer == nil {
		return ctx, nil
	}
	var span trace.Span
	if d.Attempt > 1 {
		var links []trace.Link
		if p := trace.SpanContextFromContext(ctx); p.IsValid() {
			links = append(links, trace.Link{SpanContext: p})
		}
		if prev.IsValid() {
			links = append(links, trace.Link{SpanContext: prev})
		}
		ctx, span = e.tracer.Start(ctx, name, consumerKind, trace.WithNewRoot(), trace.WithLinks(links...))
	} else {
		ctx, span = e.tracer.Start(ctx, name, consumerKind)
	}
	// The attributes are built only for a span that is recorded: a sampler that drops
	// the span costs no allocation for them (samplers do not see them).
	if span.IsRecording() {
		setProcessAttrs(span, d, attribute.String("messaging.message.id", ev.ID))
	}
	return ctx, span
}

// setProcessAttrs sets the attributes of a handler run's span: the messaging
// conventions' for a process operation, then more (what tells a single event's run from a
// batch's), then the delivery's entry, key, attempt and generation.
func setProcessAttrs(span trace.Span, d Delivery, more ...attribute.KeyValue) {
	attrs := make([]attribute.KeyValue, 0, 10+len(more))
	attrs = append(attrs,
		attribute.String("messaging.system", "redis"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", d.Stream),
		attribute.String("messaging.destination.template", d.Category),
		attribute.String("messaging.consumer.group.name", d.Handler))
	attrs = append(attrs, more...)
	attrs = append(attrs,
		attribute.String("seqctl.entry_id", d.EntryID),
		attribute.String("seqctl.key", d.Key),
		attribute.Int("seqctl.attempt", d.Attempt),
		attribute.Int64("seqctl.generation", d.Generation))
	span.SetAttributes(attrs...)
}

var consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)

// batchContext returns the context of one run of a BatchFunc over several events: with a
// tracer, one consumer span for the run, the root of a trace of its own (a run has many
// publishers) linked to each event's publisher span and, for a retry in this process, to
// the failed run's (prev), with the run's first and last entry and its event count.
// Without a tracer, ctx as it is: the events' trace contexts ride in the events
// themselves. The span is nil without a tracer.
func (e *Engine) batchContext(ctx context.Context, name string, evs []Event, d Delivery, prev trace.SpanContext) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, nil
	}
	links := make([]trace.Link, 0, len(evs)+1)
	for _, ev := range evs {
		if p := trace.SpanContextFromContext(withTrace(context.Background(), ev)); p.IsValid() {
			links = append(links, trace.Link{SpanContext: p})
		}
	}
	if prev.IsValid() {
		links = append(links, trace.Link{SpanContext: prev})
	}
	ctx, span := e.tracer.Start(ctx, name, consumerKind, trace.WithNewRoot(), trace.WithLinks(links...))
	if span.IsRecording() {
		setProcessAttrs(span, d, attribute.Int("messaging.batch.message_count", len(evs)),
			attribute.String("seqctl.last_entry_id", d.LastEntryID()))
	}
	return ctx, span
}

// endSpan ends a handler run's span, recording a failed attempt as an error. It returns
// the span's context when the run failed (its retry links to it), else nothing.
func endSpan(span trace.Span, err error) trace.SpanContext {
	if span == nil {
		return trace.SpanContext{}
	}
	defer span.End()
	if err == nil {
		return trace.SpanContext{}
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, clip(err.Error(), 256))
	return span.SpanContext()
}

// spanName returns the name of the spans of the worker's runs of lane's entries,
// "process {category}", made once per lane.
func (w *worker) spanName(lane int) string {
	if w.spanNames == nil {
		w.spanNames = make([]string, len(w.lanes))
	}
	if w.spanNames[lane] == "" {
		w.spanNames[lane] = "process " + w.u.laneCats[lane]
	}
	return w.spanNames[lane]
}

// failedRunOf returns the span of the last failed run of entry id in this worker.
func (w *worker) failedRunOf(id string) trace.SpanContext {
	if w.failedID != id {
		return trace.SpanContext{}
	}
	return w.failedRun
}
