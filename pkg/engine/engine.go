package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Defaults of the specification.
const (
	// DefaultMaxUnacked is the strict acknowledgement mode: at most the event in flight
	// runs again after a failure.
	DefaultMaxUnacked   = 1
	DefaultLeaseTTL     = 15 * time.Second
	DefaultPollInterval = 250 * time.Millisecond
	DefaultReapIdle     = time.Hour
	// DefaultSweepInterval bounds how long an entry another publisher appended with a
	// plain XADD waits for its idle owner when Redis sends no keyspace notifications.
	DefaultSweepInterval = 2 * time.Second
)

// subscription is one consumer group's interest in one or more categories: a handler on
// its category, or a sequential process manager on all of its categories at once.
type subscription struct {
	group       string   // handler or process manager name
	categories  []string // one, except for a sequential process manager
	partitioned bool
	pm          bool // units are correlation values spanning every category
	fn          HandlerFunc
	batchFn     BatchFunc     // instead of fn: takes runs of up to batchMax events
	batchMax    int           // 1 without batchFn
	batchWait   time.Duration // see Handler.BatchWait
	maxRetries  int
	retryDelay  time.Duration
	limit       HandlerLimit // the handler's limit key; the zero value for none
}

// Engine is the partitioned consumer: it discovers partitions, leases them, and drains each
// owned partition serially with its handler. Per key, two events never run at once and
// effects land in publish order; different keys run in parallel, across instances.
// Delivery is at least once: on failover the single in-flight event may run again.
//
// Start it with Start, stop it with Shutdown. An Engine is used once.
type Engine struct {
	cfg  EngineConfig
	rdb  redis.UniversalClient
	keys keyspace.Keys // the key layout: Redis Cluster for a cluster client
	// reapHook, when set (tests), runs between the steps of a reap on Redis Cluster.
	reapHook atomic.Pointer[func(step, unit string) bool]
	// parkHook, when set (tests), runs in a parking worker's goroutine once the worker is
	// marked parked, as a goroutine delayed there would be.
	parkHook atomic.Pointer[func(w *worker)]
	// ackHook, when set (tests), runs in the acker before each flush is sent.
	ackHook atomic.Pointer[func()]
	dom     *Domain
	log     *slog.Logger
	tracer  trace.Tracer // nil without EngineConfig.TracerProvider
	subs    []*subscription

	regID  string // this process's field in the instance registry: "{instance id}#{random}"
	sess   *session
	bell   *doorbell
	slots  *slots // handler slots: back-pressure on handler calls
	acker  *acker
	health health      // why the instance cannot take or keep leases
	calls  callHealth  // whether the engine's own client reaches Redis
	logs   *rateLog    // one line per cause per interval, for outages every partition sees
	noTx   atomic.Bool // the Redis user may not run MULTI/EXEC: no native reads (worker.drain)
	// configRefused: CONFIG GET or SET was refused (or is unknown): not tried again.
	configRefused atomic.Bool
	// killed (tests) makes the workers exit as a killed process's do: without a call to
	// Redis (see crash).
	killed  atomic.Bool
	stopped chan struct{} // closed by Shutdown: take no more work
	hardCtx context.Context
	hard    context.CancelFunc // cancels every handler (shutdown deadline passed)
	bg      sync.WaitGroup     // background loops
	wg      sync.WaitGroup     // workers

	discoverNow chan struct{}
	view        *indexView // the instance's view of the partition indexes (discovery)

	mu         sync.Mutex
	workers    map[string]*worker // unit id -> worker; guarded by mu
	byLane     map[string]*worker // group + "\x00" + lane stream -> worker; guarded by mu
	knownOwner map[string]string  // unit id -> lease value seen; guarded by mu
	limits     *limiter           // the handlers' limit keys (limits.go)
	lives      liveCache          // which other instances live, as discovery read it
	releaseSeq uint64             // count of release notices seen; guarded by mu
	releasedAt map[string]uint64  // unit id -> releaseSeq of its last release notice; guarded by mu
	started    bool               // guarded by mu

	livePartitions map[string]int  // category -> index size at the last pass; guarded by mu
	overThreshold  map[string]bool // category -> above MaxPartitionsWarning; guarded by mu
	// discoveryBehind is how many free partitions the last discovery pass left for lack
	// of time (see takeShare); guarded by mu.
	discoveryBehind int
	// streamNodeAdvised is set once adviseStreamNodeBytes ran.
	streamNodeAdvised atomic.Bool
}

// New builds an engine from a validated configuration.
func New(cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg: cfg, rdb: cfg.Client, keys: keyspace.For(cfg.Client), dom: cfg.Domain,
		log:         cfg.Logger.With("instance", cfg.InstanceID),
		tracer:      tracerOf(cfg.TracerProvider),
		stopped:     make(chan struct{}),
		discoverNow: make(chan struct{}, 1),
		workers:     map[string]*worker{},
		byLane:      map[string]*worker{},
		knownOwner:  map[string]string{},
		releasedAt:  map[string]uint64{},

		livePartitions: map[string]int{},
		overThreshold:  map[string]bool{},
	}
	e.logs = newRateLog(e.log, logEvery)
	e.regID = keyspace.RegistryField(cfg.InstanceID, randomToken())
	for _, h := range cfg.Domain.Handlers {
		if p := h.funcProblem(); p != "" {
			return nil, fmt.Errorf("engine: handler %q: %s", h.Name, p)
		}
	}
	e.subs = subscriptions(cfg.Domain, cfg.Handlers)
	if len(e.subs) == 0 {
		return nil, errors.New("engine: no handler to run: give each event handler or process manager a Func")
	}
	var indexed []string
	for _, s := range e.subs {
		if s.partitioned {
			for _, c := range s.categories {
				if !slices.Contains(indexed, c) {
					indexed = append(indexed, c)
				}
			}
		}
	}
	e.view = newIndexView(indexed)
	e.view.keys = e.keys
	groups := make([]string, len(e.subs))
	for i, s := range e.subs {
		groups[i] = s.group
	}
	e.slots = newSlots(cfg.MaxConcurrentHandlers, cfg.HandlerLimits, groups)
	e.limits = newLimiter(e)
	e.hardCtx, e.hard = context.WithCancel(context.Background())
	return e, nil
}

// subscriptions returns what the engine consumes: one subscription per event handler
// with a Func, and per process manager one over all its categories when it is sequential
// and all of them are partitioned, else one per category. only, when not empty, keeps
// the handlers it names.
func subscriptions(d *Domain, only []string) []*subscription {
	keep := map[string]bool{}
	for _, n := range only {
		keep[n] = true
	}
	want := func(name string, fn HandlerFunc) bool { return fn != nil && (len(keep) == 0 || keep[name]) }
	var batchFn HandlerFunc = func(context.Context, Event) error { return nil } // stands for a BatchFunc in want
	var subs []*subscription
	for _, h := range d.Handlers {
		fn := h.Func
		if h.BatchFunc != nil {
			fn = batchFn
		}
		if h.Kind == CommandHandlerKind || !want(h.Name, fn) {
			continue // command handlers never consume from streams
		}
		cat := h.PartOf
		if cat == "" && len(h.Handles) > 0 {
			et, _ := d.Event(h.Handles[0])
			cat = et.Category
		}
		// A partitioned category's events all live on partition streams, so every
		// handler of the category reads those, including one that did not ask for
		// sequential_by itself (it gets per-key order as a side effect).
		_, part := d.PartitionField(cat)
		s := &subscription{
			group: h.Name, categories: []string{cat}, partitioned: part,
			fn: h.Func, maxRetries: orInt(h.MaxRetries, DefaultMaxRetries), retryDelay: orDur(h.RetryDelay, DefaultRetryDelay),
			batchMax: 1,
		}
		if h.BatchFunc != nil {
			s.fn, s.batchFn, s.batchMax, s.batchWait = nil, h.BatchFunc, max(h.BatchMax, 1), h.BatchWait
		}
		if h.Limit.Active() {
			s.limit = h.Limit
		}
		subs = append(subs, s)
	}
	for _, pm := range d.ProcessManagers {
		if want(pm.Name, pm.Func) {
			subs = append(subs, pmSubscriptions(d, pm)...)
		}
	}
	return subs
}

// pmSubscriptions returns a process manager's subscriptions (see subscriptions).
func pmSubscriptions(d *Domain, pm ProcessManager) []*subscription {
	var cats []string
	allPart := true
	for _, ph := range pm.Handles {
		et, _ := d.Event(ph.Event)
		if !slices.Contains(cats, et.Category) {
			cats = append(cats, et.Category)
		}
		if _, part := d.PartitionField(et.Category); !part {
			allPart = false
		}
	}
	base := subscription{group: pm.Name, fn: pm.Func, batchMax: 1,
		maxRetries: orInt(pm.MaxRetries, DefaultMaxRetries), retryDelay: orDur(pm.RetryDelay, DefaultRetryDelay)}
	if pm.SequentialBy && allPart {
		s := base
		s.categories, s.partitioned, s.pm = cats, true, true
		return []*subscription{&s}
	}
	var subs []*subscription
	for _, c := range cats {
		s := base
		_, part := d.PartitionField(c)
		s.categories, s.partitioned = []string{c}, part
		subs = append(subs, &s)
	}
	return subs
}

// waitWorkers waits until every worker of incarnation in has exited.
func (e *Engine) waitWorkers(in *incarnation) {
	if in == nil {
		return
	}
	e.mu.Lock()
	var ws []*worker
	for _, w := range e.workers {
		if w.inc == in {
			ws = append(ws, w)
		}
	}
	e.mu.Unlock()
	for _, w := range ws {
		e.cfg.Observer.LeaseLost(w.sub.group, "session_expired")
		<-w.done
	}
}

// logEvery is the interval of rate-limited log lines: one line per cause per interval.
const logEvery = 10 * time.Second

// Ready reports whether the engine can take and keep leases (for readiness probes).
func (e *Engine) Ready() bool { ok, _ := e.Health(); return ok }

// Health reports whether the engine can take and keep leases, and if not, why: not
// started, shutting down, no live session (and why it ended), Redis unreachable, lease
// taking or discovery failing (with the Redis error, e.g. NOSCRIPT, OOM or NOPERM).
func (e *Engine) Health() (ok bool, reason string) {
	if e.sess == nil {
		return false, "not started"
	}
	if e.stopping() {
		return false, "shutting down"
	}
	var reasons []string
	if st := e.sess.status(); st != "" {
		reasons = append(reasons, st)
	}
	if r := e.health.report(); r != "" {
		reasons = append(reasons, r)
	}
	if len(reasons) == 0 {
		return true, ""
	}
	return false, strings.Join(reasons, "; ")
}

// InstanceID returns the instance id.
func (e *Engine) InstanceID() string { return e.cfg.InstanceID }

// Start registers the instance, opens its session and starts discovery, heartbeats and
// the doorbell. It returns once the session exists; partitions are taken in the
// background, from the first discovery pass, which waits a short settle (at most 250 ms,
// see startSettle) so that instances started together count each other and each takes
// its share. ctx bounds only the start-up calls. After an error (Redis unreachable, say)
// Start may be called again.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return errors.New("engine: already started")
	}
	e.started = true
	e.mu.Unlock()

	started := false
	defer func() {
		if !started { // a failed Start may be tried again
			if e.sess != nil {
				// The session may have opened: remove its key and registry entry now,
				// and stop its local deadline, which would otherwise end it later and
				// mark this instance as without a session after a successful Start.
				cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				e.sess.abandon(cctx)
				cancel()
				e.sess.release()
			}
			e.mu.Lock()
			e.started = false
			e.mu.Unlock()
		}
	}()
	if err := loadScripts(ctx, e.rdb); err != nil {
		return err
	}
	e.probeTransactions(ctx)
	if err := e.registerGroups(ctx); err != nil {
		return err
	}
	e.sess = newSession(e)
	if err := e.sess.open(ctx); err != nil {
		return err
	}
	e.acker = newAcker(e)
	e.bell = newDoorbell(e)
	if err := e.bell.init(ctx); err != nil {
		return err
	}
	e.bell.recheckKeyspace()
	if len(e.limits.limitedGroups()) > 0 {
		if err := e.limits.loadOverrides(ctx); err != nil {
			return err
		}
		e.bg.Add(1)
		go e.limits.loop()
	}
	e.bg.Add(5)
	go e.acker.loop()
	go e.sess.heartbeatLoop()
	go e.bell.loop()
	go e.bell.watchKeyspace()
	go e.discoveryLoop()
	e.kickDiscovery()
	started = true
	e.log.Info("engine started", "handlers", len(e.subs), "lease_ttl", e.cfg.Timing.LeaseTTL)
	return nil
}

// Run starts the engine and shuts it down gracefully when ctx is done.
func (e *Engine) Run(ctx context.Context) error {
	if err := e.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), e.cfg.ShutdownTimeout)
	defer cancel()
	return e.Shutdown(sctx)
}

// Shutdown stops taking work, lets in-flight events finish until ctx (or the configured
// ShutdownTimeout) expires, then cancels handlers, acknowledges what was handled, releases
// every lease (so another instance takes over at once) and closes the session.
func (e *Engine) Shutdown(ctx context.Context) error {
	// Closed under mu: startWorker checks it under mu before wg.Add, so no worker is
	// added once the wait below may have begun.
	e.mu.Lock()
	select {
	case <-e.stopped:
		e.mu.Unlock()
		return nil
	default:
	}
	close(e.stopped)
	parked := make([]*worker, 0, len(e.workers))
	for _, w := range e.workers {
		parked = append(parked, w)
	}
	e.mu.Unlock()
	for _, w := range parked {
		w.poke() // a parked worker resumes to release its lease
	}
	// Leave the registry before the workers release their leases, so that peers' fair
	// share counts one instance less and they take the released partitions at once.
	// (The session key stays until the end: the leases are still ours until released.)
	if e.sess != nil {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		_ = e.rdb.HDel(dctx, e.keys.InstancesKey(), e.regID).Err()
		dcancel()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.ShutdownTimeout)
		defer cancel()
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		e.log.Warn("shutdown deadline passed: cancelling in-flight handlers")
		e.hard()
		<-done
		err = fmt.Errorf("engine: shutdown: in-flight handlers cancelled at the deadline: %w", ctx.Err())
	}
	e.hard()
	e.bell.interrupt() // end the doorbell's blocking read now rather than at its timeout
	e.bg.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e.sess.close(cctx)
	e.sess.release()
	e.log.Info("engine stopped")
	return err
}

func (e *Engine) stopping() bool {
	select {
	case <-e.stopped:
		return true
	default:
		return false
	}
}

func (e *Engine) kickDiscovery() {
	select {
	case e.discoverNow <- struct{}{}:
	default:
	}
}

// OwnedPartition describes a unit this instance owns.
type OwnedPartition struct {
	Group      string
	Stream     string
	Generation int64
}

// Owned lists the units this instance currently owns.
func (e *Engine) Owned() []OwnedPartition {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]OwnedPartition, 0, len(e.workers))
	for _, w := range e.workers {
		out = append(out, OwnedPartition{Group: w.sub.group, Stream: w.lanes[0], Generation: w.gen})
	}
	return out
}

// Stats is a snapshot of what the engine sees, for metrics.
type Stats struct {
	Owned          int            // units owned by this instance
	Halted         int            // owned units halted on a poison head
	Paused         int            // owned units paused by an operator
	LivePartitions map[string]int // category -> partitions in its discovery index
	// DiscoveryBehind is how many free partitions, within this instance's share, the
	// last discovery pass had no time to take (the next pass runs at once); 0 when
	// discovery keeps up.
	DiscoveryBehind int
	// Slots is the instance's handler-slot use: calls running, the cap (0: unbounded) and
	// the partitions waiting for a slot.
	Slots SlotStats
	// HandlerSlots is the same per handler or process manager, sorted by name.
	HandlerSlots []HandlerSlotStats
	// Lag is, per handler and category with a backlog here, the age of the oldest event
	// that an owned partition has taken and not handled yet (by its entry id's time and
	// this instance's clock). Caught-up pairs are left out.
	Lag []LagStat
	// Throttled is, per handler with a limit key, how many partitions wait for a permit
	// now, and ThrottledTime how long partitions waited for one in all, since the start.
	Throttled     map[string]int
	ThrottledTime map[string]time.Duration
}

// LagStat is one handler's lag on one category in this instance.
type LagStat struct {
	Handler, Category string
	Age               time.Duration
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := Stats{Owned: len(e.workers), LivePartitions: map[string]int{}, DiscoveryBehind: e.discoveryBehind}
	lag := map[[2]string]time.Duration{}
	now := time.Now().UnixMilli()
	for _, w := range e.workers {
		if w.halted.Load() {
			st.Halted++
		}
		if w.paused.Load() {
			st.Paused++
		}
		if ms := w.headMS.Load(); ms > 0 {
			k := [2]string{w.sub.group, w.u.laneCats[w.headLane.Load()]}
			lag[k] = max(lag[k], time.Duration(max(now-ms, 0))*time.Millisecond)
		}
	}
	for k, age := range lag {
		st.Lag = append(st.Lag, LagStat{Handler: k[0], Category: k[1], Age: age})
	}
	for c, n := range e.livePartitions {
		st.LivePartitions[c] = n
	}
	st.Slots, st.HandlerSlots = e.slots.stats()
	st.Throttled, st.ThrottledTime = e.limits.stats()
	return st
}
