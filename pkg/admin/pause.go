package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
)

// The pause actions, as PauseResult.Action and in the audit log's command.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
)

// PauseRequest pauses or resumes one partition for one handler.
type PauseRequest struct {
	Stream  string // the partition, e.g. "order:client-123"
	Handler string
	// Reason is why, for the pause record and the audit log; required to pause.
	Reason string
	// For ends the pause by itself after this long (a Redis expiry); 0 pauses until a
	// resume.
	For   time.Duration
	Actor Actor
}

// PauseResult says what a pause or resume did.
type PauseResult struct {
	Action  string `json:"action"` // ActionPause or ActionResume
	Stream  string `json:"stream"`
	Handler string `json:"handler"`
	// Pause is the record written by a pause; nil for a resume.
	Pause *engine.PauseRecord `json:"pause,omitempty"`
	// Replaced is set when a pause replaced the record of a partition paused already.
	Replaced bool `json:"replaced,omitempty"`
	Done
}

func (r *PauseResult) done(auditErr error) {
	r.Done.warnUnaudited("the "+r.Action+" was done", auditErr)
}

// Pause pauses a partition for a handler: its owner finishes the event in flight and
// starts no other until Resume, or until req.For passes. No lease is needed, and other
// keys and other handlers of the key go on. The attempt is in the audit log with its
// outcome and reason, whether it was done or not.
//
// Errors: engine.ErrHalted when the partition is halted for the handler (resolve its
// head first); ErrNotFound for an unknown handler; engine.ErrInvalidKey for a bad key.
func (a *Admin) Pause(ctx context.Context, req PauseRequest) (*PauseResult, error) {
	res := &PauseResult{Action: ActionPause, Stream: req.Stream, Handler: req.Handler}
	err := a.pause(ctx, req, res)
	rec := a.pauseAudit(req, res, err)
	if err == nil {
		rec.Detail = "until resumed"
		if !res.Pause.Until.IsZero() {
			rec.Detail = fmt.Sprintf("for %s, until %s", req.For, res.Pause.Until.Format(time.RFC3339))
		}
		if res.Replaced {
			rec.Detail += "; replaced the previous pause"
		}
	}
	return audited(ctx, a, rec, res, err)
}

// Resume ends a partition's pause for a handler; its owner starts again at once.
// Errors: engine.ErrNotPaused when it is not paused; ErrNotFound for an unknown handler.
func (a *Admin) Resume(ctx context.Context, req PauseRequest) (*PauseResult, error) {
	res := &PauseResult{Action: ActionResume, Stream: req.Stream, Handler: req.Handler}
	err := a.resume(ctx, req, res)
	return audited(ctx, a, a.pauseAudit(req, res, err), res, err)
}

// pauseAudit starts the audit record of a pause or resume and sets the result's outcome.
func (a *Admin) pauseAudit(req PauseRequest, res *PauseResult, err error) AuditEntry {
	res.Outcome = OutcomeOf(err)
	rec := req.Actor.Entry()
	rec.Stream, rec.Handler, rec.Outcome, rec.Reason = res.Stream, req.Handler, res.Outcome, req.Reason
	return rec
}

// pauseRef checks the request's partition and handler.
func (a *Admin) pauseRef(ctx context.Context, req PauseRequest, res *PauseResult) (engine.HeadRef, error) {
	p, err := a.ParseStream(req.Stream)
	if err != nil {
		return engine.HeadRef{}, err
	}
	res.Stream = p.Stream()
	return a.ref(ctx, p, req.Handler)
}

func (a *Admin) pause(ctx context.Context, req PauseRequest, res *PauseResult) error {
	if req.Reason == "" {
		return errors.New("admin: a reason is required to pause a partition (it is shown to every operator and kept in the audit log)")
	}
	if req.For < 0 || (req.For > 0 && req.For < time.Millisecond) {
		return fmt.Errorf("admin: the pause duration %s is not 0 (until resumed) or at least 1ms", req.For)
	}
	ref, err := a.pauseRef(ctx, req, res)
	if err != nil {
		return err
	}
	rec, replaced, err := a.broker.Pause(ctx, ref, engine.PauseRecord{Reason: req.Reason, By: req.Actor.by()}, req.For)
	if err == nil || errors.Is(err, engine.ErrReplicaShortfall) {
		res.Pause, res.Replaced = &rec, replaced
	}
	return translate(err)
}

func (a *Admin) resume(ctx context.Context, req PauseRequest, res *PauseResult) error {
	ref, err := a.pauseRef(ctx, req, res)
	if err != nil {
		return err
	}
	return translate(a.broker.Resume(ctx, ref))
}

// by names the actor in records others read: "user@host".
func (a Actor) by() string {
	if a.Host == "" {
		return a.User
	}
	return a.User + "@" + a.Host
}

// PauseOf reads the pause record of a partition for a handler: nil when it is not
// paused. 'seqctl partitions inspect' shows it. Errors: ErrNotFound for an unknown
// handler, ErrInvalidStream for a bad partition name.
func (a *Admin) PauseOf(ctx context.Context, stream, handler string) (*engine.PauseRecord, error) {
	ref, err := a.pauseRef(ctx, PauseRequest{Stream: stream, Handler: handler}, &PauseResult{})
	if err != nil {
		return nil, err
	}
	rec, err := a.broker.Paused(ctx, ref)
	return rec, translate(err)
}
