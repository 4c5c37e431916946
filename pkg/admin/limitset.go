package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The writes of the limit keys: an operator's override of one value, set and cleared,
// each attempt audited with the value, the old and new caps and the reason (limits.go
// holds the reads).

// The limit actions, as LimitResult.Action; the audit log's command is "limits set" or
// "limits clear".
const (
	ActionLimitSet   = "set"
	ActionLimitClear = "clear"
)

// LimitRequest sets or clears the override of one value of a handler's limit key.
type LimitRequest struct {
	Handler string
	Value   string
	// Concurrency, Rate and Per are the override's caps: a zero keeps the domain's (Per
	// defaults to a second); Off takes every cap off the value instead. A set needs one
	// of the three; a clear ignores them.
	Concurrency, Rate int
	Per               time.Duration
	Off               bool
	// Reason is why, for the override record and the audit log; required to set.
	Reason string
	Actor  Actor
}

// override is the record a set writes (Since is set from Redis).
func (r LimitRequest) override() engine.LimitOverride {
	o := engine.LimitOverride{Concurrency: r.Concurrency, Rate: r.Rate, Per: r.Per, Off: r.Off, Reason: r.Reason, By: r.Actor.by()}
	if o.Rate > 0 && o.Per <= 0 {
		o.Per = time.Second
	}
	return o
}

// check refuses a set that would write nothing meaningful.
func (r LimitRequest) check() error {
	switch {
	case strings.TrimSpace(r.Reason) == "":
		return errors.New("admin: a reason is required to override a limit (it is kept with the override and in the audit log)")
	case r.Concurrency < 0 || r.Rate < 0 || r.Per < 0:
		return errors.New("admin: a limit override cannot be negative")
	case r.Off && (r.Concurrency > 0 || r.Rate > 0):
		return errors.New("admin: a limit override is off (no cap at all) or sets caps, not both")
	case !r.Off && r.Concurrency == 0 && r.Rate == 0:
		return errors.New("admin: a limit override sets a concurrency, a rate, or off")
	}
	if r.Rate > 0 && r.Per > 0 {
		if err := keyspace.ValidateRateWindow(r.Per); err != nil {
			return fmt.Errorf("admin: a limit override's rate: %w (e.g. 1s, 1500ms)", err)
		}
	}
	return nil
}

// LimitResult says what a set or clear did.
type LimitResult struct {
	Action  string `json:"action"` // ActionLimitSet or ActionLimitClear
	Handler string `json:"handler"`
	Value   string `json:"value"`
	// Old is the override the action replaced or removed; nil when the value had none.
	Old *engine.LimitOverride `json:"old"`
	// New is the override a set wrote (Since by the Redis clock); nil for a clear.
	New *engine.LimitOverride `json:"new"`
	// Default is the domain's caps, nil without a config; Before and After the caps that
	// applied to the value before and apply after (EffectiveCaps), nil when they cannot
	// be told without a config.
	Default *LimitCaps `json:"default"`
	Before  *LimitCaps `json:"before"`
	After   *LimitCaps `json:"after"`
	Done
}

func (r *LimitResult) done(auditErr error) {
	r.Done.warnUnaudited("the limit "+r.Action+" was done", auditErr)
}

// SetLimit overrides a handler's limit for one value, durably, until ClearLimit: its
// caps replace the domain's for that value as a whole (a set replaces the value's
// previous override). Every running instance applies it at once. The attempt is in the
// audit log with the old and new caps and the reason, whether it was done or not.
//
// Errors: a *NoLimitError for a handler the config declares without limit_by;
// ErrNotFound for an unknown handler; engine.ErrInvalidKey for a bad value;
// engine.ErrReplicaShortfall when it was done on the primary only.
func (a *Admin) SetLimit(ctx context.Context, req LimitRequest) (*LimitResult, error) {
	res := &LimitResult{Action: ActionLimitSet, Handler: req.Handler, Value: req.Value}
	err := a.setLimit(ctx, req, res)
	return audited(ctx, a, a.limitAudit(req, res, err), res, err)
}

// ClearLimit removes a value's override: the domain's caps apply to it again, at once in
// every running instance. Audited like SetLimit. Errors: engine.ErrNoOverride when the
// value has no override; the others as SetLimit's.
func (a *Admin) ClearLimit(ctx context.Context, req LimitRequest) (*LimitResult, error) {
	res := &LimitResult{Action: ActionLimitClear, Handler: req.Handler, Value: req.Value}
	err := a.clearLimit(ctx, req, res)
	return audited(ctx, a, a.limitAudit(req, res, err), res, err)
}

// limitPlan checks the handler and the value of a request and reads the value's override
// into res (Old, Default, Before).
func (a *Admin) limitPlan(ctx context.Context, req LimitRequest, res *LimitResult) error {
	k, err := a.handlerLimit(ctx, req.Handler)
	if err != nil {
		return err
	}
	if err := checkLimitValue(req.Value); err != nil {
		return err
	}
	if res.Old, err = a.override(ctx, req.Handler, req.Value); err != nil {
		return err
	}
	res.Default = k.defaultCaps()
	res.Before = EffectiveCaps(res.Default, res.Old)
	return nil
}

func (a *Admin) setLimit(ctx context.Context, req LimitRequest, res *LimitResult) error {
	if err := req.check(); err != nil {
		return err
	}
	if err := a.limitPlan(ctx, req, res); err != nil {
		return err
	}
	o, err := a.broker.SetLimit(ctx, req.Handler, req.Value, req.override())
	if err == nil || errors.Is(err, engine.ErrReplicaShortfall) {
		res.New = &o
		res.After = EffectiveCaps(res.Default, res.New)
	}
	return translate(err)
}

func (a *Admin) clearLimit(ctx context.Context, req LimitRequest, res *LimitResult) error {
	if err := a.limitPlan(ctx, req, res); err != nil {
		return err
	}
	err := a.broker.ClearLimit(ctx, req.Handler, req.Value)
	if err == nil || errors.Is(err, engine.ErrReplicaShortfall) {
		res.After = EffectiveCaps(res.Default, nil)
	}
	return translate(err)
}

// limitAudit starts the audit record of a set or clear, with the old and new caps when
// it was done, and sets the result's outcome.
func (a *Admin) limitAudit(req LimitRequest, res *LimitResult, err error) AuditEntry {
	res.Outcome = OutcomeOf(err)
	rec := req.Actor.Entry()
	rec.Handler, rec.Value, rec.Outcome, rec.Reason = req.Handler, req.Value, res.Outcome, req.Reason
	if err == nil || errors.Is(err, engine.ErrReplicaShortfall) {
		rec.Detail = LimitChange(res)
	}
	return rec
}

// LimitChange says on one line what a set or clear changed: the override, and the caps
// when they are known ("override none -> concurrency 5; caps concurrency 2, rate 20/s ->
// concurrency 5, rate 20/s").
func LimitChange(res *LimitResult) string {
	s := "override " + OverrideText(res.Old) + " -> " + OverrideText(res.New)
	if res.Before != nil && res.After != nil {
		s += "; caps " + CapsText(res.Before) + " -> " + CapsText(res.After)
	}
	return s
}
