package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/pkg/engine"
)

// Publisher appends one routed event to its stream. *engine.RedisBroker implements it.
//
// With dedupeSeq > 0 the append must be idempotent per stream: it happens only if dedupeSeq
// is above the last sequence recorded for the stream, and the record advances in the same
// atomic step; otherwise nothing is written and Published.Duplicate is set. The relay relies
// on that to survive a crash between the append and the row update.
type Publisher interface {
	PublishRouted(ctx context.Context, r engine.Route, ev engine.Event, dedupeSeq int64) (engine.Published, error)
}

// Defaults of RelayConfig.
const (
	DefaultBatchSize          = 256
	DefaultConcurrency        = 8
	DefaultSQLitePollInterval = 50 * time.Millisecond
	DefaultPostgresPoll       = time.Second
	DefaultLeaseTTL           = 10 * time.Second
	DefaultRetryMin           = 100 * time.Millisecond
	DefaultRetryMax           = 30 * time.Second
	DefaultDiscoverInterval   = 30 * time.Second
)

// RelayConfig configures a Relay. Zero values take the documented defaults.
type RelayConfig struct {
	// Publisher appends rows to Redis; required. Normally the *engine.RedisBroker the
	// domain was initialized with.
	Publisher Publisher
	// Owner names this relay in the lease table (default "{hostname}:{pid}:{random}").
	// It must be unique among running relays.
	Owner string
	// BatchSize is the most rows of one category the relay takes per round (default 256).
	BatchSize int
	// Concurrency is how many ordering units (keys, or shared streams) of a batch are
	// published in parallel (default 8). Rows of one unit are always published one at a
	// time, in order.
	Concurrency int
	// PollInterval is how long the relay sleeps when it finds no work (default 50 ms on
	// SQLite; 1 s on PostgreSQL, where LISTEN/NOTIFY wakes it on every commit and polling
	// only covers a lost notification connection).
	PollInterval time.Duration
	// LeaseTTL is how long a category lease lasts without renewal (default 10 s): a relay
	// that dies holding a lease delays that category by up to LeaseTTL. A relay stops
	// starting publishes 4/5 of the way through its lease if it could not renew it.
	LeaseTTL time.Duration
	// RetryMin and RetryMax bound the backoff after a failed publish (default 100 ms and
	// 30 s): attempt n waits RetryMin * 2^(n-1), capped at RetryMax. A failing row is retried
	// for as long as it fails, and holds back the later rows of its key meanwhile.
	RetryMin, RetryMax time.Duration
	// DiscoverInterval is how often the relay looks for unpublished rows of categories the
	// domain does not declare (default 30 s); such rows are abandoned with the reason.
	DiscoverInterval time.Duration
	// Logger receives warnings about failed rounds and lost leases (default: discard).
	Logger *slog.Logger
	// MinReplicas is how many Redis replicas must acknowledge a round's appends before
	// their rows are marked PUBLISHED ([broker] min_replicas; default 0: no wait). On a
	// shortfall the rows stay unpublished, are retried with backoff, and the round's
	// error says why; see confirmReplicated. It needs a Publisher that exposes its Redis
	// client (*engine.RedisBroker).
	MinReplicas int
	// ReplicaTimeout bounds each wait for replicas (default engine.DefaultReplicaTimeout,
	// or LeaseTTL/4 when that is shorter). It must be below LeaseTTL.
	ReplicaTimeout time.Duration
	// TracerProvider, when set, gets a producer span "publish {category}" for each row
	// the relay appends, a child of the enqueuer's span when the row has one; the event
	// then carries the relay's span, so that the handler's span follows it in one trace.
	// Without it the event carries the enqueuer's trace context as stored.
	TracerProvider trace.TracerProvider
}

// Validate reports the first invalid field.
func (c RelayConfig) Validate() error {
	switch {
	case c.Publisher == nil:
		return errors.New("outbox: RelayConfig.Publisher is required (use the *engine.RedisBroker)")
	case c.BatchSize < 0, c.Concurrency < 0:
		return errors.New("outbox: RelayConfig.BatchSize and Concurrency must not be negative")
	case c.PollInterval < 0, c.LeaseTTL < 0, c.RetryMin < 0, c.RetryMax < 0, c.DiscoverInterval < 0:
		return errors.New("outbox: RelayConfig durations must not be negative")
	case c.LeaseTTL != 0 && c.LeaseTTL < 100*time.Millisecond:
		return fmt.Errorf("outbox: RelayConfig.LeaseTTL %v is below the minimum of 100ms", c.LeaseTTL)
	case c.RetryMin != 0 && c.RetryMax != 0 && c.RetryMax < c.RetryMin:
		return fmt.Errorf("outbox: RelayConfig.RetryMax %v is below RetryMin %v", c.RetryMax, c.RetryMin)
	case c.MinReplicas < 0:
		return fmt.Errorf("outbox: RelayConfig.MinReplicas must be 0 (no wait) or a replica count, got %d", c.MinReplicas)
	case c.ReplicaTimeout < 0:
		return errors.New("outbox: RelayConfig durations must not be negative")
	case c.MinReplicas > 0 && !exposesClient(c.Publisher):
		return errors.New("outbox: RelayConfig.MinReplicas needs a Publisher that exposes its Redis client (the *engine.RedisBroker)")
	}
	return nil
}

func exposesClient(p Publisher) bool { _, ok := p.(streamClient); return ok }

func (c RelayConfig) withDefaults(d Dialect) RelayConfig {
	def := func(v *time.Duration, x time.Duration) {
		if *v == 0 {
			*v = x
		}
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Owner = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if d == Postgres {
		def(&c.PollInterval, DefaultPostgresPoll)
	} else {
		def(&c.PollInterval, DefaultSQLitePollInterval)
	}
	def(&c.LeaseTTL, DefaultLeaseTTL)
	def(&c.RetryMin, DefaultRetryMin)
	def(&c.RetryMax, DefaultRetryMax)
	if c.RetryMax < c.RetryMin {
		c.RetryMax = c.RetryMin
	}
	def(&c.DiscoverInterval, DefaultDiscoverInterval)
	def(&c.ReplicaTimeout, min(engine.DefaultReplicaTimeout, c.LeaseTTL/4))
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Relay moves outbox rows to Redis streams: per category, under a lease in the database, it
// routes each unpublished row as the router does, appends it with a dedupe sequence, and
// marks it PUBLISHED with its stream and entry id. See docs/outbox.md for the ordering,
// crash and lease guarantees.
//
// Run (or Drain) may be called by one goroutine at a time; Wake and Stats are safe from any
// goroutine.
type Relay struct {
	o      *Outbox
	cfg    RelayConfig
	log    *slog.Logger
	tracer trace.Tracer // nil without RelayConfig.TracerProvider

	wake      chan struct{}
	running   atomic.Bool
	listening atomic.Bool // a LISTEN connection is up (PostgreSQL)

	// Owned by the goroutine in Run or Drain.
	leases       map[string]*lease
	refusedUntil map[string]time.Time // don't retry acquiring a lease held elsewhere before
	extra        []string             // categories found in the table but not in the domain
	discovered   time.Time

	statsMu sync.Mutex
	stats   RelayStats // guarded by statsMu

	// afterPublish, when set (tests only), runs after each append returned and before the
	// row is marked: the crash window.
	afterPublish func(ev engine.Event, p engine.Published)
}

// NewRelay returns a relay for the outbox. It starts nothing: call Run.
func NewRelay(o *Outbox, cfg RelayConfig) (*Relay, error) {
	if o == nil {
		return nil, errors.New("outbox: NewRelay needs the *Outbox from outbox.New")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(o.dialect)
	if cfg.ReplicaTimeout >= cfg.LeaseTTL {
		return nil, fmt.Errorf("outbox: RelayConfig.ReplicaTimeout %v must be below the relay's LeaseTTL %v", cfg.ReplicaTimeout, cfg.LeaseTTL)
	}
	return &Relay{
		o: o, cfg: cfg, log: cfg.Logger, tracer: relayTracer(cfg.TracerProvider),
		wake:         make(chan struct{}, 1),
		leases:       map[string]*lease{},
		refusedUntil: map[string]time.Time{},
	}, nil
}

// Owner returns the relay's lease owner name.
func (r *Relay) Owner() string { return r.cfg.Owner }

// Wake makes a running relay look for work now instead of at its next poll. An application
// that enqueues on SQLite in the relay's process can call it after each commit for the
// lowest latency. It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// RelayStats are the relay's counters since NewRelay, for metrics.
type RelayStats struct {
	// Published counts rows appended and marked PUBLISHED by this relay.
	Published uint64 `json:"published"`
	// Duplicates counts rows found already appended (after a crash or a lost lease) and
	// marked PUBLISHED without a second append.
	Duplicates uint64 `json:"duplicates"`
	// Failures counts failed publish attempts (each is retried with backoff).
	Failures uint64 `json:"failures"`
	// Abandoned counts rows this relay marked ABANDONED.
	Abandoned uint64 `json:"abandoned"`
	// LeasesLost counts leases found taken over by another relay.
	LeasesLost uint64 `json:"leases_lost"`
	// Unreplicated counts rows appended but left unpublished because fewer Redis replicas
	// than MinReplicas acknowledged the append (each is retried; also in Failures).
	Unreplicated uint64 `json:"unreplicated"`
	// Categories lists the categories whose lease this relay holds.
	Categories []string `json:"categories"`
	// Listening is true while the PostgreSQL LISTEN connection is up.
	Listening bool `json:"listening"`
}

// Stats returns a snapshot of the relay's counters.
func (r *Relay) Stats() RelayStats {
	r.statsMu.Lock()
	s := r.stats
	s.Categories = append([]string(nil), r.stats.Categories...)
	r.statsMu.Unlock()
	s.Listening = r.listening.Load()
	return s
}

func (r *Relay) count(f func(*RelayStats)) {
	r.statsMu.Lock()
	f(&r.stats)
	r.statsMu.Unlock()
}

func (r *Relay) publishLeases() {
	cats := make([]string, 0, len(r.leases))
	for c := range r.leases {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	r.count(func(s *RelayStats) { s.Categories = cats })
}

// errRunning is returned when Run or Drain is called while one is already running.
var errRunning = errors.New("outbox: the relay is already running (Run and Drain are not reentrant)")

// Run relays until ctx is cancelled, then releases its leases so another relay takes over
// at once, and returns nil. It returns an error only when the relay is already running.
// Errors of one round (database or Redis unavailable) are logged and the round is retried
// after a pause that starts at PollInterval and doubles up to 5 s; a failing row is retried
// with its own backoff (RetryMin..RetryMax). On PostgreSQL a separate connection LISTENs for
// commits; Run returns only after that connection is closed.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errRunning
	}
	defer r.running.Store(false)
	var wg sync.WaitGroup
	lctx, stopListen := context.WithCancel(ctx)
	if r.o.dialect == Postgres {
		wg.Add(1)
		go func() { defer wg.Done(); r.listen(lctx) }()
	}
	defer func() {
		stopListen()
		wg.Wait()
		r.releaseAll()
	}()

	errWait := r.cfg.PollInterval
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		res, err := r.round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := r.cfg.PollInterval
		if err != nil {
			r.log.Warn("outbox relay: round failed; retrying", "table", r.o.table, "owner", r.cfg.Owner, "retry_in", errWait, "err", err)
			wait = errWait
			errWait = min(errWait*2, 5*time.Second)
		} else {
			errWait = r.cfg.PollInterval
			if res.more || res.published+res.duplicates+res.abandoned > 0 {
				// Rows tend to come in bursts: after a round that did work, look again
				// at once; sleep only after a round that found nothing to do.
				continue
			}
		}
		if !res.nextRetry.IsZero() {
			wait = min(wait, max(time.Until(res.nextRetry), time.Millisecond))
		}
		wait = min(wait, r.cfg.LeaseTTL/4)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// DrainResult counts what Drain did.
type DrainResult struct {
	Published  int `json:"published"`
	Duplicates int `json:"duplicates"`
	Failed     int `json:"failed"`
	Abandoned  int `json:"abandoned"`
}

// Drain relays until no row is ready (rows waiting for a retry, and categories leased by
// another relay, are left), then releases its leases. It is Run without the waiting, for
// a one-shot `seqctl relay --once` and for tests.
func (r *Relay) Drain(ctx context.Context) (DrainResult, error) {
	if !r.running.CompareAndSwap(false, true) {
		return DrainResult{}, errRunning
	}
	defer r.running.Store(false)
	defer r.releaseAll()
	var total DrainResult
	for {
		res, err := r.round(ctx)
		total.Published += res.published
		total.Duplicates += res.duplicates
		total.Failed += res.failed
		total.Abandoned += res.abandoned
		if err != nil {
			return total, err
		}
		if !res.more {
			return total, nil
		}
	}
}

// roundResult sums one round over all categories.
type roundResult struct {
	published, duplicates, failed, abandoned int
	more                                     bool      // some category had more ready rows than one batch
	nextRetry                                time.Time // earliest backoff expiry seen, zero if none
}

func (r *roundResult) add(c roundResult) {
	r.published += c.published
	r.duplicates += c.duplicates
	r.failed += c.failed
	r.abandoned += c.abandoned
	r.more = r.more || c.more
	if !c.nextRetry.IsZero() && (r.nextRetry.IsZero() || c.nextRetry.Before(r.nextRetry)) {
		r.nextRetry = c.nextRetry
	}
}

// round is the relay's one tick: for every category, take or keep its lease and relay one
// batch. Categories are handled one after another; errors of one category do not stop the
// others and the first is returned.
func (r *Relay) round(ctx context.Context) (roundResult, error) {
	var total roundResult
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil && ctx.Err() == nil {
			firstErr = err
		}
	}
	keep(r.discover(ctx))
	for _, cat := range r.categories() {
		if ctx.Err() != nil {
			break
		}
		res, err := r.relayCategory(ctx, cat)
		total.add(res)
		keep(err)
	}
	r.publishLeases()
	return total, firstErr
}

// categories returns the domain's event categories and any found in the table, sorted.
func (r *Relay) categories() []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range r.o.dom.Events {
		if !seen[e.Category] {
			seen[e.Category] = true
			out = append(out, e.Category)
		}
	}
	for _, c := range r.extra {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

func (r *Relay) declared(category string) bool {
	for _, e := range r.o.dom.Events {
		if e.Category == category {
			return true
		}
	}
	return false
}

// discover refreshes the categories found in unpublished rows, every DiscoverInterval.
func (r *Relay) discover(ctx context.Context) error {
	if !r.discovered.IsZero() && time.Since(r.discovered) < r.cfg.DiscoverInterval {
		return nil
	}
	found, err := queryRows(ctx, r.o.db, r.o.q.categories, func(rows *sql.Rows) (c string, err error) {
		err = rows.Scan(&c)
		return c, err
	})
	if err != nil {
		return fmt.Errorf("outbox: list the categories of %s: %w", r.o.table, err)
	}
	var cats []string
	for _, c := range found {
		if !r.declared(c) {
			cats = append(cats, c)
		}
	}
	r.extra = cats
	r.discovered = time.Now()
	return nil
}

// releaseAll gives up every lease, with a short deadline of its own (ctx may be done).
func (r *Relay) releaseAll() {
	if len(r.leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for cat, l := range r.leases {
		r.release(ctx, l)
		delete(r.leases, cat)
	}
	r.publishLeases()
}

// backoff is the wait after the n-th consecutive failure of a row (n >= 1).
func (r *Relay) backoff(n int) time.Duration {
	d := r.cfg.RetryMin
	for i := 1; i < n && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, r.cfg.RetryMax)
}
