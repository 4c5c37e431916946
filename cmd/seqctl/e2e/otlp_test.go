package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/outbox"
)

// otlpCollector is an OTLP/HTTP trace endpoint: it decodes the export requests sent to
// /v1/traces and keeps their spans.
type otlpCollector struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	bad   []string
}

func startCollector(t *testing.T) (*otlpCollector, string) {
	c := &otlpCollector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		var req coltrace.ExportTraceServiceRequest
		c.mu.Lock()
		defer c.mu.Unlock()
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			c.bad = append(c.bad, r.URL.Path)
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				c.spans = append(c.spans, ss.Spans...)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// named returns the spans of that name received so far.
func (c *otlpCollector) named(name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// seqctl run with OTEL_EXPORTER_OTLP_ENDPOINT exports a consumer span per handler run to
// a real OTLP/HTTP endpoint: for an event published with TRACEPARENT, the first run's
// span is a child of the publisher's span in its trace, and the HTTP handler's
// traceparent names that span; the retry after a failed run starts a trace of its own
// linked to the publisher's span and to the failed run's.
func TestRunExportsHandlerSpans(t *testing.T) {
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	col, colURL := startCollector(t)
	var mu sync.Mutex
	var parents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("traceparent"))
		first := len(parents) == 1
		mu.Unlock()
		if first {
			http.Error(w, "the first attempt fails", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t, "http.domain.toml", map[string]string{"URL": srv.URL})
	p := f.start("a", []string{"E2E_SECRET=" + e2eSecret, "OTEL_EXPORTER_OTLP_ENDPOINT=" + colURL,
		"OTEL_SERVICE_NAME=e2e-worker", "OTEL_BSP_SCHEDULE_DELAY=100"}, "run", "--instance-id", "a")
	p.waitReady(10 * time.Second)
	out, code, _ := seqctlCmd(t, []string{"TRACEPARENT=00-" + traceID + "-" + parentID + "-01"},
		"publish", "--config", f.config, "--redis-url", f.url, "--event", "Step", "--data", `{"key":"t1","seq":1}`)
	if code != 0 {
		t.Fatalf("publish: exit %d\n%s", code, out)
	}
	testkit.WaitFor(t, 15*time.Second, "both runs' spans exported", func() bool { return len(col.named("process step")) >= 2 })
	spans := col.named("process step")
	first, retry := spans[0], spans[1]
	if hex.EncodeToString(first.TraceId) != traceID || hex.EncodeToString(first.ParentSpanId) != parentID {
		t.Errorf("the first run's span: trace %x parent %x, want the publisher's trace %s and span %s", first.TraceId, first.ParentSpanId, traceID, parentID)
	}
	if first.Kind != tracepb.Span_SPAN_KIND_CONSUMER || first.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the first run's span: kind %v, status %v; want a consumer span recorded as an error", first.Kind, first.Status)
	}
	mu.Lock()
	handlerSaw := parents[0]
	mu.Unlock()
	if want := "00-" + traceID + "-" + hex.EncodeToString(first.SpanId) + "-01"; handlerSaw != want {
		t.Errorf("the HTTP handler's traceparent %q, want %q (the engine's span)", handlerSaw, want)
	}
	if hex.EncodeToString(retry.TraceId) == traceID || len(retry.ParentSpanId) != 0 {
		t.Errorf("the retry's span is in trace %x under %x: want a trace of its own", retry.TraceId, retry.ParentSpanId)
	}
	var links []string
	for _, l := range retry.Links {
		links = append(links, hex.EncodeToString(l.SpanId))
	}
	if strings.Join(links, ",") != parentID+","+hex.EncodeToString(first.SpanId) {
		t.Errorf("the retry's span links to %v, want the publisher's span %s and the failed run's %x", links, parentID, first.SpanId)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.bad) > 0 {
		t.Errorf("requests that were not OTLP trace exports: %v", col.bad)
	}
}

// An event enqueued through the outbox under the application's span, relayed and
// handled by seqctl run (exporting to a real OTLP/HTTP endpoint), makes one trace: the
// application's span, the relay's append as its child, and each handler run as the
// relay's child. The HTTP handler's traceparent and the exec handler's TRACEPARENT name
// their runs' spans.
func TestRunTracesOneTraceThroughTheOutbox(t *testing.T) {
	col, colURL := startCollector(t)
	var mu sync.Mutex
	var httpParents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		httpParents = append(httpParents, r.Header.Get("traceparent"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	dbPath, outPath := filepath.Join(dir, "outbox.db"), filepath.Join(dir, "exec-trace.txt")
	f := newFixture(t, "traced.domain.toml", map[string]string{"URL": srv.URL, "DB": dbPath, "OUT": outPath})
	if out, code, _ := seqctlCmd(t, nil, "outbox", "migrate", "--config", f.config); code != 0 {
		t.Fatalf("outbox migrate: exit %d\n%s", code, out)
	}
	p := f.start("a", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + colURL, "OTEL_BSP_SCHEDULE_DELAY=100"}, "run", "--instance-id", "a")
	p.waitReady(10 * time.Second)

	// The application: its own tracer exporting to the same endpoint, one span around
	// the transaction that enqueues the event.
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(colURL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	app := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = app.Shutdown(context.Background()) }()
	cfg, err := config.Load(f.config)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := cfg.InitDomain()
	if err != nil {
		t.Fatal(err)
	}
	db, dialect, err := outbox.Open("sqlite://" + dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ob, err := outbox.New(db, dialect, dom)
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := app.Tracer("e2e").Start(context.Background(), "place order")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(ctx, tx, outbox.Event{Type: "Step", Data: []byte(`{"key":"t1","seq":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	span.End()
	appSpan := span.SpanContext()

	testkit.WaitFor(t, 15*time.Second, "the relay's and both handlers' spans exported", func() bool {
		return len(col.named("publish step")) >= 1 && len(col.named("process step")) >= 2
	})
	relay := col.named("publish step")[0]
	if hex.EncodeToString(relay.TraceId) != appSpan.TraceID().String() || hex.EncodeToString(relay.ParentSpanId) != appSpan.SpanID().String() {
		t.Errorf("the relay's span: trace %x parent %x, want the application's span %s", relay.TraceId, relay.ParentSpanId, appSpan.SpanID())
	}
	runs := map[string]bool{}
	for _, s := range col.named("process step") {
		if !bytes.Equal(s.TraceId, relay.TraceId) || !bytes.Equal(s.ParentSpanId, relay.SpanId) {
			t.Errorf("a handler run's span: trace %x parent %x, want the relay's span %x", s.TraceId, s.ParentSpanId, relay.SpanId)
		}
		runs["00-"+hex.EncodeToString(s.TraceId)+"-"+hex.EncodeToString(s.SpanId)+"-01"] = true
	}
	if len(col.named("place order")) != 1 {
		t.Errorf("the application's span did not arrive")
	}
	mu.Lock()
	defer mu.Unlock()
	execLines := completeLines(t, outPath)
	if len(httpParents) != 1 || !runs[httpParents[0]] {
		t.Errorf("the HTTP handler's traceparent %v, want one of the runs' spans %v", httpParents, runs)
	}
	if len(execLines) != 1 || !runs[execLines[0]] {
		t.Errorf("the exec handler's TRACEPARENT %v, want one of the runs' spans %v", execLines, runs)
	}
}
