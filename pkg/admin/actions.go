package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// ActionKind is an operator action on a partition's head.
type ActionKind string

// The head actions.
const (
	// ActionSkip acknowledges the head without handling it.
	ActionSkip ActionKind = "skip"
	// ActionDLQ copies the head with its error metadata to {category}:{key}:dlq and
	// acknowledges it, in one script.
	ActionDLQ ActionKind = "dlq"
	// ActionRetry clears the halt record so the owner tries the head once more now.
	ActionRetry ActionKind = "retry"
)

// Actor is who performs an action, for the audit log.
type Actor struct {
	User    string // operating-system user
	Host    string // host name
	Command string // e.g. "head skip"
}

// Entry starts the audit entry of an action by a: who acted, from where, with which
// command. The caller fills in what was acted on and the outcome.
func (a Actor) Entry() AuditEntry {
	return AuditEntry{User: a.User, Host: a.Host, Command: a.Command}
}

// Action is a compare-and-act on a partition's head.
type Action struct {
	Kind    ActionKind
	Stream  string // the partition, e.g. "order:client-123"
	Handler string
	// ExpectID is the head entry the operator inspected; nothing changes when the head
	// is another entry now (engine.HeadMovedError). Required.
	ExpectID string
	// Force acts on a head that is not halted (skip and dlq only).
	Force bool
	// Reason is free text for the audit log and, for ActionDLQ, the DLQ entry.
	Reason string
	Actor  Actor
}

// ActionResult says what an action did.
type ActionResult struct {
	Action  ActionKind `json:"action"`
	Stream  string     `json:"stream"`
	Handler string     `json:"handler"`
	EntryID string     `json:"entry_id"`
	// DLQStream is where ActionDLQ copied the entry.
	DLQStream string `json:"dlq_stream,omitempty"`
	Done
}

// Act performs a skip, move-to-DLQ or retry as one compare-and-act script call and
// appends the attempt to the audit log with its outcome, whether it was done or not.
//
// Errors: engine.ErrHeadMoved (a *engine.HeadMovedError) when the head is not
// ExpectID; engine.ErrNotHalted when the head is not halted (and Force is not set, or
// the action is a retry); engine.ErrEntryGone when the entry was trimmed; ErrNotFound
// for an unknown handler; a *keyspace.StreamIDError when ExpectID is not the id of one
// entry. Nothing is changed in those cases.
func (a *Admin) Act(ctx context.Context, act Action) (*ActionResult, error) {
	res := &ActionResult{Action: act.Kind, Stream: act.Stream, Handler: act.Handler, EntryID: act.ExpectID}
	err := a.act(ctx, act, res)
	res.Outcome = OutcomeOf(err)
	rec := act.Actor.Entry()
	rec.Stream, rec.Handler, rec.EntryID = res.Stream, act.Handler, act.ExpectID
	rec.Outcome, rec.Reason = res.Outcome, act.Reason
	if act.Force {
		rec.Detail = "force"
	}
	return audited(ctx, a, rec, res, err)
}

func (r *ActionResult) done(auditErr error) {
	r.Done.warnUnaudited("the action was done", auditErr)
}

func (a *Admin) act(ctx context.Context, act Action, res *ActionResult) error {
	if act.ExpectID == "" {
		return errors.New("admin: the expected head entry id is required")
	}
	if _, err := keyspace.ParseEntryID(act.ExpectID); err != nil {
		return err // a bare millisecond would never equal the head's id: not a head that moved
	}
	p, err := a.ParseStream(act.Stream)
	if err != nil {
		return err
	}
	res.Stream = p.Stream()
	ref, err := a.ref(ctx, p, act.Handler)
	if err != nil {
		return err
	}
	switch act.Kind {
	case ActionSkip:
		err = a.broker.Skip(ctx, ref, act.ExpectID, act.Force)
	case ActionDLQ:
		if p.Key != "" {
			res.DLQStream = p.dlqStream()
		}
		if h, herr := a.broker.Halt(ctx, ref); herr == nil && h != nil && h.Stream != "" {
			if q, perr := a.ParseStream(h.Stream); perr == nil {
				res.DLQStream = q.dlqStream() // a process manager's other category
			}
		}
		err = a.broker.MoveToDLQ(ctx, ref, act.ExpectID, act.Force,
			"moved_by", act.Actor.by(), "moved_at", a.opts.Now().UTC().Format(time.RFC3339), "reason", act.Reason)
	case ActionRetry:
		err = a.broker.Retry(ctx, ref, act.ExpectID)
	default:
		return fmt.Errorf("admin: unknown action %q", act.Kind)
	}
	return translate(err)
}
