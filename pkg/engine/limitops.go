package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// LimitOverride is an operator's override of a handler's limit for one value (stored and
// read by the keyspace package, its one codec).
type LimitOverride = keyspace.LimitOverride

// ErrNoOverride: a limit value has no override.
var ErrNoOverride = errors.New("engine: no override of the limit for this value")

// SetLimit overrides a handler's limit for one value of its limit key, durably (in Redis,
// until ClearLimit): its concurrency and rate replace the domain's for that value (a zero
// keeps the domain's; Off takes every cap off the value). Every running instance applies
// it at once (a notice on the limit channel), and within limitOverridesRefresh when the
// notice was missed. It returns the override as stored (Since set from the Redis clock).
func (b *RedisBroker) SetLimit(ctx context.Context, group, value string, o LimitOverride) (LimitOverride, error) {
	if err := validLimitValue(value); err != nil {
		return LimitOverride{}, err
	}
	switch {
	case o.Concurrency < 0 || o.Rate < 0:
		return LimitOverride{}, errors.New("engine: a limit override cannot be negative")
	case !o.Off && o.Concurrency == 0 && o.Rate == 0:
		return LimitOverride{}, errors.New("engine: a limit override sets a concurrency, a rate, or off")
	case o.Rate > 0 && o.Per == 0:
		o.Per = time.Second
	}
	if o.Rate > 0 {
		if err := keyspace.ValidateRateWindow(o.Per); err != nil {
			return LimitOverride{}, fmt.Errorf("engine: a limit override's rate: %w", err)
		}
	}
	now, err := b.rdb.Time(ctx).Result()
	if err != nil {
		return LimitOverride{}, translateRedisErr(err)
	}
	o.Since = now.UTC().Truncate(time.Millisecond)
	if err := b.rdb.HSet(ctx, b.keys.LimitOverrides(group), value, o.Encode()).Err(); err != nil {
		return LimitOverride{}, translateRedisErr(err)
	}
	b.announceLimit(ctx, group, value)
	return o, b.waitReplicas(ctx, "limit override")
}

// ClearLimit removes a value's override: the domain's caps apply to it again.
// ErrNoOverride when it had none.
func (b *RedisBroker) ClearLimit(ctx context.Context, group, value string) error {
	n, err := b.rdb.HDel(ctx, b.keys.LimitOverrides(group), value).Result()
	if err != nil {
		return translateRedisErr(err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s of %s", ErrNoOverride, value, group)
	}
	b.announceLimit(ctx, group, value)
	return b.waitReplicas(ctx, "limit override")
}

// Limits returns every override of a handler's limit, by value.
func (b *RedisBroker) Limits(ctx context.Context, group string) (map[string]LimitOverride, error) {
	all, err := b.rdb.HGetAll(ctx, b.keys.LimitOverrides(group)).Result()
	if err != nil {
		return nil, translateRedisErr(err)
	}
	out := make(map[string]LimitOverride, len(all))
	for v, raw := range all {
		o, err := keyspace.DecodeLimitOverride(raw)
		if err != nil {
			return nil, fmt.Errorf("engine: the override of %s for %q: %w", group, v, err)
		}
		out[v] = o
	}
	return out, nil
}

// LimitUse is what a value of a handler's limit key uses now.
type LimitUse struct {
	Held       int   // permits held (runs under way)
	Generation int64 // the last permit's generation, 0 when none was taken lately
	// Starts is the number of starts in the window that ends now, per; Per zero when the
	// value is not rate-capped (the count is then not read).
	Starts int
	Per    time.Duration
}

// LimitUse reads what one value of a handler's limit key uses now: the permits held, and
// the starts of the rate window per (0: not read).
func (b *RedisBroker) LimitUse(ctx context.Context, group, value string, per time.Duration) (LimitUse, error) {
	pipe := b.rdb.Pipeline()
	permits := pipe.HGetAll(ctx, b.keys.LimitKey(group, value))
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return LimitUse{}, translateRedisErr(err)
	}
	u := LimitUse{Per: per}
	nowMS := now.Val().UnixMilli()
	for f, v := range permits.Val() {
		switch {
		case f == "gen":
			u.Generation, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(f, "s"):
			if i := strings.LastIndexByte(v, '|'); i >= 0 {
				if exp, err := strconv.ParseInt(v[i+1:], 10, 64); err == nil && exp > nowMS {
					u.Held++
				}
			}
		}
	}
	if per > 0 {
		// The sorted set holds the starts of the last window (older ones are dropped at
		// the next take): count those within per of now.
		n, err := b.rdb.ZCount(ctx, b.keys.LimitStartsKey(group, value), "("+strconv.FormatInt(now.Val().UnixMicro()-per.Microseconds(), 10), "+inf").Result()
		if err != nil {
			return LimitUse{}, translateRedisErr(err)
		}
		u.Starts = int(n)
	}
	return u, nil
}

// announceLimit tells running instances that a value's override changed. Best effort:
// they read the overrides again within limitOverridesRefresh anyway.
func (b *RedisBroker) announceLimit(ctx context.Context, group, value string) {
	_ = b.rdb.Publish(ctx, b.keys.LimitChannel(), group+"\x00"+value+"\x00override").Err()
}

// validLimitValue checks a value given for a limit key: the rules of a partition key.
func validLimitValue(value string) error {
	if err := ValidateKey(value, ""); err != nil {
		return fmt.Errorf("limit value: %w", err)
	}
	return nil
}
