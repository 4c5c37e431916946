package engine

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
