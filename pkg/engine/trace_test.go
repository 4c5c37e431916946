package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// tracedContext returns a context whose span context is testTraceParent's, as a
// publisher's instrumented request would carry.
func tracedContext() context.Context {
	return propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": testTraceParent, "tracestate": "rojo=1"})
}

// Publish stores the span context of its context in the entry, and the handler's
// context carries it back: the handler sees the publisher's trace. An event published
// without one carries none.
func TestPublishCarriesTraceContextToTheHandler(t *testing.T) {
	srv, rdb, b := startNode(t)
	seen := make(chan trace.SpanContext, 2)
	d := testDomain(t, func(ctx context.Context, ev Event) error {
		seen <- trace.SpanContextFromContext(ctx)
		return nil
	}, nil)
	startEngine(t, srv, d, "i1", 2*time.Second)
	data := []byte(`{"client_id":"c-1","seq":1}`)
	p, err := b.Publish(tracedContext(), d, "OrderPlaced", data, PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := rdb.XRange(context.Background(), p.Stream, p.EntryID, p.EntryID).Val()
	if len(msgs) != 1 || msgs[0].Values[keyspace.FieldTraceParent] != testTraceParent || msgs[0].Values[keyspace.FieldTraceState] != "rojo=1" {
		t.Fatalf("the entry holds %v", msgs)
	}
	sc := <-seen
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsRemote() {
		t.Errorf("the handler's span context: trace %s, remote %v", sc.TraceID(), sc.IsRemote())
	}
	if _, err := b.Publish(context.Background(), d, "OrderPlaced", data, PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if sc := <-seen; sc.IsValid() {
		t.Errorf("an untraced event reached its handler with span context %v", sc)
	}
}

// The inline broker carries the publisher's trace context to the handler too.
func TestInlinePublishCarriesTraceContext(t *testing.T) {
	seen := make(chan trace.SpanContext, 1)
	d := NewDomain("inline").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id"}}).
		AddHandler(Handler{Name: "P", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"}, SequentialBy: "client_id",
			Func: func(ctx context.Context, ev Event) error {
				seen <- trace.SpanContextFromContext(ctx)
				return nil
			}})
	ib := NewInlineBroker()
	if err := d.Init(ib); err != nil {
		t.Fatal(err)
	}
	if err := ib.Start(d); err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	if _, err := ib.Publish(tracedContext(), d, "OrderPlaced", []byte(`{"client_id":"c-1"}`), PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case sc := <-seen:
		if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("the handler's trace %s", sc.TraceID())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event was not handled")
	}
}

// With a tracer provider, each handler run is a consumer span: the first a child of the
// publisher's span, in its trace (and the handler's context carries the engine's span);
// a retry starts a trace of its own linked to the publisher's span and to the failed
// run's, and a failed run is recorded as an error.
func TestHandlerRunsAreConsumerSpans(t *testing.T) {
	srv, _, b := startNode(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	seen := make(chan trace.SpanContext, 2)
	d := testDomain(t, func(ctx context.Context, ev Event) error {
		seen <- trace.SpanContextFromContext(ctx)
		if dl, _ := DeliveryFrom(ctx); dl.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, nil)
	startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Timing, c.TracerProvider = fastTiming(2*time.Second), tp
	})
	if _, err := b.Publish(tracedContext(), d, "OrderPlaced", []byte(`{"client_id":"c-1","seq":1}`), PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	first, second := <-seen, <-seen
	testkit.WaitFor(t, 5*time.Second, "both runs' spans ended", func() bool { return len(rec.Ended()) == 2 })
	spans := rec.Ended()
	publisher := trace.SpanContextFromContext(tracedContext())
	s1, s2 := spans[0], spans[1]
	if s1.SpanKind() != trace.SpanKindConsumer || s1.Name() != "process order" {
		t.Errorf("first span: kind %v, name %q", s1.SpanKind(), s1.Name())
	}
	if s1.Parent().SpanID() != publisher.SpanID() || s1.SpanContext().TraceID() != publisher.TraceID() {
		t.Errorf("first run's span: parent %s in trace %s, want the publisher's span %s in its trace", s1.Parent().SpanID(), s1.SpanContext().TraceID(), publisher.SpanID())
	}
	if first.SpanID() != s1.SpanContext().SpanID() || first.TraceID() != publisher.TraceID() {
		t.Errorf("the handler's context carries span %s of trace %s, want the engine's span %s", first.SpanID(), first.TraceID(), s1.SpanContext().SpanID())
	}
	if s1.Status().Code != codes.Error || len(s1.Events()) == 0 {
		t.Errorf("the failed run's span: status %v, %d events, want an error recorded", s1.Status(), len(s1.Events()))
	}
	if s2.SpanContext().TraceID() == publisher.TraceID() || s2.Parent().IsValid() {
		t.Errorf("the retry's span is in trace %s with parent %v: want a trace of its own", s2.SpanContext().TraceID(), s2.Parent())
	}
	var linked []trace.SpanID
	for _, l := range s2.Links() {
		linked = append(linked, l.SpanContext.SpanID())
	}
	if len(linked) != 2 || linked[0] != publisher.SpanID() || linked[1] != s1.SpanContext().SpanID() {
		t.Errorf("the retry's span links to %v, want the publisher's %s and the failed run's %s", linked, publisher.SpanID(), s1.SpanContext().SpanID())
	}
	if second.SpanID() != s2.SpanContext().SpanID() {
		t.Errorf("the retry's handler context carries span %s, want %s", second.SpanID(), s2.SpanContext().SpanID())
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range s2.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["seqctl.attempt"].AsInt64() != 2 || attrs["messaging.destination.name"].AsString() != "order:c-1" ||
		attrs["messaging.consumer.group.name"].AsString() != "Projector" || attrs["seqctl.generation"].AsInt64() <= 0 {
		t.Errorf("the retry's span attributes: %v", s2.Attributes())
	}
}

// withTrace reads a traceparent and tracestate exactly as the W3C propagator does,
// through its own parser for the form publishers write and through the propagator for
// any other.
func TestWithTraceReadsAsThePropagator(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cases := []struct{ parent, state string }{
		{tp, ""},
		{tp, "vendor=abc,other=x1"},
		{tp, "not a tracestate!"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", ""}, // flags version 00 does not define
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""}, // uppercase
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""}, // zero trace id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""}, // zero span id
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", ""},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", ""},
		{"garbage", ""},
	}
	for i, c := range cases {
		got := trace.SpanContextFromContext(withTrace(context.Background(), Event{TraceParent: c.parent, TraceState: c.state}))
		want := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier{
			keyspace.FieldTraceParent: c.parent, keyspace.FieldTraceState: c.state}))
		if !got.Equal(want) || got.IsRemote() != want.IsRemote() {
			t.Errorf("%q %q: got %v (remote %v), the propagator reads %v (remote %v)", c.parent, c.state, got, got.IsRemote(), want, want.IsRemote())
		}
		// The first four are the forms publishers write: read without the propagator.
		if _, fast := parseTraceParent(c.parent, c.state); fast != (i < 4) {
			t.Errorf("%q: read by its own parser: %v", c.parent, fast)
		}
	}
}
