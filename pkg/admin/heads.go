package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqctl/seqctl/pkg/engine"
)

// The retry of many halted heads ('seqctl head retry --category|--key'): the caller
// lists the halted partitions (ListPartitions with StateHalted) and retries them one at a
// time with HeadRetries.Retry, at its own pace. Each partition is retried on its own and
// audited on its own: a partition skipped or refused does not stop the others; Redis
// becoming unavailable, or the caller's context ending, does.

// HeadAPI is what a retry of many heads needs of the operator API. *Admin implements it.
type HeadAPI interface {
	Head(ctx context.Context, stream, handler string) (*Head, error)
	Act(ctx context.Context, a Action) (*ActionResult, error)
	Record(ctx context.Context, e AuditEntry) error
}

var _ HeadAPI = (*Admin)(nil)

// HeadRetry is what became of one partition of a retry of many heads: the result of its
// retry (for a partition not retried: its outcome), and why it was skipped or refused.
type HeadRetry struct {
	*ActionResult
	// Skipped says why the partition was not retried although nothing went wrong: its
	// head was no longer halted when its turn came.
	Skipped string `json:"skipped,omitempty"`
	// Error says why the partition was refused; Err is that error.
	Error string `json:"error,omitempty"`
	Err   error  `json:"-"`
}

// HeadRetries retries halted heads one at a time, as Actor and for Reason, and counts
// what became of them.
type HeadRetries struct {
	API    HeadAPI
	Actor  Actor
	Reason string
	// Retried, Skipped and Refused count the partitions retried, skipped (no longer
	// halted when their turn came) and refused.
	Retried, Skipped, Refused int
}

// Retry reads the head of stream for handler and retries it when it is still halted.
// A partition that is no longer halted (caught up, its head delivered or moved on) is
// skipped; any other failure refuses it. Either is recorded in the audit log (Act
// records what it refused itself); a record that cannot be written is an AuditWarning.
// Retry returns an error only when that stops the whole retry: Redis is unavailable,
// or ctx ended; a partition skipped or refused is in the HeadRetry.
func (r *HeadRetries) Retry(ctx context.Context, stream, handler string) (HeadRetry, error) {
	res := &ActionResult{Action: ActionRetry, Stream: stream, Handler: handler}
	rep := HeadRetry{ActionResult: res}
	head, err := r.API.Head(ctx, stream, handler)
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf) && nf.What == "head":
		return r.skip(ctx, rep, "", "caught up: it has no head any more"), nil
	case err == nil && head.Status != HeadHalted:
		res.EntryID = head.ID
		return r.skip(ctx, rep, head.ID, fmt.Sprintf("its head %s is %s", head.ID, head.Status)), nil
	case err == nil:
		res.EntryID = head.ID
		var done *ActionResult
		done, err = r.API.Act(ctx, Action{Kind: ActionRetry, Stream: stream, Handler: handler,
			ExpectID: head.ID, Reason: r.Reason, Actor: r.Actor})
		if err == nil {
			r.Retried++
			rep.ActionResult = done
			return rep, nil
		}
		if errors.Is(err, engine.ErrNotHalted) || errors.Is(err, engine.ErrHeadMoved) {
			// Act recorded it.
			r.Skipped++
			res.Outcome, rep.Skipped = OutcomeOf(err), "no longer halted: "+err.Error()
			return rep, nil
		}
	}
	if StopsAll(err) {
		return rep, err
	}
	res.Outcome, rep.Error, rep.Err = OutcomeOf(err), err.Error(), err
	if head == nil {
		r.record(ctx, rep, "", res.Outcome, err.Error()) // Act did not run: nothing recorded it
	}
	r.Refused++
	return rep, nil
}

// skip reports the partition of rep as no longer halted (why) and records that it was
// not retried.
func (r *HeadRetries) skip(ctx context.Context, rep HeadRetry, entryID, why string) HeadRetry {
	r.Skipped++
	rep.Outcome, rep.Skipped = OutcomeNotHalted, "no longer halted: "+why
	r.record(ctx, rep, entryID, OutcomeNotHalted, rep.Skipped+"; skipped")
	return rep
}

// record writes the audit record of the partition of rep, not retried, with outcome and
// detail; when it cannot, rep's AuditWarning says so.
func (r *HeadRetries) record(ctx context.Context, rep HeadRetry, entryID, outcome, detail string) {
	rec := r.Actor.Entry()
	rec.Stream, rec.Handler, rec.EntryID, rec.Reason = rep.Stream, rep.Handler, entryID, r.Reason
	rec.Outcome, rec.Detail = outcome, detail
	if err := r.API.Record(ctx, rec); err != nil {
		rep.AuditWarning = fmt.Sprintf("not recorded in the audit log: %v", err)
	}
}

// StopsAll says an error of one partition stops an action over many (a retry of many
// heads, a pause of a selection): Redis is unavailable, or the caller's context ended.
// Any other error is that partition's refusal, and the action goes on with the next.
func StopsAll(err error) bool {
	return errors.Is(err, engine.ErrRedisUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
