package deliver

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/seqctl/seqctl/pkg/engine"
)

const (
	testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTraceState  = "rojo=00f067aa0ba902b7"
)

// runUntracedThenTraced runs fn for an event twice: with a context without trace context,
// then with testTraceParent and testTraceState.
func runUntracedThenTraced(t *testing.T, fn engine.HandlerFunc) {
	t.Helper()
	ctx, ev := testEvent(t, `{"order_id":"o-1","client_id":"client-7"}`)
	if err := fn(ctx, ev); err != nil {
		t.Fatal(err)
	}
	traced := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": testTraceParent, "tracestate": testTraceState})
	if err := fn(traced, ev); err != nil {
		t.Fatal(err)
	}
}

// An HTTP handler receives the trace context of the handler run's context in the
// traceparent and tracestate headers, and none without one.
func TestHTTPCarriesTraceContext(t *testing.T) {
	srv, reqs, _ := testServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	fn, err := HTTP(HTTPConfig{URL: srv.URL, Client: newTestClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	runUntracedThenTraced(t, fn)
	got := reqs()
	if tp := got[0].header.Get(HeaderTraceParent); tp != "" {
		t.Errorf("untraced run: traceparent %q, want none", tp)
	}
	if tp, ts := got[1].header.Get(HeaderTraceParent), got[1].header.Get(HeaderTraceState); tp != testTraceParent || ts != testTraceState {
		t.Errorf("traced run: traceparent %q, tracestate %q", tp, ts)
	}
}

// An exec handler gets TRACEPARENT and TRACESTATE from the run's context, empty without
// one, whatever seqctl's own environment holds.
func TestExecCarriesTraceContext(t *testing.T) {
	dir := t.TempDir()
	p := script(t, `echo "$TRACEPARENT|$TRACESTATE" >> "$OUT/trace"`)
	t.Setenv("OUT", dir)
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01") // seqctl's own
	fn, err := Exec(ExecConfig{Argv: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	runUntracedThenTraced(t, fn)
	b, _ := os.ReadFile(filepath.Join(dir, "trace"))
	want := "|\n" + testTraceParent + "|" + testTraceState + "\n"
	if string(b) != want {
		t.Errorf("the handler saw %q, want %q", b, want)
	}
}
