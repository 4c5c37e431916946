package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Limit keys (engine.HandlerLimit) from the operator's side: a handler's fleet-wide cap
// per value of a payload field (a tenant). SetLimit and ClearLimit write and remove an
// override of one value, audited like a pause; Limit reads one value's caps, override and
// use; Limits lists the values with an override and, when asked, those with partitions
// waiting for a permit (this file: the reads; limitset.go: the writes). The engine's
// instances apply an override at once (a notice on the limit channel) and within 30 s
// when they missed it.

// ErrNoLimit is matched by every *NoLimitError.
var ErrNoLimit = errors.New("admin: the handler has no limit key")

// NoLimitError: the config declares the handler without limit_by, so an override of its
// limit would cap nothing.
type NoLimitError struct {
	Handler string
	// Limited are the handlers the config declares with a limit key.
	Limited []string
}

func (e *NoLimitError) Error() string {
	msg := fmt.Sprintf("handler %s has no limit_by: an override caps nothing until its [[handlers]] entry in domain.toml sets limit_by with limit_concurrency or limit_rate", e.Handler)
	if len(e.Limited) == 0 {
		return msg + "; no handler of the config has a limit key"
	}
	return msg + "; the handlers with a limit key are " + strings.Join(e.Limited, ", ")
}

// Is makes errors.Is(err, ErrNoLimit) true.
func (e *NoLimitError) Is(target error) bool { return target == ErrNoLimit }

// LimitCaps are the caps of one value of a limit key.
type LimitCaps struct {
	// Concurrency is how many runs of the value may hold a permit at once, across every
	// instance; 0: no cap.
	Concurrency int `json:"concurrency"`
	// Rate is how many runs of the value may start per window, "20/s" (see
	// keyspace.ParseRate); "" for no cap.
	Rate string `json:"rate"`
	// Off says an override took every cap off the value.
	Off bool `json:"off,omitempty"`
}

// CapsOf are the caps of a handler's limit, as the domain declares them (the same for every
// value).
func CapsOf(l engine.HandlerLimit) LimitCaps {
	c := LimitCaps{Concurrency: l.Concurrency}
	if l.Rate > 0 {
		c.Rate = keyspace.FormatRate(l.Rate, l.Per)
	}
	return c
}

// EffectiveCaps are the caps that apply to a value, by the engine's rule: the override's
// concurrency and rate where it sets them (a zero keeps the domain's), none at all when
// it is off, else the domain's. def is the domain's caps, nil when unknown (no config);
// the result is then nil unless the override settles both caps.
func EffectiveCaps(def *LimitCaps, o *engine.LimitOverride) *LimitCaps {
	switch {
	case o != nil && o.Off:
		return &LimitCaps{Off: true}
	case o == nil && def == nil:
		return nil
	case def == nil && (o.Concurrency == 0 || o.Rate == 0):
		return nil
	}
	var c LimitCaps
	if def != nil {
		c = *def
	}
	if o != nil && o.Concurrency > 0 {
		c.Concurrency = o.Concurrency
	}
	if o != nil && o.Rate > 0 {
		c.Rate = keyspace.FormatRate(o.Rate, o.Per)
	}
	return &c
}

// window is the rate's window of caps, 0 when the rate is not capped (or unknown).
func (c *LimitCaps) window() time.Duration {
	if c == nil || c.Rate == "" {
		return 0
	}
	_, per, err := keyspace.ParseRate(c.Rate)
	if err != nil {
		return 0
	}
	return per
}

// LimitUsage is what one value of a limit key uses now, in Redis.
type LimitUsage struct {
	// Held is the permits held now: runs under way across every instance.
	Held int `json:"held"`
	// Starts is how many runs started in the rate window that ends now; null when the
	// value's rate is not capped, or not known without a config (then it is not read).
	Starts *int `json:"starts"`
	// Generation is the last permit's generation, the fencing token handed to its run;
	// 0 when none was taken lately.
	Generation int64 `json:"generation"`
}

// Limit is one value of a handler's limit key: its caps, the operator's override, its use
// now and the partitions waiting for a permit.
type Limit struct {
	Handler string `json:"handler"`
	Value   string `json:"value"`
	// By is the payload field whose values are capped (limit_by), from the config; ""
	// without one.
	By string `json:"limit_by"`
	// Default is the domain's caps, the same for every value (from the config); nil
	// without a config.
	Default *LimitCaps `json:"default"`
	// Override is the operator's override of the value; nil when it has none.
	Override *engine.LimitOverride `json:"override"`
	// Effective are the caps that apply to the value (EffectiveCaps); nil when they
	// cannot be told without a config.
	Effective *LimitCaps `json:"effective"`
	Use       LimitUsage `json:"use"`
	// Waiting counts the partitions waiting for a permit of the value now, as the
	// registry entries of the live instances list them (each lists at most
	// keyspace.MaxThrottledListed of its own).
	Waiting int `json:"waiting"`
}

// HandlerLimits returns the limit key of every handler the config declares with one
// (limit_by), by handler: the Options' Limits. nil without a config.
func (a *Admin) HandlerLimits() map[string]engine.HandlerLimit {
	if a.opts.Limits == nil {
		return nil
	}
	return maps.Clone(a.opts.Limits)
}

// limitKey is what is known of a handler's limit key: its limit from the config, or
// nothing (known false) without one.
type limitKey struct {
	limit engine.HandlerLimit
	known bool
}

// defaultCaps are the domain's caps, nil without a config.
func (k limitKey) defaultCaps() *LimitCaps {
	if !k.known {
		return nil
	}
	c := CapsOf(k.limit)
	return &c
}

// handlerLimit checks that handler may have a limit override: with a config, a handler
// it declares with limit_by (*NoLimitError for one without, a *NotFoundError for one it
// does not declare); without one, a consumer group some category has registered.
func (a *Admin) handlerLimit(ctx context.Context, handler string) (limitKey, error) {
	if handler == "" {
		return limitKey{}, errors.New("admin: name the handler whose limit key it is")
	}
	if a.opts.Limits != nil {
		if l, ok := a.opts.Limits[handler]; ok {
			return limitKey{limit: l, known: true}, nil
		}
		limited := slices.Sorted(maps.Keys(a.opts.Limits))
		for _, groups := range a.opts.Declared {
			if slices.Contains(groups, handler) {
				return limitKey{}, &NoLimitError{Handler: handler, Limited: limited}
			}
		}
		hint := "the config declares no handler with limit_by"
		if len(limited) > 0 {
			hint = "the handlers with a limit key are " + strings.Join(limited, ", ")
		}
		return limitKey{}, &NotFoundError{What: "handler", Name: handler, Hint: hint}
	}
	cats, err := a.scanCategories(ctx, a.keys.GroupRegistry(""), nil)
	if err != nil {
		return limitKey{}, err
	}
	pipe := a.rdb.Pipeline()
	member := make([]*redis.BoolCmd, len(cats))
	for i, c := range cats {
		member[i] = pipe.SIsMember(ctx, a.keys.GroupRegistry(c), handler)
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return limitKey{}, err
	}
	for _, m := range member {
		if m.Val() {
			return limitKey{}, nil
		}
	}
	return limitKey{}, &NotFoundError{What: "handler", Name: handler,
		Hint: "no category's group registry holds it; check the name, or give --config to check it against the domain"}
}

// checkLimitValue checks a value of a limit key: the rules of a partition key.
func checkLimitValue(value string) error {
	if err := engine.ValidateKey(value, ""); err != nil {
		return fmt.Errorf("invalid limit value: %w", err)
	}
	return nil
}

// override reads a value's override; nil when it has none.
func (a *Admin) override(ctx context.Context, handler, value string) (*engine.LimitOverride, error) {
	raw, err := a.rdb.HGet(ctx, a.keys.LimitOverrides(handler), value).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, translate(err)
	}
	o, err := keyspace.DecodeLimitOverride(raw)
	if err != nil {
		return nil, fmt.Errorf("admin: the override of %s for %q: %w", handler, value, err)
	}
	return &o, nil
}

// Limit reads one value of a handler's limit key: its caps, override, use and waiting
// partitions. Errors: see handlerLimit; engine.ErrInvalidKey for a bad value.
func (a *Admin) Limit(ctx context.Context, handler, value string) (*Limit, error) {
	k, err := a.handlerLimit(ctx, handler)
	if err != nil {
		return nil, err
	}
	if err := checkLimitValue(value); err != nil {
		return nil, err
	}
	o, err := a.override(ctx, handler, value)
	if err != nil {
		return nil, err
	}
	waiting, err := a.waitingValues(ctx)
	if err != nil {
		return nil, err
	}
	return a.limitOf(ctx, handler, value, k, o, waiting[limitValueID{handler, value}])
}

// limitOf completes a value's Limit with its use, read in Redis.
func (a *Admin) limitOf(ctx context.Context, handler, value string, k limitKey, o *engine.LimitOverride, waiting int) (*Limit, error) {
	l := &Limit{Handler: handler, Value: value, By: k.limit.By, Default: k.defaultCaps(), Override: o, Waiting: waiting}
	l.Effective = EffectiveCaps(l.Default, o)
	per := l.Effective.window()
	u, err := a.broker.LimitUse(ctx, handler, value, per)
	if err != nil {
		return nil, translate(err)
	}
	l.Use = LimitUsage{Held: u.Held, Generation: u.Generation}
	if per > 0 {
		l.Use.Starts = &u.Starts
	}
	return l, nil
}

// LimitQuery selects the values Limits lists. The zero value lists the values with an
// override, of every handler with a limit key.
type LimitQuery struct {
	// Handler lists one handler's values; "" every handler the config declares with a
	// limit key, or without a config every handler with an override (and with Waiting,
	// with partitions waiting).
	Handler string
	// Waiting lists also the values with partitions waiting for a permit now (from the
	// live instances' registry entries), override or not.
	Waiting bool
}

// Limits lists values of limit keys, sorted by handler and value (natural order): those
// with an override and, with q.Waiting, those with partitions waiting for a permit. Each
// value costs a round trip or two (its use); the listing reads the overrides and the
// instance registry once.
func (a *Admin) Limits(ctx context.Context, q LimitQuery) ([]Limit, error) {
	waiting, err := a.waitingValues(ctx)
	if err != nil {
		return nil, err
	}
	handlers, err := a.limitHandlers(ctx, q, waiting)
	if err != nil {
		return nil, err
	}
	out := []Limit{}
	for _, h := range handlers {
		k, err := a.handlerLimit(ctx, h)
		if err != nil {
			return nil, err
		}
		overrides, err := a.broker.Limits(ctx, h)
		if err != nil {
			return nil, translate(err)
		}
		values := slices.Collect(maps.Keys(overrides))
		if q.Waiting {
			for id := range waiting {
				if id.handler == h {
					values = append(values, id.value)
				}
			}
		}
		slices.SortFunc(values, NaturalCompare)
		values = slices.Compact(values)
		for _, v := range values {
			var o *engine.LimitOverride
			if ov, ok := overrides[v]; ok {
				o = &ov
			}
			l, err := a.limitOf(ctx, h, v, k, o, waiting[limitValueID{h, v}])
			if err != nil {
				return nil, err
			}
			out = append(out, *l)
		}
	}
	return out, nil
}

// limitHandlers returns the handlers Limits lists, sorted: the one asked for, else the
// config's handlers with a limit key, else those with an override (SCAN) or, with
// q.Waiting, with partitions waiting.
func (a *Admin) limitHandlers(ctx context.Context, q LimitQuery, waiting map[limitValueID]int) ([]string, error) {
	if q.Handler != "" {
		return []string{q.Handler}, nil
	}
	if a.opts.Limits != nil {
		return slices.Sorted(maps.Keys(a.opts.Limits)), nil
	}
	seen := map[string]bool{}
	prefix := a.keys.LimitOverrides("")
	if err := a.scan(ctx, prefix+"*", "hash", func(k string) { seen[strings.TrimPrefix(k, prefix)] = true }); err != nil {
		return nil, err
	}
	if q.Waiting {
		for id := range waiting {
			seen[id.handler] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// limitValueID is one value of one handler's limit key.
type limitValueID struct{ handler, value string }

// waitingValues counts, per value of a limit key, the partitions waiting for a permit
// now, as the live instances' registry entries list them.
func (a *Admin) waitingValues(ctx context.Context) (map[limitValueID]int, error) {
	ins, err := a.Instances(ctx)
	if err != nil {
		return nil, err
	}
	out := map[limitValueID]int{}
	for _, in := range ins {
		if !in.Live {
			continue
		}
		for _, t := range in.Throttled {
			out[limitValueID{t.Group, t.Value}]++
		}
	}
	return out, nil
}

// OverrideText describes an override's caps: "none", "off", "concurrency 5, rate 50/s".
func OverrideText(o *engine.LimitOverride) string {
	switch {
	case o == nil:
		return "none"
	case o.Off:
		return "off"
	}
	c := LimitCaps{Concurrency: o.Concurrency}
	if o.Rate > 0 {
		c.Rate = keyspace.FormatRate(o.Rate, o.Per)
	}
	return CapsText(&c)
}

// CapsText describes caps: "concurrency 2, rate 20/s", "concurrency 2", "no cap" (off,
// or neither capped), "unknown" for nil.
func CapsText(c *LimitCaps) string {
	if c == nil {
		return "unknown"
	}
	var parts []string
	if c.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", c.Concurrency))
	}
	if c.Rate != "" {
		parts = append(parts, "rate "+c.Rate)
	}
	if c.Off || len(parts) == 0 {
		return "no cap"
	}
	return strings.Join(parts, ", ")
}
