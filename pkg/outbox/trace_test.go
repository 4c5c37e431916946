package outbox

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A row enqueued under a span stores its trace context, and the relay publishes the
// event with it; a row enqueued without one is published without.
func TestRelayPublishesTheEnqueuersTraceContext(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{})
		ctx := propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": testTraceParent, "tracestate": "rojo=1"})
		e.enqueueIn(t, ctx, Event{Type: "OrderPlaced", Data: orderData("c-1", 1)})
		e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", 2)})
		stop := run(t, e.relay(t, nil, nil))
		defer stop()
		stream := keyspace.SingleNode.PartitionStream("order", "c-1")
		testkit.WaitFor(t, 10*time.Second, "both rows published", func() bool {
			return e.rdb.XLen(context.Background(), stream).Val() == 2
		})
		msgs := e.rdb.XRange(context.Background(), stream, "-", "+").Val()
		if msgs[0].Values["traceparent"] != testTraceParent || msgs[0].Values["tracestate"] != "rojo=1" {
			t.Errorf("the traced row's entry: %v", msgs[0].Values)
		}
		if _, ok := msgs[1].Values["traceparent"]; ok {
			t.Errorf("the untraced row's entry has trace context: %v", msgs[1].Values)
		}
	})
}

// A table made before the trace columns (schema version 1) gets them from Migrate, its
// rows kept, and records version 2.
func TestMigrateAddsTheTraceColumns(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		ctx := context.Background()
		e := newEnvNoRedis(t, d, domainOpts{})
		e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", 1)})
		for _, stmt := range []string{
			"ALTER TABLE seqctl_outbox DROP COLUMN traceparent",
			"ALTER TABLE seqctl_outbox DROP COLUMN tracestate",
			"UPDATE seqctl_outbox_meta SET value = '1' WHERE name = 'schema_version'",
		} {
			if _, err := e.db.Exec(stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		if err := e.ob.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		var n int
		var tp *string
		if err := e.db.QueryRow("SELECT count(*), max(traceparent) FROM seqctl_outbox").Scan(&n, &tp); err != nil {
			t.Fatalf("after Migrate: %v", err)
		}
		if n != 1 || tp != nil {
			t.Errorf("after Migrate: %d rows, traceparent %v; want the one row, without trace context", n, tp)
		}
		var v string
		if err := e.db.QueryRow("SELECT value FROM seqctl_outbox_meta WHERE name = 'schema_version'").Scan(&v); err != nil || v != "2" {
			t.Errorf("schema_version %q (%v), want 2", v, err)
		}
		e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", 2)})
	})
}

// With a tracer provider the relay appends each row under a producer span, child of the
// enqueuer's span, and the event carries the relay's span: enqueue -> relay -> handler
// in one trace.
func TestRelaySpanIsTheEnqueuersChild(t *testing.T) {
	e := newEnv(t, SQLite, domainOpts{})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": testTraceParent})
	e.enqueueIn(t, ctx, Event{Type: "OrderPlaced", Data: orderData("c-1", 1)})
	stop := run(t, e.relay(t, nil, func(c *RelayConfig) { c.TracerProvider = tp }))
	defer stop()
	stream := keyspace.SingleNode.PartitionStream("order", "c-1")
	testkit.WaitFor(t, 10*time.Second, "the row published and its span ended", func() bool {
		return e.rdb.XLen(context.Background(), stream).Val() == 1 && len(rec.Ended()) == 1
	})
	s := rec.Ended()[0]
	if s.Name() != "publish order" || s.SpanKind() != trace.SpanKindProducer {
		t.Errorf("the relay's span: %q, kind %v", s.Name(), s.SpanKind())
	}
	if s.Parent().SpanID().String() != "00f067aa0ba902b7" || s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("the relay's span: parent %s in trace %s, want the enqueuer's", s.Parent().SpanID(), s.SpanContext().TraceID())
	}
	msgs := e.rdb.XRange(context.Background(), stream, "-", "+").Val()
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext().SpanID().String() + "-01"
	if got := msgs[0].Values["traceparent"]; got != want {
		t.Errorf("the entry's traceparent %v, want the relay's span %s", got, want)
	}
}
