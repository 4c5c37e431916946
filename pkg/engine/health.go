package engine

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Causes of not being ready, one slot each (a session that is over says so itself:
// session.status).
const (
	healthRedis  = "redis"  // Redis unreachable or refusing the session's calls
	healthLeases = "leases" // lease taking fails (script errors, permissions)

	healthDiscovery = "discovery" // the partition index cannot be read
	healthCalls     = "calls"     // the engine's own client cannot reach Redis
)

// callHealth follows whether the engine's own client (EngineConfig.Client) reaches
// Redis, as the partitions' reads and the discovery passes find it. The session renews
// through a client of its own, which can keep working while this one cannot (Redis at
// maxclients refusing the new connections of one pool, a proxy that broke one set of
// connections): the heartbeat then gives the leases up (session.beat) instead of holding
// partitions that no read reaches.
type callHealth struct {
	// down is set while the calls fail: answered, on every read, then costs one atomic
	// load and no lock.
	down    atomic.Bool
	mu      sync.Mutex
	since   time.Time // when the calls began to fail, zero while the last one got an answer; guarded by mu
	lastErr error     // guarded by mu
}

// answered records a call that Redis answered (an error reply included).
func (c *callHealth) answered() {
	if !c.down.Load() {
		return
	}
	c.mu.Lock()
	c.since, c.lastErr = time.Time{}, nil
	c.down.Store(false)
	c.mu.Unlock()
}

// failed records a call that got no answer: err is kept when it is not a reply of Redis
// (a refused or broken connection, a timeout). A call ended by its own context's
// cancellation (ctx: the caller's) says nothing about Redis.
func (c *callHealth) failed(ctx context.Context, err error) {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) || connErr(err) == nil {
		return
	}
	c.mu.Lock()
	if c.since.IsZero() {
		c.since = time.Now()
	}
	c.lastErr = err
	c.down.Store(true)
	c.mu.Unlock()
}

// failing returns for how long every call has failed, and the last error (0 and nil
// while they get answers).
func (c *callHealth) failing() (time.Duration, error) {
	if !c.down.Load() {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since.IsZero() {
		return 0, nil
	}
	return time.Since(c.since), c.lastErr
}

// health is what keeps the instance from taking or keeping leases, by cause, for
// /readyz. Guarded by its own mutex; cheap enough to update on every pass.
type health struct {
	mu      sync.Mutex
	reasons map[string]string // cause -> message; guarded by mu
}

func (h *health) set(cause, msg string) {
	h.mu.Lock()
	if h.reasons == nil {
		h.reasons = map[string]string{}
	}
	h.reasons[cause] = msg
	h.mu.Unlock()
}

func (h *health) clear(cause string) {
	h.mu.Lock()
	delete(h.reasons, cause)
	h.mu.Unlock()
}

// report returns the reasons, sorted by cause and joined, "" when there are none.
func (h *health) report() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	causes := make([]string, 0, len(h.reasons))
	for c := range h.reasons {
		causes = append(causes, c)
	}
	sort.Strings(causes)
	msgs := make([]string, len(causes))
	for i, c := range causes {
		msgs[i] = h.reasons[c]
	}
	return strings.Join(msgs, "; ")
}

// rateLog writes at most one line per cause per interval, so an outage that every
// partition notices gives a line per cause, not one per partition. A line written after
// a quiet period says how many were suppressed.
type rateLog struct {
	log   *slog.Logger
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time // guarded by mu
	held map[string]int       // lines suppressed since last; guarded by mu
}

func newRateLog(log *slog.Logger, every time.Duration) *rateLog {
	return &rateLog{log: log, every: every, last: map[string]time.Time{}, held: map[string]int{}}
}

func (r *rateLog) allow(cause string) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, seen := r.last[cause]; seen && time.Since(t) < r.every {
		r.held[cause]++
		return false, 0
	}
	r.last[cause] = time.Now()
	n := r.held[cause]
	r.held[cause] = 0
	return true, n
}

// warn logs msg at WARN unless a line of the same cause was written within the interval.
func (r *rateLog) warn(cause, msg string, args ...any) {
	if ok, n := r.allow(cause); ok {
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		r.log.Warn(msg, args...)
	}
}
