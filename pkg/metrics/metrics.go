// Package metrics exports what a seqctl engine does as Prometheus metrics: counters and
// histograms fed by the engine's Observer hook, gauges read from Engine.Stats at scrape
// time, and the HTTP endpoints of 'seqctl run --metrics-addr' (/metrics, /healthz,
// /readyz). docs/metrics.md is the reference.
//
// Labels are bounded: handler (the consumer group: a handler or process manager name),
// category, and a lease-loss reason. A partition key never becomes a label value, since
// partitions come and go and a label per key would grow the series without bound; nor
// does a limit key's value in this package (the exporter exports the few values with the
// most waiting partitions, see backlog.go).
package metrics

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seqctl/seqctl/pkg/engine"
)

// Namespace prefixes every seqctl metric.
const Namespace = "seqctl"

// Source is what the scrape-time gauges read: an *engine.Engine.
type Source interface {
	Stats() engine.Stats
	Owned() []engine.OwnedPartition
	Ready() bool
}

// Metrics is the set of seqctl collectors on a registry of its own. It implements
// engine.Observer: pass it as EngineConfig.Observer. Methods are safe for concurrent use
// and never block.
type Metrics struct {
	reg *prometheus.Registry

	processed *prometheus.CounterVec
	failed    *prometheus.CounterVec
	retried   *prometheus.CounterVec
	halts     *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	latency   *prometheus.HistogramVec
	acquired  *prometheus.CounterVec
	lost      *prometheus.CounterVec
	fenced    *prometheus.CounterVec
	slotWait  *prometheus.HistogramVec
	limitWait *prometheus.CounterVec
	backlog   prometheus.Gauge

	source atomic.Pointer[sourceBox]

	mu     sync.Mutex
	groups []string                       // handlers declared or seen owning a partition; guarded by mu
	cats   map[string][]string            // handler -> the categories it was declared with; guarded by mu
	checks []func() (ok bool, why string) // more readiness conditions (AddReadiness); guarded by mu
}

type sourceBox struct{ s Source }

// DurationBuckets are the handler-duration histogram buckets, in seconds: from 1 ms (an
// in-process handler) to a minute (a slow HTTP or exec handler near its timeout).
var DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// LatencyBuckets are the publish-to-handle latency buckets, in seconds: up to 10 minutes,
// since a backlog after an outage or a halt resolved late is what this histogram is for.
var LatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// counterVec is a seqctl counter with the given labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

// histogramVec is a seqctl histogram with the given buckets and labels.
func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
}

// New builds the collectors and registers them, with the Go runtime and process
// collectors, on a new registry.
func New() *Metrics {
	hc := []string{"handler", "category"}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		processed: counterVec("events_processed_total",
			"Handler attempts that succeeded (the event was acknowledged); a batch's attempt counts each of its events.",
			hc...),
		failed: counterVec("events_failed_total",
			"Handler attempts that failed: a retried attempt, the last attempt before a halt, or an attempt cut off by a lost lease; a batch's attempt counts each of its events.",
			hc...),
		retried: counterVec("events_retried_total",
			"Failed handler attempts that will be retried (a subset of events_failed_total); a batch's attempt counts each of its events.",
			hc...),
		halts: counterVec("partition_halts_total",
			"Partitions this instance halted on a poison head, after the handler's retries.",
			hc...),
		duration: histogramVec("handler_duration_seconds",
			"Time inside the handler, per attempt (HTTP: request to answer; exec: process start to exit).",
			DurationBuckets, hc...),
		latency: histogramVec("publish_to_handle_latency_seconds",
			"Time from the publish (Redis time of the XADD) to the start of the first handler attempt.",
			LatencyBuckets, hc...),
		acquired: counterVec("lease_acquisitions_total",
			"Partition leases this instance acquired (a new owner at a new generation).",
			"handler"),
		lost: counterVec("lease_losses_total",
			"Partition leases this instance lost without releasing them, by reason.",
			"handler", "reason"),
		fenced: counterVec("fenced_rejections_total",
			"Fenced Redis calls refused because this instance no longer held the lease at its generation (one per lost lease: the engine stops at the first).",
			"handler"),
		slotWait: histogramVec("handler_slot_wait_seconds",
			"Time a partition with an event ready waited for a handler slot before the call (not part of the attempt or its timeout).",
			LatencyBuckets, "handler"),
		limitWait: counterVec("limit_wait_seconds_total",
			"Time partitions waited for a permit of their handler's limit key before their run, in seconds (not part of the attempt or its timeout).",
			"handler"),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "relay_backlog",
			Help: "Outbox rows waiting to be published by the relay; 0 when no outbox relay runs in this process.",
		}),
	}
	m.reg.MustRegister(
		m.processed, m.failed, m.retried, m.halts, m.duration, m.latency,
		m.acquired, m.lost, m.fenced, m.slotWait, m.limitWait, m.backlog,
		&statsCollector{m: m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry returns the registry holding every collector, for a custom HTTP handler or
// for registering more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetSource sets the engine the gauges read at scrape time (nil: report zero, e.g. while
// 'seqctl run' still waits for Redis). It may be changed at any time.
func (m *Metrics) SetSource(s Source) {
	if s == nil {
		m.source.Store(nil)
		return
	}
	m.source.Store(&sourceBox{s: s})
}

// AddReadiness adds a condition of readiness (a handler's database, say): /readyz and
// seqctl_ready report ready only while the source is ready and every condition holds;
// why says what is missing.
func (m *Metrics) AddReadiness(check func() (ok bool, why string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks = append(m.checks, check)
}

// ready reports whether the source is ready and every added condition holds, and if not,
// why ("" when the source gives no reason).
func (m *Metrics) ready() (bool, string) {
	m.mu.Lock()
	checks := append([]func() (bool, string){}, m.checks...)
	m.mu.Unlock()
	for _, c := range checks {
		if ok, why := c(); !ok {
			return false, why
		}
	}
	src := m.currentSource()
	if src != nil && src.Ready() {
		return true, ""
	}
	why := "waiting for the engine to start"
	if h, ok := src.(interface{ Health() (bool, string) }); ok {
		if _, r := h.Health(); r != "" {
			why = r
		}
	}
	return false, why
}

func (m *Metrics) currentSource() Source {
	if b := m.source.Load(); b != nil {
		return b.s
	}
	return nil
}

// SetRelayBacklog sets seqctl_relay_backlog: the outbox relay calls it (or a function
// it is handed, see RelayBacklogFunc) with the number of unpublished rows after each
// pass.
func (m *Metrics) SetRelayBacklog(rows int) { m.backlog.Set(float64(rows)) }

// RelayBacklogFunc returns SetRelayBacklog as a plain function, for a relay that must not
// import this package.
func (m *Metrics) RelayBacklogFunc() func(rows int) { return m.SetRelayBacklog }

// Attempt implements engine.Observer. The event counters count events, not calls: an
// attempt of a batch (a BatchFunc's run) counts as many as it carried (a.Events; 0 is
// taken for 1), so that events_processed_total keeps adding up to the events handled
// whatever batch_max is. The duration and latency histograms observe the call once.
func (m *Metrics) Attempt(a engine.AttemptInfo) {
	n := float64(max(a.Events, 1))
	if a.Err == nil {
		m.processed.WithLabelValues(a.Group, a.Category).Add(n)
	} else {
		m.failed.WithLabelValues(a.Group, a.Category).Add(n)
		if a.Retry {
			m.retried.WithLabelValues(a.Group, a.Category).Add(n)
		}
	}
	m.duration.WithLabelValues(a.Group, a.Category).Observe(a.Duration.Seconds())
	if a.Attempt == 1 && a.Latency > 0 {
		m.latency.WithLabelValues(a.Group, a.Category).Observe(a.Latency.Seconds())
	}
}

// LeaseAcquired implements engine.Observer.
func (m *Metrics) LeaseAcquired(group string) { m.acquired.WithLabelValues(group).Inc() }

// LeaseLost implements engine.Observer. A "fenced" loss also counts as a fenced
// rejection: the engine learns it lost a lease when a fenced call is refused.
func (m *Metrics) LeaseLost(group, reason string) {
	m.lost.WithLabelValues(group, reason).Inc()
	if reason == "fenced" {
		m.fenced.WithLabelValues(group).Inc()
	}
}

// Halted implements engine.Observer.
func (m *Metrics) Halted(group, category string) { m.halts.WithLabelValues(group, category).Inc() }

// SlotWait implements engine.SlotObserver.
func (m *Metrics) SlotWait(group string, wait time.Duration) {
	m.slotWait.WithLabelValues(group).Observe(wait.Seconds())
}

// LimitWait implements engine.LimitObserver: the wait of one partition for a permit of
// its handler's limit key, added to seqctl_limit_wait_seconds_total. The value it waited
// for is not a label (unbounded).
func (m *Metrics) LimitWait(group string, wait time.Duration) {
	m.limitWait.WithLabelValues(group).Add(wait.Seconds())
}

var (
	_ engine.Observer      = (*Metrics)(nil)
	_ engine.SlotObserver  = (*Metrics)(nil)
	_ engine.LimitObserver = (*Metrics)(nil)
)

// statsCollector reads the engine at scrape time, so the gauges are never stale and cost
// nothing between scrapes.
type statsCollector struct {
	m *Metrics

	mu sync.Mutex // one scrape at a time reads the engine
}

var (
	descOwned = prometheus.NewDesc(Namespace+"_partitions_owned",
		"Partitions (or process-manager correlation values) this instance owns, per handler.", []string{"handler"}, nil)
	descHalted = prometheus.NewDesc(Namespace+"_partitions_halted",
		"Owned partitions that are halted on a poison head, waiting for an operator.", nil, nil)
	descPaused = prometheus.NewDesc(Namespace+"_partitions_paused",
		"Owned partitions paused by an operator ('seqctl partitions pause'), waiting for a resume or the pause's end.", nil, nil)
	descLive = prometheus.NewDesc(Namespace+"_live_partitions",
		"Partitions in a category's discovery index (all instances), as of the last discovery pass.", []string{"category"}, nil)
	descBehind = prometheus.NewDesc(Namespace+"_discovery_behind_partitions",
		"Free partitions within this instance's share that its last discovery pass had no time to take (the next pass runs at once); 0 when discovery keeps up.", nil, nil)
	descSlotsInUse = prometheus.NewDesc(Namespace+"_handler_slots_in_use",
		"Handler calls running now, per handler (each holds a handler slot).", []string{"handler"}, nil)
	descSlotsLimit = prometheus.NewDesc(Namespace+"_handler_slots_limit",
		"Handler calls a handler may run at once in this instance (max_concurrent); 0 when unbounded.", []string{"handler"}, nil)
	descWaiting = prometheus.NewDesc(Namespace+"_partitions_waiting_for_slot",
		"Partitions with an event ready that wait for a handler slot, per handler. Waiting is not failing: the attempt and its timeout start with the slot.", []string{"handler"}, nil)
	descThrottled = prometheus.NewDesc(Namespace+"_partitions_throttled",
		"Partitions with an event ready that wait for a permit of their handler's limit key now, per handler. Waiting is not failing: the attempt starts with the permit.", []string{"handler"}, nil)
	descInstanceLimit = prometheus.NewDesc(Namespace+"_instance_handler_slots_limit",
		"Handler calls this instance may run at once across all handlers (max_concurrent_handlers, or the sum of the handlers' limits when lower); 0 when unbounded.", nil, nil)
	descLag = prometheus.NewDesc(Namespace+"_lag_seconds",
		"Age of the oldest event taken and not yet handled by a partition this instance owns, per handler and category; 0 when caught up. Across instances, take the max.", []string{"category", "handler"}, nil)
	descReady = prometheus.NewDesc(Namespace+"_ready",
		"1 when the engine runs with a live session (what /readyz reports), else 0.", nil, nil)
)

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descOwned
	ch <- descHalted
	ch <- descPaused
	ch <- descLive
	ch <- descBehind
	ch <- descSlotsInUse
	ch <- descSlotsLimit
	ch <- descWaiting
	ch <- descThrottled
	ch <- descInstanceLimit
	ch <- descReady
	ch <- descLag
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src := c.m.currentSource()
	var st engine.Stats
	owned := map[string]int{}
	ready := 0.0
	if src != nil {
		st = src.Stats()
		for _, o := range src.Owned() {
			owned[o.Group]++
		}
	}
	if ok, _ := c.m.ready(); ok {
		ready = 1
	}
	for g := range owned {
		c.m.addGroup(g)
	}
	for _, g := range c.m.knownGroups() {
		ch <- prometheus.MustNewConstMetric(descOwned, prometheus.GaugeValue, float64(owned[g]), g)
	}
	ch <- prometheus.MustNewConstMetric(descHalted, prometheus.GaugeValue, float64(st.Halted))
	ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, float64(st.Paused))
	for cat, n := range st.LivePartitions {
		ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(n), cat)
	}
	ch <- prometheus.MustNewConstMetric(descBehind, prometheus.GaugeValue, float64(st.DiscoveryBehind))
	slots := map[string]engine.SlotStats{}
	for _, h := range st.HandlerSlots {
		slots[h.Handler] = h.SlotStats
		c.m.addGroup(h.Handler)
	}
	for _, g := range c.m.knownGroups() {
		s := slots[g]
		ch <- prometheus.MustNewConstMetric(descSlotsInUse, prometheus.GaugeValue, float64(s.InUse), g)
		ch <- prometheus.MustNewConstMetric(descSlotsLimit, prometheus.GaugeValue, float64(s.Limit), g)
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(s.Waiting), g)
	}
	for g := range st.Throttled {
		c.m.addGroup(g)
	}
	for _, g := range c.m.knownGroups() {
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.GaugeValue, float64(st.Throttled[g]), g)
	}
	ch <- prometheus.MustNewConstMetric(descInstanceLimit, prometheus.GaugeValue, float64(st.Slots.Limit))
	c.m.collectLag(ch, st.Lag)
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
}

// Declare creates the series of a handler (a consumer group) and the categories it
// consumes at zero, so dashboards and alerts see them before the first event. Call it
// once per handler before the engine starts; undeclared handlers appear on first use.
func (m *Metrics) Declare(handler string, categories ...string) {
	m.addGroup(handler)
	m.mu.Lock()
	if m.cats == nil {
		m.cats = map[string][]string{}
	}
	m.cats[handler] = append(m.cats[handler], categories...)
	m.mu.Unlock()
	m.acquired.WithLabelValues(handler)
	m.lost.WithLabelValues(handler, "fenced")
	m.lost.WithLabelValues(handler, "session_expired")
	m.fenced.WithLabelValues(handler)
	m.slotWait.WithLabelValues(handler)
	m.limitWait.WithLabelValues(handler)
	for _, c := range categories {
		m.processed.WithLabelValues(handler, c)
		m.failed.WithLabelValues(handler, c)
		m.retried.WithLabelValues(handler, c)
		m.halts.WithLabelValues(handler, c)
		m.duration.WithLabelValues(handler, c)
		m.latency.WithLabelValues(handler, c)
	}
}

// collectLag sends seqctl_lag_seconds: every declared (handler, category) pair, 0 when
// caught up, and the pairs with a lag.
func (m *Metrics) collectLag(ch chan<- prometheus.Metric, lags []engine.LagStat) {
	ages := map[[2]string]float64{}
	m.mu.Lock()
	for h, cs := range m.cats {
		for _, c := range cs {
			ages[[2]string{h, c}] = 0
		}
	}
	m.mu.Unlock()
	for _, l := range lags {
		ages[[2]string{l.Handler, l.Category}] = l.Age.Seconds()
	}
	for k, v := range ages {
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, v, k[1], k[0])
	}
}

func (m *Metrics) addGroup(g string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.groups, g) {
		m.groups = append(m.groups, g)
	}
}

func (m *Metrics) knownGroups() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.groups)
}
