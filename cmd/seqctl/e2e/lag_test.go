package e2e

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
)

var lagRE = regexp.MustCompile(`(?m)^seqctl_lag_seconds\{category="step",handler="Stepper"\} (\S+)$`)

// seqctl_lag_seconds on /metrics of a running seqctl run: 0 before any event, above 1 s
// while a handler that takes 400 ms an event works through a key's backlog of 8, and
// back under 1 s (0) once it is drained.
func TestRunLagSeconds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t, "http.domain.toml", map[string]string{"URL": srv.URL})
	a := f.run("a", []string{"E2E_SECRET=" + e2eSecret}, "--metrics-addr", "127.0.0.1:0")
	base := metricsAddr(t, a)
	a.waitReady(10 * time.Second)
	lag := func() float64 {
		_, body := get(t, base+"/metrics")
		m := lagRE.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics has no seqctl_lag_seconds for Stepper on step:\n%s", body)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := lag(); v != 0 {
		t.Errorf("lag %v before any event, want 0", v)
	}
	f.publish(steps([]string{"slow"}, 1, 8))
	var peak float64
	testkit.WaitFor(t, 10*time.Second, "the lag above 1s", func() bool { peak = lag(); return peak > 1 })
	testkit.WaitFor(t, 15*time.Second, "the lag back under 1s once drained", func() bool { return lag() < 1 })
	t.Logf("lag rose to %.2fs, then fell to %.2fs", peak, lag())
}
