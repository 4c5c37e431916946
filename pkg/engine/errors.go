package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors of the engine.
var (
	// ErrFenced: the caller no longer holds the lease at its generation (another instance
	// took over, or its session expired). The caller must stop touching the partition.
	ErrFenced = errors.New("engine: fenced: lease no longer held at this generation")
	// ErrSessionLost: the instance's session expired (it stalled past the lease TTL); all
	// its leases are void and it must start a new session.
	ErrSessionLost = errors.New("engine: session lost: instance stalled past the lease TTL")
	// ErrHalted: the partition is halted on a poison head.
	ErrHalted = errors.New("engine: partition halted")
	// ErrHeadMoved: an operator action named a head entry that is no longer the head.
	ErrHeadMoved = errors.New("engine: head moved")
	// ErrNotHalted: an operator action needs a halted head (or force).
	ErrNotHalted = errors.New("engine: head is not halted")
	// ErrEntryGone: the entry is no longer in the stream.
	ErrEntryGone = errors.New("engine: entry no longer in the stream")
	// ErrNotSupported: the broker does not support partition operations (inline broker).
	ErrNotSupported = errors.New("engine: not supported by this broker")
	// ErrRedisUnavailable wraps connection-level failures talking to Redis.
	ErrRedisUnavailable = errors.New("engine: redis unavailable")
	// ErrRedisOutOfMemory: Redis refused a write at its maxmemory limit (policy
	// noeviction). Nothing was written; it goes away when memory is freed.
	ErrRedisOutOfMemory = errors.New("engine: redis is out of memory")
)

// translateRedisErr turns go-redis network errors into ErrRedisUnavailable, keeping the
// cause, so callers can tell "Redis is down" from a logic error.
func translateRedisErr(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	var re redis.Error
	if errors.As(err, &re) {
		if perr := noPermissionError(err); perr != nil {
			return perr
		}
		if strings.HasPrefix(re.Error(), "OOM ") {
			return fmt.Errorf("%w: it reached its maxmemory limit with the noeviction policy, so nothing was written; free memory or raise maxmemory (%w)", ErrRedisOutOfMemory, err)
		}
		return fmt.Errorf("engine: redis: %w", err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrRedisUnavailable, err) // the network error stays matchable (errors.Is)
}
