package e2e

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
)

// seqctl publish with $TRACEPARENT set, handled by a seqctl run process: the HTTP
// handler's traceparent carries that trace id, and its tracestate the publisher's.
func TestRunHTTPHandlerGetsThePublishersTrace(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	var mu sync.Mutex
	var parents, states []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents, states = append(parents, r.Header.Get("traceparent")), append(states, r.Header.Get("tracestate"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t, "http.domain.toml", map[string]string{"URL": srv.URL})
	p := f.start("a", []string{"E2E_SECRET=" + e2eSecret}, "run", "--instance-id", "a")
	p.waitReady(10 * time.Second)
	out, code, _ := seqctlCmd(t, []string{"TRACEPARENT=00-" + traceID + "-00f067aa0ba902b7-01", "TRACESTATE=vendor=1"},
		"publish", "--config", f.config, "--redis-url", f.url, "--event", "Step", "--data", `{"key":"t1","seq":1}`)
	if code != 0 {
		t.Fatalf("publish: exit %d\n%s", code, out)
	}
	testkit.WaitFor(t, 10*time.Second, "the event delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(parents) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if got := parents[0]; len(got) != 55 || got[3:35] != traceID {
		t.Errorf("the handler's traceparent %q, want trace id %s", got, traceID)
	}
	if states[0] != "vendor=1" {
		t.Errorf("the handler's tracestate %q, want vendor=1", states[0])
	}
}
