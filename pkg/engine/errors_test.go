package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// hookError is a network failure a client hook rewrote so that go-redis does not
// resend the request: it wraps nothing and says it is transient.
type hookError string

func (e hookError) Error() string { return string(e) }
func (hookError) Transient() bool { return true }

type notTransient string

func (e notTransient) Error() string { return string(e) }
func (notTransient) Transient() bool { return false }

func TestTransient(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"redis.Nil", redis.Nil, false},
		{"cancelled", context.Canceled, false},
		{"deadline", fmt.Errorf("reading: %w", context.DeadlineExceeded), false},
		{"ErrRedisUnavailable", fmt.Errorf("%w: dial tcp: connection refused", ErrRedisUnavailable), true},
		{"translated, wrapped again", fmt.Errorf("engine: registering: %w", translateRedisErr(io.EOF)), true},
		{"refused dial", refused, true},
		{"read timeout", timeout, true},
		{"closed connection", io.EOF, true},
		{"closed mid-reply", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{"reset", syscall.ECONNRESET, true},
		{"closed client", redis.ErrClosed, true},
		{"pool timeout", redis.ErrPoolTimeout, true},
		{"a hook's transient error", hookError("read tcp: connection reset by peer"), true},
		{"an error that says it is not transient", notTransient("x"), false},
		{"LOADING", fakeReply("LOADING Redis is loading the dataset in memory"), true},
		{"TRYAGAIN", fakeReply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"CLUSTERDOWN", fakeReply("CLUSTERDOWN The cluster is down"), true},
		{"MASTERDOWN", fakeReply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{"READONLY", fakeReply("READONLY You can't write against a read only replica."), true},
		{"a wrapped not-ready reply", fmt.Errorf("publish: %w", fakeReply("LOADING Redis is loading")), true},
		{"out of memory", fakeReply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{"no permission", fakeReply("NOPERM User seqctl has no permissions to run the 'xadd' command"), false},
		{"a script error", fakeReply("ERR user_script:1: oops"), false},
		{"a reply that only mentions LOADING", fakeReply("ERR LOADING "), false},
		{"the caller's own error", errors.New("engine: unknown event type"), false},
		{"fenced", ErrFenced, false},
		{"out of memory, translated", translateRedisErr(fakeReply("OOM command not allowed")), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Transient(tt.err); got != tt.want {
				t.Errorf("Transient(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestTranslateRedisErrTransient checks that the engine reports every transient failure
// as ErrRedisUnavailable, with its cause, and nothing else.
func TestTranslateRedisErrTransient(t *testing.T) {
	for _, tt := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"a network failure", io.EOF, true},
		{"LOADING", fakeReply("LOADING Redis is loading the dataset in memory"), true},
		{"READONLY", fakeReply("READONLY You can't write against a read only replica."), true},
		{"a script error", fakeReply("ERR user_script:1: oops"), false},
		{"out of memory", fakeReply("OOM command not allowed"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := translateRedisErr(tt.err)
			if errors.Is(got, ErrRedisUnavailable) != tt.unavailable || !errors.Is(got, tt.err) {
				t.Errorf("translateRedisErr(%v) = %v; want unavailable %v, with its cause", tt.err, got, tt.unavailable)
			}
		})
	}
	if err := translateRedisErr(context.Canceled); err != context.Canceled {
		t.Errorf("translateRedisErr(context.Canceled) = %v, want it unchanged", err)
	}
	if err := translateRedisErr(redis.Nil); err != redis.Nil {
		t.Errorf("translateRedisErr(redis.Nil) = %v, want it unchanged", err)
	}
}
