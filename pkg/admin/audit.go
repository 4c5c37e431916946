package admin

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Outcomes of an operator action, as recorded in the audit log.
const (
	OutcomeOK         = "ok"          // done
	OutcomeHeadMoved  = "head_moved"  // the head was not the expected entry; nothing changed
	OutcomeNotHalted  = "not_halted"  // the head was not halted and --force was not given
	OutcomeEntryGone  = "entry_gone"  // the entry was trimmed or deleted
	OutcomeNotFound   = "not_found"   // unknown partition, handler or DLQ entry
	OutcomeRefused    = "refused"     // no confirmation possible: not a terminal and no --yes
	OutcomeDeclined   = "declined"    // the operator answered no at the prompt
	OutcomeFailed     = "failed"      // any other error (Redis unreachable, ...)
	OutcomeNotPending = "not_pending" // the head was not delivered yet: nothing in flight to act on
	OutcomeHalted     = "halted"      // pause: the partition is halted; resolve its head first
	OutcomeNotPaused  = "not_paused"  // resume: the partition was not paused
	OutcomeStopped    = "stopped"     // a paced run over many (a redrive) was stopped by the operator; the detail says how far it got
	// OutcomeNotReplicated: done on the primary, but fewer replicas than min_replicas
	// acknowledged it; a failover may lose it.
	OutcomeNotReplicated = "not_replicated"
)

// errOutcome is the outcome of an action that failed with err.
type errOutcome struct {
	err     error
	outcome string
}

// actionOutcomes are the outcomes OutcomeOf names, first match first.
var actionOutcomes = []errOutcome{
	{engine.ErrHeadMoved, OutcomeHeadMoved},
	{engine.ErrNotHalted, OutcomeNotHalted},
	{engine.ErrEntryGone, OutcomeEntryGone},
	{engine.ErrHalted, OutcomeHalted},
	{engine.ErrNotPaused, OutcomeNotPaused},
	{ErrNotFound, OutcomeNotFound},
	{engine.ErrNoOverride, OutcomeNotFound},
	{engine.ErrReplicaShortfall, OutcomeNotReplicated},
}

// outcomeIn returns the outcome of the first entry of table that err is (errors.Is), and
// whether there is one.
func outcomeIn(table []errOutcome, err error) (string, bool) {
	for _, o := range table {
		if errors.Is(err, o.err) {
			return o.outcome, true
		}
	}
	return "", false
}

// OutcomeOf names the outcome of an action's error.
func OutcomeOf(err error) string {
	if err == nil {
		return OutcomeOK
	}
	if o, ok := outcomeIn(actionOutcomes, err); ok {
		return o
	}
	return OutcomeFailed
}

// AuditEntry is one operator action in the audit log (engine.AuditStream).
type AuditEntry struct {
	// ID is the audit stream entry id; Time its Redis time.
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	// User and Host say who acted, from where (the operating-system user); Command what
	// they ran ("head skip").
	User string `json:"user"`
	// RedisUser is the Redis ACL user the action ran as (ACL WHOAMI), "?" when Redis
	// would not say. Record fills it in when empty.
	RedisUser string `json:"redis_user"`
	Host      string `json:"host"`
	Command   string `json:"command"`
	Stream    string `json:"stream"`
	Handler   string `json:"handler"`
	// EntryID is the head entry (or DLQ entry) acted on.
	EntryID string `json:"entry_id"`
	// Value is the value of the handler's limit key a limits command acted on (a
	// tenant); "" for the other commands.
	Value string `json:"value,omitempty"`
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome"`
	// Detail is the error, or what was done beyond the outcome ("force", the replayed
	// entry id).
	Detail string `json:"detail,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// MaxAuditEntries is the approximate cap of the audit stream (XADD MAXLEN ~).
const MaxAuditEntries = 100000

// Record appends an operator action to the audit log. ID and Time are set by Redis.
// An empty RedisUser is filled in with RedisUser.
func (a *Admin) Record(ctx context.Context, e AuditEntry) error {
	if e.RedisUser == "" {
		e.RedisUser = a.RedisUser(ctx)
	}
	values := []any{
		"user", e.User, "redis_user", e.RedisUser, "host", e.Host, "command", e.Command, "stream", e.Stream,
		"handler", e.Handler, "entry", e.EntryID, "outcome", e.Outcome,
		"detail", e.Detail, "reason", e.Reason,
		"client_time_ms", strconv.FormatInt(a.opts.Now().UnixMilli(), 10),
	}
	if e.Value != "" {
		values = append(values, "value", e.Value)
	}
	err := a.rdb.XAdd(ctx, &redis.XAddArgs{Stream: a.keys.AuditStream(), MaxLen: MaxAuditEntries, Approx: true, Values: values}).Err()
	return translate(err)
}

// doneResult is the result of an operator action that is recorded in the audit log.
type doneResult interface {
	// done completes the result of a done action; auditErr says why its audit record was
	// not written, nil when it was.
	done(auditErr error)
}

// audited appends the attempt of an operator action to the audit log: rec, with the
// action's error err (nil when it was done) joined to its detail. It returns the action's
// error, not the audit's, when the action failed; else the result, completed with done.
func audited[R doneResult](ctx context.Context, a *Admin, rec AuditEntry, res R, err error) (R, error) {
	if err != nil {
		rec.Detail = joinDetail(rec.Detail, err.Error())
	}
	auditErr := a.Record(ctx, rec)
	if err != nil {
		var none R
		return none, err
	}
	res.done(auditErr)
	return res, nil
}

// Done ends the result of an operator action that is recorded in the audit log: its
// outcome, and a warning when it was done but its record was not written.
type Done struct {
	// Outcome is OutcomeOK when the action was done (for a group's removal: when the group
	// was retired, or would be for a dry run).
	Outcome string `json:"outcome"`
	// AuditWarning is set when the action was done but its audit record could not be
	// written.
	AuditWarning string `json:"audit_warning,omitempty"`
}

// warnUnaudited sets the warning of a done action when its audit record was not written
// (auditErr); did says what was done.
func (d *Done) warnUnaudited(did string, auditErr error) {
	if auditErr != nil {
		d.AuditWarning = did + " but its audit record was not written: " + auditErr.Error()
	}
}

// joinDetail joins two parts of an audit detail or a warning.
func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Audit lists the recorded actions of the last since (0: all of them), oldest first.
// since is measured back from Redis TIME. See AuditEntries for a limit and filters.
func (a *Admin) Audit(ctx context.Context, since time.Duration) ([]AuditEntry, error) {
	return a.AuditEntries(ctx, AuditQuery{Since: since})
}

// AuditQuery selects audit entries. The zero value selects all of them, oldest first.
type AuditQuery struct {
	// Since keeps the actions of the last Since, measured back from Redis TIME (0: all).
	Since time.Duration
	// Limit keeps the newest Limit matching actions, listed newest first (0: no limit,
	// oldest first).
	Limit int
	// Stream keeps actions on this stream (the partition, or its DLQ for dlq commands).
	Stream string
	// Outcome keeps actions with this outcome (one of the Outcome constants).
	Outcome string
}

// auditPage is how many audit entries one XREVRANGE reads.
const auditPage = 500

// AuditEntries lists the recorded actions the query selects. With a Limit it reads the
// audit stream backwards, a page at a time, and stops once Limit entries matched; without
// one it reads the whole range (the stream is capped at MaxAuditEntries).
func (a *Admin) AuditEntries(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	start := "-"
	if q.Since > 0 {
		now, err := a.rdb.Time(ctx).Result()
		if err != nil {
			return nil, translate(err)
		}
		start = strconv.FormatInt(now.Add(-q.Since).UnixMilli(), 10)
	}
	// A partition is asked for in either form ("order:client-123" or, on Redis Cluster,
	// "order:{client-123}"), and matches its records in either form.
	want, parsed := a.ParseStream(q.Stream)
	sameStream := func(s string) bool {
		if s == q.Stream || strings.TrimSuffix(s, ":dlq") == q.Stream {
			return true
		}
		if parsed != nil || want.Key == "" {
			return false
		}
		got, err := a.ParseStream(s)
		return err == nil && got.Category == want.Category && got.Key == want.Key
	}
	match := func(e AuditEntry) bool {
		if q.Outcome != "" && e.Outcome != q.Outcome {
			return false
		}
		if q.Stream != "" && !sameStream(e.Stream) {
			return false
		}
		return true
	}
	out := []AuditEntry{}
	if q.Limit <= 0 {
		msgs, err := a.rdb.XRange(ctx, a.keys.AuditStream(), start, "+").Result()
		if err != nil {
			return nil, translate(err)
		}
		for _, m := range msgs {
			if e := auditEntryOf(m); match(e) {
				out = append(out, e)
			}
		}
		return out, nil
	}
	end := "+"
	for {
		msgs, err := a.rdb.XRevRangeN(ctx, a.keys.AuditStream(), end, start, auditPage).Result()
		if err != nil {
			return nil, translate(err)
		}
		for _, m := range msgs {
			if e := auditEntryOf(m); match(e) {
				out = append(out, e)
				if len(out) == q.Limit {
					return out, nil
				}
			}
		}
		if len(msgs) < auditPage {
			return out, nil
		}
		end = "(" + msgs[len(msgs)-1].ID
	}
}

func auditEntryOf(m redis.XMessage) AuditEntry {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	return AuditEntry{
		ID: m.ID, Time: time.UnixMilli(int64(keyspace.ParseStreamID(m.ID).MS)).UTC(),
		User: str("user"), RedisUser: str("redis_user"), Host: str("host"), Command: str("command"), Stream: str("stream"),
		Handler: str("handler"), EntryID: str("entry"), Value: str("value"), Outcome: str("outcome"),
		Detail: str("detail"), Reason: str("reason"),
	}
}

// RedisUser returns the Redis ACL user this Admin's connections authenticate as (ACL
// WHOAMI), asked once per Admin: every connection of one client authenticates alike.
// It returns "?" when Redis does not say (a user without +acl|whoami, an old Redis), and
// does not cache that, so a later call may still learn it.
func (a *Admin) RedisUser(ctx context.Context) string {
	a.whoMu.Lock()
	defer a.whoMu.Unlock()
	if a.whoami != "" {
		return a.whoami
	}
	name, err := a.rdb.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil || name == "" {
		return "?"
	}
	a.whoami = name
	return name
}
