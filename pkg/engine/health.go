package engine

import (
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
)

// Causes of not being ready, one slot each.
const (
	healthSession = "session" // no live session
	healthRedis   = "redis"   // Redis unreachable or refusing the session's calls
	healthLeases  = "leases"  // lease taking fails (script errors, permissions)

	healthDiscovery = "discovery" // the partition index cannot be read
)

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
