package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
)

// reply is a Redis error reply, as go-redis returns one.
type reply string

func (e reply) Error() string { return string(e) }
func (reply) RedisError()     {}

// hookError is a network failure a client hook rewrote so that go-redis does not resend
// the request.
type hookError string

func (e hookError) Error() string { return string(e) }
func (hookError) Transient() bool { return true }

// TestTranslateTransient checks that translate reports what engine.Transient calls
// transient as engine.ErrRedisUnavailable, keeps the engine's errors and wraps other
// replies.
func TestTranslateTransient(t *testing.T) {
	for _, tt := range []struct {
		name        string
		err         error
		unavailable bool
		text        string
	}{
		{"a network failure", io.EOF, true, "engine: redis unavailable: EOF"},
		{"a hook's network failure", hookError("read tcp: connection reset by peer"), true, "engine: redis unavailable: read tcp: connection reset by peer"},
		{"LOADING", reply("LOADING Redis is loading the dataset in memory"), true, "engine: redis unavailable: LOADING Redis is loading the dataset in memory"},
		{"the engine's", fmt.Errorf("%w: EOF", engine.ErrRedisUnavailable), true, "engine: redis unavailable: EOF"},
		{"a script error", reply("ERR user_script:1: oops"), false, "admin: redis: ERR user_script:1: oops"},
		{"head moved", engine.ErrHeadMoved, false, engine.ErrHeadMoved.Error()},
		{"another error", errors.New("admin: no such handler"), false, "admin: no such handler"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := translate(tt.err)
			if errors.Is(got, engine.ErrRedisUnavailable) != tt.unavailable || got.Error() != tt.text {
				t.Errorf("translate(%v) = %q; want %q, unavailable %v", tt.err, got, tt.text, tt.unavailable)
			}
		})
	}
	for _, err := range []error{nil, redis.Nil, context.Canceled} {
		if got := translate(err); got != err {
			t.Errorf("translate(%v) = %v, want it unchanged", err, got)
		}
	}
}
