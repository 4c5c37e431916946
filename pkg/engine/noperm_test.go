package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// fakeReply is a Redis error reply, as go-redis returns one.
type fakeReply string

func (e fakeReply) Error() string { return string(e) }
func (fakeReply) RedisError()     {}

var _ redis.Error = fakeReply("")

func TestTranslateNoPermission(t *testing.T) {
	tests := []struct {
		reply   string
		missing string
	}{
		{"NOPERM User seqctl-viewer has no permissions to run the 'evalsha' command", "the command +evalsha"},
		{"NOPERM this user has no permissions to run the 'xgroup|destroy' command", "the command +xgroup|destroy"},
		{"NOPERM this user has no permissions to access one of the keys used as arguments", "a key pattern (~pattern)"},
		{"NOPERM this user has no permissions to access one of the channels used as arguments", "a channel pattern (&pattern)"},
		{"NOPERM something new", "a permission"},
	}
	for _, tt := range tests {
		t.Run(tt.reply, func(t *testing.T) {
			err := translateRedisErr(fakeReply(tt.reply))
			if !errors.Is(err, ErrNoPermission) {
				t.Fatalf("translateRedisErr = %v, want ErrNoPermission", err)
			}
			for _, want := range []string{tt.missing, SecurityDoc, tt.reply} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not contain %q", err, want)
				}
			}
			missing, reply := MissingPermission(err)
			if !strings.HasPrefix(missing, tt.missing) || reply != tt.reply {
				t.Errorf("MissingPermission = %q, %q; want %q, %q", missing, reply, tt.missing, tt.reply)
			}
		})
	}
	if err := translateRedisErr(fakeReply("ERR other")); errors.Is(err, ErrNoPermission) {
		t.Errorf("an ERR reply became %v", err)
	}
	if m, r := MissingPermission(errors.New("dial tcp: refused")); m != "" || r != "" {
		t.Errorf("MissingPermission of a network error = %q, %q", m, r)
	}
}
