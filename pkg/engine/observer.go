package engine

import "time"

// Observer receives what the engine does, for metrics. Methods are called from engine
// goroutines, concurrently, and must return quickly without blocking. Labels derived
// from the arguments must stay bounded: group and category, never the partition key.
type Observer interface {
	// Attempt is called after every handler attempt.
	Attempt(a AttemptInfo)
	// LeaseAcquired is called when the instance starts owning a unit.
	LeaseAcquired(group string)
	// LeaseLost is called when the instance stops owning a unit without releasing it:
	// reason is "fenced" (a fenced call was rejected: another instance holds the lease)
	// or "session_expired" (the instance stalled or lost Redis past the lease TTL and
	// dropped every lease).
	LeaseLost(group, reason string)
	// Halted is called when a partition halts on a poison head.
	Halted(group, category string)
}

// AttemptInfo describes one handler attempt.
type AttemptInfo struct {
	Group    string
	Category string
	Attempt  int           // 1 for the first delivery
	Events   int           // the events the run carried: 1, or a BatchFunc run's count
	Duration time.Duration // time inside the handler
	// Latency is from the publish (Redis time of the XADD) to the handler start, for a
	// first attempt; 0 for retries. For a batch, the first (oldest) event's.
	Latency time.Duration
	Err     error // nil when handled
	// Retry is set when the attempt failed and will be retried; a failed attempt without
	// Retry halted the partition (or the lease was lost).
	Retry bool
}

type nopObserver struct{}

func (nopObserver) Attempt(AttemptInfo)      {}
func (nopObserver) LeaseAcquired(string)     {}
func (nopObserver) LeaseLost(string, string) {}
func (nopObserver) Halted(string, string)    {}
