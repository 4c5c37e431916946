package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/seqctl/seqctl/pkg/engine"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// fakeSource is an engine as the gauges see it.
type fakeSource struct {
	stats engine.Stats
	owned []engine.OwnedPartition
	ready atomic.Bool
}

func (f *fakeSource) Stats() engine.Stats            { return f.stats }
func (f *fakeSource) Owned() []engine.OwnedPartition { return f.owned }
func (f *fakeSource) Ready() bool                    { return f.ready.Load() }

func TestObserverCounts(t *testing.T) {
	m := New()
	var _ engine.Observer = m
	boom := errors.New("boom")
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 1, Duration: 20 * time.Millisecond, Latency: 5 * time.Millisecond})
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 1, Duration: time.Millisecond, Latency: time.Second, Err: boom, Retry: true})
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 2, Duration: time.Millisecond, Err: boom, Retry: true})
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 3, Duration: time.Millisecond, Err: boom})
	m.Halted("Projector", "order")
	m.LeaseAcquired("Projector")
	m.LeaseAcquired("Projector")
	m.LeaseLost("Projector", "fenced")
	m.SetRelayBacklog(17)

	checks := []struct {
		name string
		got  float64
		want float64
	}{
		{"processed", testutil.ToFloat64(m.processed.WithLabelValues("Projector", "order")), 1},
		{"failed", testutil.ToFloat64(m.failed.WithLabelValues("Projector", "order")), 3},
		{"retried", testutil.ToFloat64(m.retried.WithLabelValues("Projector", "order")), 2},
		{"halts", testutil.ToFloat64(m.halts.WithLabelValues("Projector", "order")), 1},
		{"acquired", testutil.ToFloat64(m.acquired.WithLabelValues("Projector")), 2},
		{"lost", testutil.ToFloat64(m.lost.WithLabelValues("Projector", "fenced")), 1},
		{"fenced", testutil.ToFloat64(m.fenced.WithLabelValues("Projector")), 1},
		{"backlog", testutil.ToFloat64(m.backlog), 17},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Durations of all four attempts; latency of first attempts only.
	want := `
# HELP seqctl_publish_to_handle_latency_seconds Time from the publish (Redis time of the XADD) to the start of the first handler attempt.
# TYPE seqctl_publish_to_handle_latency_seconds histogram
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.001"} 0
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.0025"} 0
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.005"} 1
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.01"} 1
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.025"} 1
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.05"} 1
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.1"} 1
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.25"} 1
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="0.5"} 1
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="1"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="2.5"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="5"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="10"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="30"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="60"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="120"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="300"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="600"} 2
seqctl_publish_to_handle_latency_seconds_bucket{category="order",handler="Projector",le="+Inf"} 2
seqctl_publish_to_handle_latency_seconds_sum{category="order",handler="Projector"} 1.005
seqctl_publish_to_handle_latency_seconds_count{category="order",handler="Projector"} 2
`
	if err := testutil.CollectAndCompare(m.latency, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.duration); n != 1 {
		t.Errorf("duration series = %d, want 1", n)
	}
}

// An attempt of a batch counts each of its events; one that says nothing counts one.
func TestObserverCountsBatchEvents(t *testing.T) {
	m := New()
	boom := errors.New("boom")
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 1, Events: 32, Duration: 10 * time.Millisecond})
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 1, Events: 10, Err: boom, Retry: true})
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 2, Events: 10, Err: boom})
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 2, Events: 1}) // the split: one at a time
	m.Attempt(engine.AttemptInfo{Group: "Projector", Category: "order", Attempt: 1})            // Events unset
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"processed", testutil.ToFloat64(m.processed.WithLabelValues("Projector", "order")), 34},
		{"failed", testutil.ToFloat64(m.failed.WithLabelValues("Projector", "order")), 20},
		{"retried", testutil.ToFloat64(m.retried.WithLabelValues("Projector", "order")), 10},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// The call's duration is observed once per attempt, not per event.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := `seqctl_handler_duration_seconds_count{category="order",handler="Projector"} 5`; !strings.Contains(rec.Body.String(), want+"\n") {
		t.Errorf("the scrape lacks %q: the duration is observed once per attempt", want)
	}
}

func TestSlotWaitHistogram(t *testing.T) {
	m := New()
	var o engine.Observer = m
	so, ok := o.(engine.SlotObserver)
	if !ok {
		t.Fatal("Metrics does not implement engine.SlotObserver")
	}
	so.SlotWait("Projector", 3*time.Second)
	so.SlotWait("Projector", time.Millisecond)
	body := scrape(t, m)
	for _, line := range []string{
		`seqctl_handler_slot_wait_seconds_count{handler="Projector"} 2`,
		`seqctl_handler_slot_wait_seconds_bucket{handler="Projector",le="0.001"} 1`,
		`seqctl_handler_slot_wait_seconds_bucket{handler="Projector",le="5"} 2`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
}

// The engine's limit observer adds each wait for a permit to the handler's counter, in
// seconds; the value waited for is no label.
func TestLimitWaitCounter(t *testing.T) {
	m := New()
	var o engine.Observer = m
	lo, ok := o.(engine.LimitObserver)
	if !ok {
		t.Fatal("Metrics does not implement engine.LimitObserver")
	}
	lo.LimitWait("Projector", 1500*time.Millisecond)
	lo.LimitWait("Projector", 250*time.Millisecond)
	if body := scrape(t, m); !strings.Contains(body, `seqctl_limit_wait_seconds_total{handler="Projector"} 1.75`+"\n") {
		t.Errorf("scrape lacks the limit wait of 1.75 s:\n%s", grepLines(body, "limit_wait"))
	}
}

// grepLines keeps the lines of body that contain s.
func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestDeclareCreatesZeroSeries(t *testing.T) {
	m := New()
	m.Declare("Projector", "order")
	m.Declare("Fulfillment", "payment", "shipping")
	if n := testutil.CollectAndCount(m.processed); n != 3 {
		t.Errorf("processed series = %d, want 3", n)
	}
	body := scrape(t, m)
	for _, line := range []string{
		`seqctl_events_processed_total{category="shipping",handler="Fulfillment"} 0`,
		`seqctl_partitions_owned{handler="Projector"} 0`,
		`seqctl_lease_losses_total{handler="Fulfillment",reason="fenced"} 0`,
		`seqctl_ready 0`,
		`seqctl_relay_backlog 0`,
		`seqctl_handler_slots_in_use{handler="Projector"} 0`,
		`seqctl_partitions_waiting_for_slot{handler="Fulfillment"} 0`,
		`seqctl_handler_slot_wait_seconds_count{handler="Projector"} 0`,
		`seqctl_limit_wait_seconds_total{handler="Fulfillment"} 0`,
		`seqctl_partitions_throttled{handler="Projector"} 0`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
}

func TestGaugesReadTheSourceAtScrape(t *testing.T) {
	m := New()
	m.Declare("Idle", "audit")
	src := &fakeSource{
		stats: engine.Stats{Owned: 3, Halted: 1, LivePartitions: map[string]int{"order": 12, "payment": 4}, DiscoveryBehind: 6,
			Slots: engine.SlotStats{InUse: 5, Limit: 4 + 128, Waiting: 7},
			HandlerSlots: []engine.HandlerSlotStats{
				{Handler: "Fulfillment", SlotStats: engine.SlotStats{InUse: 1, Limit: 128}},
				{Handler: "Projector", SlotStats: engine.SlotStats{InUse: 4, Limit: 4, Waiting: 7}},
			},
			Throttled: map[string]int{"Projector": 9}},
		owned: []engine.OwnedPartition{
			{Group: "Projector", Stream: "order:c-1", Generation: 3},
			{Group: "Projector", Stream: "order:c-2", Generation: 4},
			{Group: "Fulfillment", Stream: "__pm__:Fulfillment:o-9", Generation: 1},
		},
	}
	src.ready.Store(true)
	m.SetSource(src)
	body := scrape(t, m)
	for _, line := range []string{
		`seqctl_partitions_owned{handler="Projector"} 2`,
		`seqctl_partitions_owned{handler="Fulfillment"} 1`,
		`seqctl_partitions_owned{handler="Idle"} 0`,
		`seqctl_partitions_halted 1`,
		`seqctl_live_partitions{category="order"} 12`,
		`seqctl_live_partitions{category="payment"} 4`,
		`seqctl_discovery_behind_partitions 6`,
		`seqctl_ready 1`,
		`seqctl_handler_slots_in_use{handler="Projector"} 4`,
		`seqctl_handler_slots_limit{handler="Projector"} 4`,
		`seqctl_partitions_waiting_for_slot{handler="Projector"} 7`,
		`seqctl_handler_slots_in_use{handler="Fulfillment"} 1`,
		`seqctl_partitions_waiting_for_slot{handler="Fulfillment"} 0`,
		`seqctl_handler_slots_limit{handler="Idle"} 0`,
		`seqctl_instance_handler_slots_limit 132`,
		`seqctl_partitions_throttled{handler="Projector"} 9`,
		`seqctl_partitions_throttled{handler="Fulfillment"} 0`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if strings.Contains(body, "c-1") || strings.Contains(body, "o-9") {
		t.Error("a partition key leaked into the scrape")
	}
	// A handler that stops owning partitions is reported at 0, not dropped.
	src.owned = src.owned[2:]
	body = scrape(t, m)
	if !strings.Contains(body, `seqctl_partitions_owned{handler="Projector"} 0`+"\n") {
		t.Error("Projector's owned gauge vanished instead of going to 0")
	}
	m.SetSource(nil)
	if body := scrape(t, m); !strings.Contains(body, "seqctl_ready 0\n") {
		t.Error("ready not 0 without a source")
	}
}

func TestEndpoints(t *testing.T) {
	m := New()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without an engine = %d, want 503", code)
	}
	src := &fakeSource{}
	m.SetSource(src)
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with an engine not ready = %d, want 503", code)
	}
	src.ready.Store(true)
	if code, body := get("/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	// A readiness condition that fails (a handler's database down) makes the instance not
	// ready, with its reason, in /readyz and in seqctl_ready.
	var dbUp atomic.Bool
	m.AddReadiness(func() (bool, string) { return dbUp.Load(), "the database of handler P cannot be reached" })
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "not ready: the database of handler P cannot be reached\n" {
		t.Errorf("/readyz with the database down = %d %q", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "seqctl_ready 0") {
		t.Error("seqctl_ready is not 0 with the database down")
	}
	dbUp.Store(true)
	code, body := get("/readyz")
	if code != 200 {
		t.Errorf("/readyz with the database back = %d %q", code, body)
	}
	code, body = get("/metrics")
	if code != 200 || !strings.Contains(body, "seqctl_relay_backlog 0") || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "seqctl_ready 1") {
		t.Errorf("/metrics = %d:\n%s", code, body)
	}
	if code, _ := get("/nope"); code != 404 {
		t.Errorf("/nope = %d, want 404", code)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestRelayBacklogFunc(t *testing.T) {
	m := New()
	set := m.RelayBacklogFunc()
	set(5)
	if got := testutil.ToFloat64(m.backlog); got != 5 {
		t.Errorf("backlog = %v", got)
	}
}

// scrape renders the registry in the text format.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d", rec.Code)
	}
	return rec.Body.String()
}
