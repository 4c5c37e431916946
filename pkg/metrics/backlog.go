package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seqctl/seqctl/pkg/admin"
)

// The backlog exporter ('seqctl exporter') reads the state of every partition from Redis
// in the background and exports it per handler and category, whether any 'seqctl run'
// instance runs or not: the signal an autoscaler needs to scale a deployment from zero.
// Labels stay bounded (category, handler, state); a partition key is never one, and of the
// values of a limit key only the MaxLimitValues with the most waiting partitions per
// handler are.

// HandlerCategory names one handler (a consumer group) on one category: the labels of a
// backlog series.
type HandlerCategory struct {
	Category, Handler string
}

// BacklogStat is the aggregate of one handler's partitions of one category.
type BacklogStat struct {
	// LagSeconds is the largest head age (admin.Partition.HeadAgeMS) in seconds: the age
	// of the oldest event not yet handled; 0 when every partition is caught up.
	LagSeconds float64
	// Events is the sum of the partitions' backlogs (entries not yet handled). A partition
	// whose backlog Redis cannot tell (Backlog -1) adds its lower bound: its pending
	// entries, and at least 1 when it has a head entry. Events is then a lower bound too.
	Events int64
	// WaitingEvents and WaitingSeconds are Events and LagSeconds over the partitions an
	// instance would work on: every state but halted (it waits for an operator) and
	// paused (it waits for a resume). What an autoscaler scales on. A throttled partition
	// counts: it needs its instance, though more instances do not run it sooner.
	WaitingEvents  int64
	WaitingSeconds float64
	// UnknownPartitions counts the partitions whose backlog is unknown.
	UnknownPartitions int64
	// Partitions counts the partitions in each state; it has every state of
	// Backlog.States, at 0 when no partition is in it.
	Partitions map[admin.State]int64
}

// Backlog is the aggregate of one listing of the partitions.
type Backlog struct {
	// Stats has a BacklogStat for every declared (category, handler) and every one that
	// has a partition in the listing.
	Stats map[HandlerCategory]BacklogStat
	// States are the states counted: the states asked for and every state found, sorted.
	States []admin.State
	// Waiting lists, per handler, the values of its limit key with the most partitions
	// waiting for a permit (throttled), most first, at most MaxLimitValues.
	Waiting map[string][]LimitWaiting
	// DLQ has, per category, the entries in its partitions' DLQs and how many partitions
	// have one: every declared category (at 0) and every category with a DLQ. Nil when
	// the lister reads no DLQs.
	DLQ map[string]DLQStat
}

// DLQStat is the dead-letter state of one category.
type DLQStat struct {
	Entries    int64 // entries in every partition DLQ of the category
	Partitions int64 // partitions with a non-empty DLQ
}

// dlqByCategory sums DLQ summaries per category, with every declared category at 0.
func dlqByCategory(dlqs []admin.DLQSummary, declared []HandlerCategory) map[string]DLQStat {
	out := map[string]DLQStat{}
	for _, d := range declared {
		out[d.Category] = DLQStat{}
	}
	for _, d := range dlqs {
		s := out[d.Category]
		s.Entries += d.Length
		s.Partitions++
		out[d.Category] = s
	}
	return out
}

// LimitWaiting is one value of a handler's limit key and its partitions waiting for a
// permit.
type LimitWaiting struct {
	Value      string
	Partitions int64
}

// MaxLimitValues bounds the values of one handler that seqctl_limit_waiting_partitions
// exports: the value is a label, and a label per tenant would grow without bound.
const MaxLimitValues = 10

// knownStates are the partition states declared at 0 from the start. A state added to
// pkg/admin later is counted from the first listing that has a partition in it, and stays
// declared from then on (see BacklogExporter.Refresh).
var knownStates = []admin.State{admin.StateHalted, admin.StatePaused, admin.StateThrottled, admin.StateUnowned, admin.StateRunning, admin.StateIdle}

// AggregateBacklog aggregates a listing of partitions per (category, handler). Every
// pair of declared gets a BacklogStat, at 0 when it has no partition; every BacklogStat
// counts every state of states and every state found in parts.
func AggregateBacklog(parts []admin.Partition, declared []HandlerCategory, states []admin.State) Backlog {
	g := newAggregator(declared, states)
	for i := range parts {
		g.add(&parts[i])
	}
	return g.backlog()
}

// aggregator builds a Backlog one partition at a time, so that a listing read page by
// page is aggregated in memory bounded by the pairs, states and limit values, not by the
// partitions.
type aggregator struct {
	stats   map[HandlerCategory]BacklogStat
	states  map[admin.State]bool
	waiting map[string]map[string]int64 // handler -> limit value -> throttled partitions
}

func newAggregator(declared []HandlerCategory, states []admin.State) *aggregator {
	g := &aggregator{stats: map[HandlerCategory]BacklogStat{}, states: map[admin.State]bool{}, waiting: map[string]map[string]int64{}}
	for _, s := range states {
		g.states[s] = true
	}
	for _, k := range declared {
		g.stat(k)
	}
	return g
}

// stat returns the pair's stat, made the first time.
func (g *aggregator) stat(k HandlerCategory) BacklogStat {
	s, ok := g.stats[k]
	if !ok {
		s = BacklogStat{Partitions: map[admin.State]int64{}}
		g.stats[k] = s
	}
	return s
}

// add counts one partition.
func (g *aggregator) add(p *admin.Partition) {
	g.states[p.State] = true
	k := HandlerCategory{Category: p.Category, Handler: p.Handler}
	s := g.stat(k)
	s.LagSeconds = max(s.LagSeconds, float64(p.HeadAgeMS)/1000)
	events := p.Backlog
	if p.Backlog < 0 {
		s.UnknownPartitions++
		events = backlogFloor(*p)
	}
	s.Events += events
	if p.State != admin.StateHalted && p.State != admin.StatePaused {
		s.WaitingEvents += events
		s.WaitingSeconds = max(s.WaitingSeconds, float64(p.HeadAgeMS)/1000)
	}
	s.Partitions[p.State]++
	g.stats[k] = s
	if p.LimitValue != "" {
		if g.waiting[p.Handler] == nil {
			g.waiting[p.Handler] = map[string]int64{}
		}
		g.waiting[p.Handler][p.LimitValue]++
	}
}

// backlog is the aggregate so far: every stat counts every state seen, at 0 when it has
// no partition in it.
func (g *aggregator) backlog() Backlog {
	b := Backlog{Stats: g.stats, States: slices.Sorted(maps.Keys(g.states)), Waiting: topWaiting(g.waiting)}
	for _, s := range b.Stats {
		for _, st := range b.States {
			if _, ok := s.Partitions[st]; !ok {
				s.Partitions[st] = 0
			}
		}
	}
	return b
}

// topWaiting keeps, of the throttled partitions counted per handler and value of its
// limit key, the MaxLimitValues values of each handler with the most (ties by value).
func topWaiting(counts map[string]map[string]int64) map[string][]LimitWaiting {
	out := make(map[string][]LimitWaiting, len(counts))
	for h, values := range counts {
		ws := make([]LimitWaiting, 0, len(values))
		for v, n := range values {
			ws = append(ws, LimitWaiting{Value: v, Partitions: n})
		}
		slices.SortFunc(ws, func(a, b LimitWaiting) int {
			if a.Partitions != b.Partitions {
				return int(b.Partitions - a.Partitions)
			}
			return admin.NaturalCompare(a.Value, b.Value)
		})
		out[h] = ws[:min(len(ws), MaxLimitValues)]
	}
	return out
}

// backlogFloor is the least backlog a partition of unknown backlog has: its pending
// entries (delivered, not acknowledged), and at least 1 when it has a head entry (the
// halted entry, the oldest pending or the next undelivered).
func backlogFloor(p admin.Partition) int64 {
	if p.Pending == 0 && p.HeadID != "" {
		return 1
	}
	return p.Pending
}

// DeclaredPairs returns every (category, handler) of a config's topology
// (admin.FromConfig), whose series the exporter declares at 0 from the start.
func DeclaredPairs(t *admin.Topology) []HandlerCategory {
	if t == nil {
		return nil
	}
	var out []HandlerCategory
	for _, c := range t.Categories {
		for _, g := range c.Groups {
			out = append(out, HandlerCategory{Category: c.Name, Handler: g.Name})
		}
	}
	return out
}

// PartitionLister lists partitions page by page: an *admin.Admin.
type PartitionLister interface {
	EachPartition(ctx context.Context, f admin.Filter, fn func([]admin.Partition) error) error
}

// DLQLister lists the non-empty partition DLQs (an *admin.Admin): a lister that is one
// also has the DLQ gauges refreshed.
type DLQLister interface {
	DLQs(ctx context.Context) ([]admin.DLQSummary, error)
}

// BacklogOptions configure a BacklogExporter.
type BacklogOptions struct {
	// Lister reads every partition at each refresh (admin.Filter{}).
	Lister PartitionLister
	// Declared are the (category, handler) pairs exported from the start, at 0 until a
	// refresh says otherwise, and kept when they have no partition (DeclaredPairs).
	Declared []HandlerCategory
	// Logger gets one warning when refreshes start failing and one line when they
	// succeed again; nil logs nothing.
	Logger *slog.Logger
}

// BacklogExporter serves the backlog gauges of the last successful refresh; Run
// refreshes them in the background, so a scrape never reads Redis. Its registry holds
// the backlog gauges, the exporter's own refresh metrics and the Go runtime and process
// collectors.
type BacklogExporter struct {
	lister   PartitionLister
	declared []HandlerCategory
	log      *slog.Logger
	reg      *prometheus.Registry

	lastRefresh prometheus.Gauge
	errors      prometheus.Counter
	duration    prometheus.Gauge

	// minTimeout is the least time a refresh may take (10 s; tests shorten it).
	minTimeout time.Duration

	mu       sync.Mutex
	backlog  Backlog // guarded by mu
	failures int     // refreshes failed in a row; guarded by mu
}

// maxRefreshTimeout bounds how long Run lets one refresh take, however it grew.
const maxRefreshTimeout = 10 * time.Minute

var (
	descBacklogLag = prometheus.NewDesc(Namespace+"_lag_seconds",
		"Age of the oldest event not yet handled, per handler and category, over every partition, owned or not (by Redis time, as of the exporter's last refresh); 0 when caught up. seqctl run exports the same gauge for the partitions it owns: across sources, take the max.",
		[]string{"category", "handler"}, nil)
	descBacklogEvents = prometheus.NewDesc(Namespace+"_backlog_events",
		"Entries not yet handled, summed over the handler's partitions of the category (a partition of unknown backlog adds its lower bound, see seqctl_backlog_unknown_partitions), as of the exporter's last refresh.",
		[]string{"category", "handler"}, nil)
	descWaitingEvents = prometheus.NewDesc(Namespace+"_backlog_waiting_events",
		"seqctl_backlog_events without the partitions that are halted or paused: the entries an instance would handle now. What an autoscaler scales on.",
		[]string{"category", "handler"}, nil)
	descWaitingSeconds = prometheus.NewDesc(Namespace+"_backlog_waiting_seconds",
		"seqctl_lag_seconds without the partitions that are halted or paused: the age of the oldest entry an instance would handle now; 0 when none waits.",
		[]string{"category", "handler"}, nil)
	descBacklogUnknown = prometheus.NewDesc(Namespace+"_backlog_unknown_partitions",
		"Partitions whose backlog Redis cannot tell (entries deleted inside the undelivered range); seqctl_backlog_events counts only their pending entries, or 1 when they have a head entry.",
		[]string{"category", "handler"}, nil)
	descBacklogPartitions = prometheus.NewDesc(Namespace+"_backlog_partitions",
		"Partitions of the category per handler and state (halted, paused, throttled, unowned, running, idle, as 'seqctl partitions list' shows them), as of the exporter's last refresh.",
		[]string{"category", "handler", "state"}, nil)
	descDLQEntries = prometheus.NewDesc(Namespace+"_dlq_entries",
		"Entries in the partition DLQs of a category (moved there by an operator's seqctl head dlq, waiting for a replay or a purge), as of the exporter's last refresh.",
		[]string{"category"}, nil)
	descDLQPartitions = prometheus.NewDesc(Namespace+"_dlq_partitions",
		"Partitions of a category with a non-empty DLQ, as of the exporter's last refresh.",
		[]string{"category"}, nil)
	descLimitWaiting = prometheus.NewDesc(Namespace+"_limit_waiting_partitions",
		"Partitions waiting for a permit of their handler's limit key, per value (a tenant), for the 10 values of each handler with the most, as the live instances' last heartbeats list them, as of the exporter's last refresh.",
		[]string{"handler", "value"}, nil)
)

// NewBacklogExporter returns an exporter whose gauges show the declared pairs at 0 until
// the first refresh.
func NewBacklogExporter(o BacklogOptions) *BacklogExporter {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &BacklogExporter{
		lister: o.Lister, declared: slices.Clone(o.Declared), log: log, reg: prometheus.NewRegistry(), minTimeout: 10 * time.Second,
		lastRefresh: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "exporter_last_refresh_timestamp_seconds",
			Help: "Unix time of the exporter's last successful refresh; 0 before the first. The backlog gauges are as old as time() minus this."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "exporter_refresh_errors_total",
			Help: "Refreshes that failed; the backlog gauges keep the values of the last successful one."}),
		duration: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "exporter_refresh_duration_seconds",
			Help: "How long the last refresh took, successful or not (its Redis round trips and the aggregation)."}),
	}
	e.backlog = AggregateBacklog(nil, e.declared, knownStates)
	if _, ok := o.Lister.(DLQLister); ok {
		e.backlog.DLQ = dlqByCategory(nil, e.declared)
	}
	e.reg.MustRegister(
		backlogCollector{e}, e.lastRefresh, e.errors, e.duration,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return e
}

// Registry returns the exporter's registry.
func (e *BacklogExporter) Registry() *prometheus.Registry { return e.reg }

// Refresh lists every partition, page by page (memory bounded by a page and the
// aggregate), and the partition DLQs when the lister reads them (a keyspace SCAN for
// "*:dlq" streams: a DLQ outlives its partition's index entry), and, when that succeeds,
// replaces the gauges with the aggregate: pairs that are neither declared nor listed any more are dropped, states
// found once stay declared. When it fails, the gauges keep their values and the error
// is counted; the first failure of a streak is logged, and so is the end of the streak.
func (e *BacklogExporter) Refresh(ctx context.Context) error {
	start := time.Now()
	e.mu.Lock()
	g := newAggregator(e.declared, e.backlog.States)
	e.mu.Unlock()
	err := e.lister.EachPartition(ctx, admin.Filter{}, func(ps []admin.Partition) error {
		for i := range ps {
			g.add(&ps[i])
		}
		return nil
	})
	var dlq map[string]DLQStat
	if dl, ok := e.lister.(DLQLister); ok && err == nil {
		var dlqs []admin.DLQSummary
		if dlqs, err = dl.DLQs(ctx); err == nil {
			dlq = dlqByCategory(dlqs, e.declared)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		e.backlog = g.backlog()
		e.backlog.DLQ = dlq
	}
	e.duration.Set(time.Since(start).Seconds())
	if err != nil {
		e.errors.Inc()
		if e.failures == 0 {
			e.log.Warn("refresh failed: serving the values of the last successful refresh until one succeeds", "err", err)
		}
		e.failures++
		return err
	}
	if e.failures > 0 {
		e.log.Info("refresh succeeded again", "failed_refreshes", e.failures)
	}
	e.failures = 0
	e.lastRefresh.Set(float64(time.Now().UnixNano()) / 1e9)
	return nil
}

// Run refreshes at once and then every interval until ctx ends. Each refresh may take
// twice the interval, at least 10 s; one that takes longer fails, and the next ones may
// take twice as long again, up to 10 minutes, until one succeeds: a deployment that grew
// past what the interval allows (a million partitions take tens of seconds to list) gets
// its gauges refreshed more slowly instead of never, and the log says by how much and
// which --interval would fit. After a success the limit stays at least twice that
// refresh's time.
func (e *BacklogExporter) Run(ctx context.Context, interval time.Duration) {
	base := max(2*interval, e.minTimeout)
	timeout := base
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := e.Refresh(rctx) // counted and logged by Refresh
		took := time.Since(start)
		cancel()
		switch {
		case err == nil:
			timeout = min(max(base, 2*took), maxRefreshTimeout)
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && timeout < maxRefreshTimeout:
			timeout = min(2*timeout, maxRefreshTimeout)
			e.log.Warn("a refresh took longer than its limit: the next may take longer; give the exporter a larger --interval",
				"limit", (timeout / 2).String(), "next_limit", timeout.String(), "interval", interval.String(),
				"suggested_interval", (timeout / 2).String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Handler serves the endpoints of 'seqctl exporter':
//
//	/metrics  the Prometheus text (or OpenMetrics) exposition of the registry
//	/healthz  200 "ok" while the process serves requests (liveness)
func (e *BacklogExporter) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{Registry: e.reg, EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// backlogCollector sends the gauges of the exporter's last aggregate.
type backlogCollector struct{ e *BacklogExporter }

func (c backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBacklogLag
	ch <- descBacklogEvents
	ch <- descBacklogUnknown
	ch <- descWaitingEvents
	ch <- descWaitingSeconds
	ch <- descBacklogPartitions
	ch <- descLimitWaiting
	ch <- descDLQEntries
	ch <- descDLQPartitions
}

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	c.e.mu.Lock()
	b := c.e.backlog // replaced, never changed in place, by Refresh
	c.e.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for k, s := range b.Stats {
		gauge(descBacklogLag, s.LagSeconds, k.Category, k.Handler)
		gauge(descBacklogEvents, float64(s.Events), k.Category, k.Handler)
		gauge(descBacklogUnknown, float64(s.UnknownPartitions), k.Category, k.Handler)
		gauge(descWaitingEvents, float64(s.WaitingEvents), k.Category, k.Handler)
		gauge(descWaitingSeconds, s.WaitingSeconds, k.Category, k.Handler)
		for _, st := range b.States {
			gauge(descBacklogPartitions, float64(s.Partitions[st]), k.Category, k.Handler, string(st))
		}
	}
	for h, ws := range b.Waiting {
		for _, w := range ws {
			gauge(descLimitWaiting, float64(w.Partitions), h, w.Value)
		}
	}
	for c, d := range b.DLQ {
		gauge(descDLQEntries, float64(d.Entries), c)
		gauge(descDLQPartitions, float64(d.Partitions), c)
	}
}
