package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// part is a listed partition of handler h on category "order".
func part(h string, st admin.State, backlog, pending, headAgeMS int64) admin.Partition {
	p := admin.Partition{Category: "order", Key: "k", Handler: h, State: st, Backlog: backlog, Pending: pending, HeadAgeMS: headAgeMS}
	if headAgeMS > 0 {
		p.HeadID = "1-0"
	}
	return p
}

func TestAggregateBacklog(t *testing.T) {
	parts := []admin.Partition{
		part("Projector", admin.StateUnowned, 3, 0, 2500),
		part("Projector", admin.StateRunning, 2, 1, 7250),
		part("Projector", admin.StateIdle, 0, 0, 0),
		part("Projector", admin.StateHalted, 4, 4, 1000),
		part("Projector", admin.StateRunning, -1, 2, 300), // unknown: counts its 2 pending
		part("Projector", admin.StateUnowned, -1, 0, 400), // unknown, a head: counts 1
		part("Projector", admin.StateIdle, -1, 0, 0),      // unknown, caught up: counts 0
		part("Mailer", admin.StatePaused, 5, 0, 60000),
		part("Mailer", "draining", 1, 0, 10), // a state pkg/admin does not have (yet)
		{Category: "invoice", Key: "k", Handler: "Projector", State: admin.StateIdle},
	}
	declared := []HandlerCategory{{"order", "Projector"}, {"order", "Auditor"}}
	got := AggregateBacklog(parts, declared, knownStates)

	states := []admin.State{"draining", admin.StateHalted, admin.StateIdle, admin.StatePaused, admin.StateRunning, admin.StateThrottled, admin.StateUnowned}
	counts := func(draining, halted, idle, paused, running, unowned int64) map[admin.State]int64 {
		return map[admin.State]int64{"draining": draining, admin.StateHalted: halted, admin.StateIdle: idle,
			admin.StatePaused: paused, admin.StateRunning: running, admin.StateThrottled: 0, admin.StateUnowned: unowned}
	}
	want := Backlog{
		States:  states,
		Waiting: map[string][]LimitWaiting{},
		Stats: map[HandlerCategory]BacklogStat{
			{"order", "Projector"}: {LagSeconds: 7.25, Events: 3 + 2 + 4 + 2 + 1, UnknownPartitions: 3, Partitions: counts(0, 1, 2, 0, 2, 2),
				WaitingEvents: 3 + 2 + 2 + 1, WaitingSeconds: 7.25}, // not the halted one's 4
			// the paused partition's 5 events and 60 s are not waiting
			{"order", "Mailer"}:      {LagSeconds: 60, Events: 6, Partitions: counts(1, 0, 0, 1, 0, 0), WaitingEvents: 1, WaitingSeconds: 0.01},
			{"order", "Auditor"}:     {Partitions: counts(0, 0, 0, 0, 0, 0)}, // declared, nothing listed
			{"invoice", "Projector"}: {Partitions: counts(0, 0, 1, 0, 0, 0)},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AggregateBacklog mismatch (-want +got):\n%s", diff)
	}
}

// fakeLister answers each ListPartitions with the next of its replies, the last one
// again once they run out.
type fakeLister struct {
	mu      sync.Mutex
	replies []listReply
	calls   int
}

type listReply struct {
	parts []admin.Partition
	err   error
}

// EachPartition hands the reply over one partition per page.
func (f *fakeLister) EachPartition(_ context.Context, _ admin.Filter, fn func([]admin.Partition) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.replies[min(f.calls, len(f.replies)-1)]
	f.calls++
	for i := range r.parts {
		if err := fn(r.parts[i : i+1]); err != nil {
			return err
		}
	}
	return r.err
}

// backlogHead is the HELP and TYPE of the backlog gauges, in the order testutil prints them.
const backlogHead = `
# HELP seqctl_backlog_events Entries not yet handled, summed over the handler's partitions of the category (a partition of unknown backlog adds its lower bound, see seqctl_backlog_unknown_partitions), as of the exporter's last refresh.
# TYPE seqctl_backlog_events gauge
`

var backlogNames = []string{"seqctl_backlog_events", "seqctl_backlog_partitions", "seqctl_lag_seconds", "seqctl_backlog_unknown_partitions"}

// exposition renders the exporter's backlog gauges in the text format, without HELP and
// TYPE lines, sorted as the registry sorts them.
func exposition(t *testing.T, e *BacklogExporter) string {
	t.Helper()
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var lines []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		for _, n := range backlogNames {
			if strings.HasPrefix(l, n+"{") {
				lines = append(lines, l)
			}
		}
	}
	return strings.Join(lines, "\n")
}

// exportedZero is what the exporter of TestBacklogExporterRefresh serves before its
// first refresh: the declared pair, at 0, in every known state.
const exportedZero = `seqctl_backlog_events{category="order",handler="Projector"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="halted"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="idle"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="paused"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="running"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="throttled"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="unowned"} 0
seqctl_backlog_unknown_partitions{category="order",handler="Projector"} 0
seqctl_lag_seconds{category="order",handler="Projector"} 0`

// exportedFirst is what it serves after its first refresh.
const exportedFirst = `seqctl_backlog_events{category="order",handler="Projector"} 1
seqctl_backlog_events{category="order",handler="Reporter"} 2
seqctl_backlog_partitions{category="order",handler="Projector",state="halted"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="idle"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="paused"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="running"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="throttled"} 0
seqctl_backlog_partitions{category="order",handler="Projector",state="unowned"} 1
seqctl_backlog_partitions{category="order",handler="Reporter",state="halted"} 0
seqctl_backlog_partitions{category="order",handler="Reporter",state="idle"} 0
seqctl_backlog_partitions{category="order",handler="Reporter",state="paused"} 0
seqctl_backlog_partitions{category="order",handler="Reporter",state="running"} 1
seqctl_backlog_partitions{category="order",handler="Reporter",state="throttled"} 0
seqctl_backlog_partitions{category="order",handler="Reporter",state="unowned"} 0
seqctl_backlog_unknown_partitions{category="order",handler="Projector"} 0
seqctl_backlog_unknown_partitions{category="order",handler="Reporter"} 0
seqctl_lag_seconds{category="order",handler="Projector"} 1.5
seqctl_lag_seconds{category="order",handler="Reporter"} 0.5`

func TestBacklogExporterRefresh(t *testing.T) {
	boom := errors.New("redis: connection refused")
	l := &fakeLister{replies: []listReply{
		{parts: []admin.Partition{part("Projector", admin.StateUnowned, 1, 0, 1500), part("Reporter", admin.StateRunning, 2, 1, 500)}},
		{err: boom},
		{err: boom},
		{parts: []admin.Partition{part("Projector", admin.StateIdle, 0, 0, 0)}}, // Reporter is gone
	}}
	var logs bytes.Buffer
	e := NewBacklogExporter(BacklogOptions{Lister: l, Declared: []HandlerCategory{{"order", "Projector"}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()

	// Before the first refresh: the declared pair, at 0, in every known state.
	if diff := cmp.Diff(exportedZero, exposition(t, e)); diff != "" {
		t.Errorf("before the first refresh (-want +got):\n%s", diff)
	}
	if v := testutil.ToFloat64(e.lastRefresh); v != 0 {
		t.Errorf("last refresh %v before the first, want 0", v)
	}

	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(exportedFirst, exposition(t, e)); diff != "" {
		t.Errorf("after the first refresh (-want +got):\n%s", diff)
	}
	refreshed := testutil.ToFloat64(e.lastRefresh)
	if refreshed < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last refresh %v, want about now", refreshed)
	}

	// Two failures: the values stay, both are counted, one line is logged.
	for range 2 {
		if err := e.Refresh(ctx); !errors.Is(err, boom) {
			t.Fatalf("Refresh = %v, want %v", err, boom)
		}
	}
	if diff := cmp.Diff(exportedFirst, exposition(t, e)); diff != "" {
		t.Errorf("after failed refreshes, the values changed (-want +got):\n%s", diff)
	}
	if v := testutil.ToFloat64(e.errors); v != 2 {
		t.Errorf("refresh errors = %v, want 2", v)
	}
	if v := testutil.ToFloat64(e.lastRefresh); v != refreshed {
		t.Errorf("last refresh moved to %v on a failure, want %v", v, refreshed)
	}
	if n := strings.Count(logs.String(), "refresh failed"); n != 1 {
		t.Errorf("%d failure lines for one streak, want 1:\n%s", n, logs.String())
	}

	// A success again: Reporter's series are dropped, Projector's declared ones stay.
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	idle := strings.Replace(exportedZero, `state="idle"} 0`, `state="idle"} 1`, 1)
	if diff := cmp.Diff(idle, exposition(t, e)); diff != "" {
		t.Errorf("after the handler went away (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), "refresh succeeded again") || !strings.Contains(logs.String(), "failed_refreshes=2") {
		t.Errorf("no recovery line with the count:\n%s", logs.String())
	}
}

// A state found once is declared at 0 from then on, for every pair.
func TestBacklogExporterKeepsNewStates(t *testing.T) {
	l := &fakeLister{replies: []listReply{
		{parts: []admin.Partition{part("Projector", "draining", 1, 0, 0)}},
		{parts: []admin.Partition{part("Projector", admin.StateIdle, 0, 0, 0), part("Mailer", admin.StateIdle, 0, 0, 0)}},
	}}
	e := NewBacklogExporter(BacklogOptions{Lister: l})
	for range 2 {
		if err := e.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{
		`seqctl_backlog_partitions{category="order",handler="Projector",state="draining"} 0`,
		`seqctl_backlog_partitions{category="order",handler="Mailer",state="draining"} 0`,
	} {
		if got := exposition(t, e); !strings.Contains(got, want) {
			t.Errorf("no %s in:\n%s", want, got)
		}
	}
}

func TestBacklogExporterHelp(t *testing.T) {
	e := NewBacklogExporter(BacklogOptions{Lister: &fakeLister{}, Declared: []HandlerCategory{{"order", "Projector"}}})
	want := backlogHead + `seqctl_backlog_events{category="order",handler="Projector"} 0
`
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "seqctl_backlog_events"); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(e.Registry(), "seqctl_exporter_last_refresh_timestamp_seconds",
		"seqctl_exporter_refresh_errors_total", "seqctl_exporter_refresh_duration_seconds")
	if err != nil || n != 3 {
		t.Errorf("exporter's own series: %d, %v; want 3", n, err)
	}
	if n, err := testutil.GatherAndCount(e.Registry(), "seqctl_backlog_waiting_events", "seqctl_backlog_waiting_seconds"); err != nil || n != 2 {
		t.Errorf("waiting series of the declared pair: %d, %v; want 2", n, err)
	}
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if b, _ := io.ReadAll(rec.Body); rec.Code != 200 || string(b) != "ok\n" {
		t.Errorf("/healthz = %d %q", rec.Code, b)
	}
}

// Run refreshes at once, then every interval, and returns when its context ends.
func TestBacklogExporterRun(t *testing.T) {
	l := &fakeLister{replies: []listReply{{parts: []admin.Partition{part("Projector", admin.StateUnowned, 1, 0, 10)}}}}
	e := NewBacklogExporter(BacklogOptions{Lister: l})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx, 10*time.Millisecond) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		calls := l.calls
		l.mu.Unlock()
		if calls >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refreshes in 5 s at a 10 ms interval", calls)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !strings.Contains(exposition(t, e), `seqctl_backlog_events{category="order",handler="Projector"} 1`) {
		t.Errorf("Run did not refresh the gauges:\n%s", exposition(t, e))
	}
}

// benchPartitions writes n partitions of category "order" as a live deployment leaves
// them (the layout of pkg/admin's listing benchmark): 3 entries each and its index entry;
// group "Projector" with 2 entries delivered and not acknowledged; a lease held by a live
// session; every 100th partition halted.
func benchPartitions(tb testing.TB, rdb *redis.Client, n int) {
	tb.Helper()
	ctx, ks := context.Background(), keyspace.SingleNode
	const owner = "i1.1"
	if err := rdb.Set(ctx, ks.SessionKey(owner), "i1", time.Hour).Err(); err != nil {
		tb.Fatal(err)
	}
	rdb.SAdd(ctx, ks.GroupRegistry("order"), "Projector")
	for start := 0; start < n; start += 1000 {
		pipe := rdb.Pipeline()
		for i := start; i < min(start+1000, n); i++ {
			key := "client-" + strconv.Itoa(i)
			stream := ks.PartitionStream("order", key)
			for seq := range 3 {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{
					"id", fmt.Sprintf("ev-%d-%d", i, seq), "type", "OrderPlaced", "category", "order", "key", key,
					"data", fmt.Sprintf(`{"client_id":%q,"seq":%d}`, key, seq), "priority", "0", "published_at", "0",
				}})
			}
			pipe.SAdd(ctx, ks.PartitionIndex("order"), key)
			pipe.XGroupCreate(ctx, stream, "Projector", "0")
			pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "Projector", Consumer: owner + ":1", Streams: []string{stream, ">"}, Count: 2})
			pipe.Set(ctx, ks.LeaseKey(stream, "Projector"), owner+":"+strconv.Itoa(i+1), 0)
			if i%100 == 0 {
				pipe.HSet(ctx, ks.HaltKey(stream, "Projector"), "entry", "0-1", "lane", "0", "stream", stream,
					"attempts", "3", "error", "boom", "since_ms", "1", "owner", owner, "generation", strconv.Itoa(i+1))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
}

// cmdCount counts a client's round trips (a pipeline is one) and the commands in them.
type cmdCount struct{ trips, cmds *atomic.Int64 }

func (h cmdCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cmdCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.trips.Add(1); h.cmds.Add(1); return next(ctx, cmd) }
}
func (h cmdCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// commandStats returns Redis's INFO commandstats: calls and microseconds per command,
// leaving out INFO and CONFIG (the measurement's own).
func commandStats(tb testing.TB, rdb *redis.Client) (calls map[string]int64, usec int64) {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	calls = map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") || name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls[name] = n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}

// BenchmarkBacklogRefresh10k measures one refresh of the exporter over 10,000 partitions
// on a private redis-server: time (ns/op), round trips and commands sent (trips/op,
// cmds/op), and Redis's own count and CPU time (redis-calls/op, redis-us/op, from INFO
// commandstats), with a config's topology (seqctl exporter --config) and without (the
// categories and groups discovered in Redis).
//
//	go test ./pkg/metrics -run '^$' -bench BacklogRefresh10k -benchtime 20x
func BenchmarkBacklogRefresh10k(b *testing.B) {
	srv := redistest.Start(b)
	benchPartitions(b, srv.Client(b), 10000)
	topo := &admin.Topology{Categories: []admin.CategoryTopology{{Name: "order", Groups: []admin.GroupTopology{{Name: "Projector"}}}}}
	for _, c := range []struct {
		name string
		opts admin.Options
	}{
		{"config", admin.Options{Topology: topo, Lanes: admin.LanesOff}},
		{"discover", admin.Options{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			rdb := srv.Client(b)
			var trips, cmds atomic.Int64
			rdb.AddHook(cmdCount{&trips, &cmds})
			e := NewBacklogExporter(BacklogOptions{Lister: admin.New(rdb, c.opts), Declared: DeclaredPairs(c.opts.Topology)})
			ctx := context.Background()
			if err := e.Refresh(ctx); err != nil { // warm the connection pool
				b.Fatal(err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			trips.Store(0)
			cmds.Store(0)
			n := 0
			for b.Loop() {
				if err := e.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.StopTimer()
			sentTrips, sentCmds := trips.Load(), cmds.Load()
			calls, usec := commandStats(b, rdb)
			total := int64(0)
			var perCmd []string
			for _, name := range slices.Sorted(maps.Keys(calls)) {
				total += calls[name]
				perCmd = append(perCmd, fmt.Sprintf("%s %d", name, calls[name]/int64(n)))
			}
			b.ReportMetric(float64(sentTrips)/float64(n), "trips/op")
			b.ReportMetric(float64(sentCmds)/float64(n), "cmds/op")
			b.ReportMetric(float64(total)/float64(n), "redis-calls/op")
			b.ReportMetric(float64(usec)/float64(n), "redis-us/op")
			b.Logf("%d refreshes; Redis calls per refresh: %s", n, strings.Join(perCmd, ", "))
		})
	}
}

// The throttled partitions are counted in their state and in the waiting events (they
// need their instance); per handler, the values with the most of them are exported, at
// most MaxLimitValues, and a value waiting no more is dropped at the next refresh.
func TestBacklogExporterLimitWaiting(t *testing.T) {
	throttled := func(h, value string) admin.Partition {
		p := part(h, admin.StateThrottled, 2, 0, 1000)
		p.LimitValue = value
		return p
	}
	var first []admin.Partition
	for i := range 12 { // tenant-0 waits with 12 partitions, tenant-11 with 1
		for range 12 - i {
			first = append(first, throttled("Projector", fmt.Sprintf("tenant-%d", i)))
		}
	}
	first = append(first, throttled("Mailer", "acme"), part("Mailer", admin.StateRunning, 1, 1, 10))
	l := &fakeLister{replies: []listReply{{parts: first}, {parts: []admin.Partition{throttled("Projector", "tenant-11")}}}}
	e := NewBacklogExporter(BacklogOptions{Lister: l})
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := e.backlog
	if s := got.Stats[HandlerCategory{"order", "Projector"}]; s.Partitions[admin.StateThrottled] != 78 || s.WaitingEvents != 2*78 {
		t.Errorf("Projector: %d throttled, %d waiting events; want 78 and 156", s.Partitions[admin.StateThrottled], s.WaitingEvents)
	}
	var want []LimitWaiting
	for i := range MaxLimitValues {
		want = append(want, LimitWaiting{Value: fmt.Sprintf("tenant-%d", i), Partitions: int64(12 - i)})
	}
	if diff := cmp.Diff(map[string][]LimitWaiting{"Projector": want, "Mailer": {{"acme", 1}}}, got.Waiting); diff != "" {
		t.Errorf("waiting values (-want +got):\n%s", diff)
	}
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, line := range []string{
		`seqctl_limit_waiting_partitions{handler="Projector",value="tenant-0"} 12`,
		`seqctl_limit_waiting_partitions{handler="Projector",value="tenant-9"} 3`,
		`seqctl_limit_waiting_partitions{handler="Mailer",value="acme"} 1`,
		`seqctl_backlog_partitions{category="order",handler="Mailer",state="throttled"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	if n := strings.Count(body, "seqctl_limit_waiting_partitions{"); n != MaxLimitValues+1 {
		t.Errorf("%d limit waiting series, want %d", n, MaxLimitValues+1)
	}
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if body := rec.Body.String(); strings.Count(body, "seqctl_limit_waiting_partitions{") != 1 ||
		!strings.Contains(body, `seqctl_limit_waiting_partitions{handler="Projector",value="tenant-11"} 1`+"\n") {
		t.Errorf("after the second refresh:\n%s", body)
	}
}

// dlqLister is a fakeLister that also lists DLQs.
type dlqLister struct {
	fakeLister
	dlqs []admin.DLQSummary
	err  error
}

func (d *dlqLister) DLQs(context.Context) ([]admin.DLQSummary, error) { return d.dlqs, d.err }

// A lister that reads DLQs gets the DLQ gauges: every declared category at 0 from the
// start, then the entries and partitions of each category's DLQs; a failed read keeps
// the last values and counts the error.
func TestBacklogExporterDLQ(t *testing.T) {
	l := &dlqLister{fakeLister: fakeLister{replies: []listReply{{}}}}
	e := NewBacklogExporter(BacklogOptions{Lister: l, Declared: []HandlerCategory{{"order", "Projector"}}})
	const head = `# HELP seqctl_dlq_entries Entries in the partition DLQs of a category (moved there by an operator's seqctl head dlq, waiting for a replay or a purge), as of the exporter's last refresh.
# TYPE seqctl_dlq_entries gauge
`
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(head+`seqctl_dlq_entries{category="order"} 0
`), "seqctl_dlq_entries"); err != nil {
		t.Errorf("before the first refresh: %v", err)
	}
	l.dlqs = []admin.DLQSummary{{Category: "order", Key: "a", Length: 3}, {Category: "order", Key: "b", Length: 2}, {Category: "payment", Key: "x", Length: 1}}
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := head + `seqctl_dlq_entries{category="order"} 5
seqctl_dlq_entries{category="payment"} 1
`
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "seqctl_dlq_entries"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(`# HELP seqctl_dlq_partitions Partitions of a category with a non-empty DLQ, as of the exporter's last refresh.
# TYPE seqctl_dlq_partitions gauge
seqctl_dlq_partitions{category="order"} 2
seqctl_dlq_partitions{category="payment"} 1
`), "seqctl_dlq_partitions"); err != nil {
		t.Error(err)
	}
	l.err = errors.New("redis: connection refused")
	if err := e.Refresh(context.Background()); err == nil {
		t.Fatal("a failed DLQ read refreshed")
	}
	if err := testutil.GatherAndCompare(e.Registry(), strings.NewReader(want), "seqctl_dlq_entries"); err != nil {
		t.Errorf("after a failed read the values changed: %v", err)
	}
}

// slowLister takes a while to list, or until its context ends.
type slowLister struct{ took time.Duration }

func (s slowLister) EachPartition(ctx context.Context, _ admin.Filter, fn func([]admin.Partition) error) error {
	select {
	case <-time.After(s.took):
		return fn([]admin.Partition{part("Projector", admin.StateIdle, 0, 0, 0)})
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A refresh that takes longer than its limit (a deployment that outgrew the interval)
// fails, and the next ones may take twice as long, until one succeeds: the gauges are
// refreshed more slowly instead of never, and the log names a larger interval.
func TestBacklogExporterRunGrowsTheRefreshLimit(t *testing.T) {
	var logs testkit.Buffer
	e := NewBacklogExporter(BacklogOptions{Lister: slowLister{took: 250 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	e.minTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx, 10*time.Millisecond) }()
	testkit.WaitFor(t, 10*time.Second, "a refresh that succeeds", func() bool { return testutil.ToFloat64(e.lastRefresh) > 0 })
	n := testutil.ToFloat64(e.errors) // before the cancel fails the refresh under way
	cancel()
	<-done
	if n < 2 || n > 4 {
		t.Errorf("%v failed refreshes before the first success, want 2 (limits 100 ms and 200 ms, then 400 ms; one more on a loaded machine):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "give the exporter a larger --interval") || !strings.Contains(logs.String(), "next_limit=400ms") {
		t.Errorf("no warning naming the limits:\n%s", logs.String())
	}
}
