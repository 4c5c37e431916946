package scripts

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var limitScript = load("limit.lua", false)

// LimitTake takes a permit of one value of a handler's limit key (limit.lua).
type LimitTake struct {
	Permits, Starts string
	Holder          string
	Concurrency     int           // permits at once; 0: no cap
	Rate            int           // starts per Window; 0: no cap
	Window          time.Duration // the rate's window
	TTL             time.Duration // a permit's life without a renewal
	// Waiter names the asking instance's place in the value's line across instances ("":
	// none); Stale is how long a waiter that asks no more keeps its place.
	Waiter string
	Stale  time.Duration
}

// LimitGrant is limit.lua's answer to a take.
type LimitGrant struct {
	Taken      bool
	Slot       int   // -1 without a concurrency cap
	Generation int64 // the permit's fencing token
	Expiry     time.Time
	// Wait is, for a refusal, how long until a permit may be free; Reason says what
	// refused: a cap ("concurrency" or "rate"), or the line ("line": other instances
	// waited longer for a permit of the value).
	Wait   time.Duration
	Reason string
}

// Run calls the script.
func (c LimitTake) Run(ctx context.Context, rdb redis.Scripter) (LimitGrant, error) {
	cmd := limitScript.Run(ctx, rdb, []string{c.Permits, c.Starts}, "take", c.Holder, c.Concurrency, c.Rate,
		c.Window.Milliseconds(), c.TTL.Milliseconds(), c.Waiter, c.Stale.Milliseconds())
	return reply("limit.lua", cmd, func(code int64, rest []any) (LimitGrant, error) {
		if code == 0 {
			return LimitGrant{Wait: time.Duration(num(rest, 0)) * time.Millisecond, Reason: str(rest, 1)}, nil
		}
		gen, err := strconv.ParseInt(str(rest, 1), 10, 64)
		if err != nil {
			return LimitGrant{}, replyError("limit.lua", cmd.Val())
		}
		return LimitGrant{Taken: true, Slot: int(num(rest, 0)), Generation: gen, Expiry: time.UnixMilli(num(rest, 2))}, nil
	})
}

// LimitHold names a permit held: to renew it or give it back.
type LimitHold struct {
	Permits, Starts string
	Holder          string
	Slot            int
	Generation      int64
}

// Renew extends the permit by ttl; false when it is no longer the holder's.
func (c LimitHold) Renew(ctx context.Context, rdb redis.Scripter, ttl time.Duration) (bool, error) {
	n, err := limitScript.Run(ctx, rdb, []string{c.Permits, c.Starts}, "renew", c.Holder, c.Slot, c.Generation, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// RenewCmd queues the renewal on a pipeline (read it with PermitRenewed).
func (c LimitHold) RenewCmd(ctx context.Context, pipe redis.Pipeliner, ttl time.Duration) *redis.Cmd {
	return limitScript.EvalSha(ctx, pipe, []string{c.Permits, c.Starts}, "renew", c.Holder, c.Slot, c.Generation, ttl.Milliseconds())
}

// PermitRenewed reads a queued renewal: false when the permit is no longer the holder's.
func PermitRenewed(cmd *redis.Cmd) (bool, error) {
	n, err := cmd.Int64()
	return n == 1, err
}

// Give gives the permit back; waited reports that a take of the value was refused within
// linger (someone waits: the caller announces the release).
func (c LimitHold) Give(ctx context.Context, rdb redis.Scripter, linger time.Duration) (given, waited bool, err error) {
	res, err := ints("limit.lua", limitScript.Run(ctx, rdb, []string{c.Permits, c.Starts}, "give", c.Holder, c.Slot, c.Generation, linger.Milliseconds()))
	if err != nil {
		return false, false, err
	}
	return len(res) > 0 && res[0] == 1, len(res) > 1 && res[1] == 1, nil
}
