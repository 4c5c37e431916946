package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

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

// translateRedisErr turns a go-redis error that passes with time (see Transient) into
// ErrRedisUnavailable, keeping the cause, so callers can tell "Redis is down or not
// ready" from a logic error: a network failure, or a reply Redis gives while it is not
// ready. A missing permission becomes ErrNoPermission, an out-of-memory refusal
// ErrRedisOutOfMemory; any other reply or error is wrapped with "engine: redis".
func translateRedisErr(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
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
	}
	if Transient(err) {
		return fmt.Errorf("%w: %w", ErrRedisUnavailable, err) // the cause stays matchable (errors.Is, errors.As)
	}
	return fmt.Errorf("engine: redis: %w", err)
}

// notReadyReplies are the replies Redis gives while it is not ready to serve a command,
// without running it: LOADING (loading its data after a restart), TRYAGAIN (a slot being
// moved in a cluster), CLUSTERDOWN (a cluster without a quorum or with uncovered slots),
// MASTERDOWN (a replica that lost its master) and READONLY (a write to a node that became
// a replica in a failover).
var notReadyReplies = []string{"LOADING ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN ", "READONLY "}

// Transient reports whether err is a failure of Redis that passes with time, so that
// the operation may be tried again:
//
//   - Redis could not be reached: an error that matches ErrRedisUnavailable, or a network
//     failure as go-redis returns it (a net.Error such as a refused dial or a timeout,
//     a connection closed or reset, a closed client, the pool's timeout);
//   - Redis answered that it is not ready: a LOADING, TRYAGAIN, CLUSTERDOWN, MASTERDOWN or
//     READONLY reply;
//   - an error with a Transient() bool method that returns true (a network failure a
//     client hook rewrote so that go-redis does not resend the request, say).
//
// Not transient: nil, redis.Nil, a cancelled or expired context, any other reply (a
// refusal such as out of memory or no permission, a script error) and any other error.
// It is the one classifier of the engine, the operator API and the CLI.
func Transient(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrRedisUnavailable) {
		return true
	}
	var t interface{ Transient() bool }
	if errors.As(err, &t) {
		return t.Transient()
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range notReadyReplies {
			if strings.HasPrefix(re.Error(), p) {
				return true
			}
		}
		return false
	}
	return networkFailure(err)
}

// networkFailure reports whether err is a failure of the connection to Redis as go-redis
// returns it.
func networkFailure(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	for _, target := range []error{io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, net.ErrClosed, redis.ErrClosed,
		redis.ErrPoolTimeout, redis.ErrPoolExhausted, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
