package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// DLQEntry is one entry of a partition's dead-letter stream: the original envelope plus
// the halt metadata and who moved it (written by the engine's move-to-DLQ script).
type DLQEntry struct {
	// ID is the entry id in the DLQ stream.
	ID        string `json:"id"`
	DLQStream string `json:"dlq_stream"`
	// OriginalID is the entry id the event had on its partition lane.
	OriginalID string `json:"original_id"`
	// Handler is the consumer group that halted on it.
	Handler string `json:"handler"`
	// Lane is the lane stream it was on ("" when it was moved without a halt record).
	Lane        string     `json:"lane"`
	Attempts    int        `json:"attempts"`
	Error       string     `json:"error"`
	HaltedSince *time.Time `json:"halted_since"`
	MovedBy     string     `json:"moved_by"`
	MovedAt     *time.Time `json:"moved_at"`
	Reason      string     `json:"reason"`
	Envelope    Envelope   `json:"envelope"`
}

// dlqMetaField reports the fields the move-to-DLQ script adds to the envelope.
func dlqMetaField(k string) bool {
	switch k {
	case "original_id", "group", "moved_by", "moved_at", "reason":
		return true
	}
	return strings.HasPrefix(k, "halt_")
}

func dlqEntryOf(stream string, m redis.XMessage) DLQEntry {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	e := DLQEntry{
		ID: m.ID, DLQStream: stream, OriginalID: str("original_id"), Handler: str("group"),
		Lane: str("halt_stream"), Error: str("halt_error"), MovedBy: str("moved_by"), Reason: str("reason"),
		Envelope: envelopeOf(m, dlqMetaField),
	}
	e.Attempts, _ = strconv.Atoi(str("halt_attempts"))
	if ms, err := strconv.ParseInt(str("halt_since_ms"), 10, 64); err == nil {
		t := time.UnixMilli(ms).UTC()
		e.HaltedSince = &t
	}
	if t, err := time.Parse(time.RFC3339, str("moved_at")); err == nil {
		t = t.UTC()
		e.MovedAt = &t
	}
	return e
}

// parseDLQPartition parses the name of a partition whose DLQ is asked for: a category
// stream has none.
func (a *Admin) parseDLQPartition(stream string) (PartitionName, error) {
	p, err := a.ParseStream(stream)
	if err != nil {
		return PartitionName{}, err
	}
	if p.Key == "" {
		return PartitionName{}, fmt.Errorf("%w %q: only partitions ({category}:{key}) have a DLQ", ErrInvalidStream, stream)
	}
	return p, nil
}

// DLQ lists a partition's dead-letter entries, oldest first (empty when it has none).
func (a *Admin) DLQ(ctx context.Context, stream string) ([]DLQEntry, error) {
	p, err := a.parseDLQPartition(stream)
	if err != nil {
		return nil, err
	}
	dlq := p.dlqStream()
	msgs, err := a.rdb.XRange(ctx, dlq, "-", "+").Result()
	if err != nil {
		return nil, translate(err)
	}
	out := make([]DLQEntry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, dlqEntryOf(dlq, m))
	}
	return out, nil
}

// ReplayPlan is what a replay would do.
type ReplayPlan struct {
	Entry DLQEntry `json:"entry"`
	// Stream is the lane the event is re-published to (at its tail).
	Stream string `json:"stream"`
}

// PlanReplay finds a DLQ entry and the lane it would be re-published to: the lane it
// was on when it halted (its halt record's stream); for an entry moved without a halt
// record, the backfill lane when lanes are on and its priority is below the threshold,
// else the primary lane. It is a *NotFoundError when the entry is not in the DLQ, a
// *keyspace.StreamIDError when id is not the id of one entry (a bare millisecond names
// every entry of it: Redis would read it as the first to publish and as {ms}-0 to delete).
func (a *Admin) PlanReplay(ctx context.Context, stream, id string) (*ReplayPlan, error) {
	p, err := a.parseDLQPartition(stream)
	if err != nil {
		return nil, err
	}
	if _, err := keyspace.ParseEntryID(id); err != nil {
		return nil, err
	}
	dlq := p.dlqStream()
	msgs, err := a.rdb.XRange(ctx, dlq, id, id).Result()
	if err != nil {
		return nil, translate(err)
	}
	if len(msgs) == 0 {
		return nil, &NotFoundError{What: "DLQ entry", Name: id + " in " + dlq, Hint: "list the entries with 'seqctl dlq list " + p.Stream() + "'"}
	}
	e := dlqEntryOf(dlq, msgs[0])
	plan := &ReplayPlan{Entry: e, Stream: p.Stream()}
	backfill := p.laneStream(a.opts.BackfillSuffix)
	switch {
	case e.Lane == p.Stream() || e.Lane == backfill:
		plan.Stream = e.Lane
	case e.Lane == "" && a.opts.Lanes == LanesOn && e.Envelope.Priority < a.opts.LanesThreshold:
		plan.Stream = backfill
	}
	return plan, nil
}

// ReplayResult says what a replay did.
type ReplayResult struct {
	DLQID     string `json:"dlq_id"`
	DLQStream string `json:"dlq_stream"`
	// EventID is the event id, kept from the original envelope so idempotent handlers
	// recognise the event.
	EventID string `json:"event_id"`
	// Stream and EntryID are where the event was re-published.
	Stream  string `json:"stream"`
	EntryID string `json:"entry_id"`
	// Removed says the DLQ entry was deleted after the publish.
	Removed bool   `json:"removed"`
	Outcome string `json:"outcome"`
	// Warning says what went wrong after the publish (the DLQ entry could not be removed
	// or the audit record not written).
	Warning string `json:"warning,omitempty"`
}

func (r *ReplayResult) audit() (stream, detail string) {
	detail = "replayed as " + r.EntryID
	if !r.Removed {
		detail += "; " + r.Warning
	}
	return r.Stream, detail
}

func (r *ReplayResult) done(auditErr error) { dlqDone(&r.Outcome, &r.Warning, auditErr) }

// Replay re-publishes a DLQ entry's event at the tail of its partition (see PlanReplay
// for the lane), with its original event id, then removes the entry from the DLQ. The
// event's position changes: it now comes after everything published before the replay,
// and every consumer group of the category receives it again. The attempt is recorded
// in the audit log with its outcome.
//
// The publish and the removal are one script: a replay publishes the event once, even
// when two operators replay the same entry at the same time.
func (a *Admin) Replay(ctx context.Context, stream, id string, actor Actor) (*ReplayResult, error) {
	res, err := a.replay(ctx, stream, id)
	return auditedDLQ(ctx, a, actor, stream, id, res, err)
}

// dlqResult is the result of a DLQ action.
type dlqResult interface {
	*ReplayResult | *PurgeResult
	doneResult
	// audit says what the action did, for its audit record: the partition and the detail.
	audit() (stream, detail string)
}

// auditedDLQ records the attempt of a DLQ action on entry id of stream's DLQ (see
// audited). The record names the partition and what was done when the action has a
// result, else the stream as given.
func auditedDLQ[R dlqResult](ctx context.Context, a *Admin, actor Actor, stream, id string, res R, err error) (R, error) {
	rec := actor.Entry()
	rec.Stream, rec.EntryID, rec.Outcome = stream, id, OutcomeOf(err)
	if res != nil {
		rec.Stream, rec.Detail = res.audit()
	}
	return audited(ctx, a, rec, res, err)
}

// dlqDone completes the result of a done DLQ action: its outcome, and its warning when the
// audit record was not written.
func dlqDone(outcome, warning *string, auditErr error) {
	*outcome = OutcomeOK
	if auditErr != nil {
		*warning = joinDetail(*warning, "the audit record was not written: "+auditErr.Error())
	}
}

func (a *Admin) replay(ctx context.Context, stream, id string) (*ReplayResult, error) {
	plan, err := a.PlanReplay(ctx, stream, id)
	if err != nil {
		return nil, err
	}
	p, _ := a.ParseStream(stream)
	msgs, err := a.rdb.XRange(ctx, plan.Entry.DLQStream, id, id).Result()
	if err != nil {
		return nil, translate(err)
	}
	if len(msgs) == 0 {
		return nil, &NotFoundError{What: "DLQ entry", Name: id + " in " + plan.Entry.DLQStream}
	}
	ev, err := engine.EventFromMessage(msgs[0])
	if err != nil {
		return nil, fmt.Errorf("admin: cannot replay DLQ entry %s: %w", id, err)
	}
	route := engine.Route{Category: p.Category, Key: p.Key, Stream: plan.Stream, Index: a.keys.PartitionIndex(p.Category),
		Backfill: plan.Stream != p.Stream(), Suffix: a.opts.BackfillSuffix}
	// One script publishes and removes the DLQ entry, so a concurrent or repeated replay
	// of the same entry publishes it once.
	pub, err := a.broker.ReplayDLQ(ctx, plan.Entry.DLQStream, id, route)
	if errors.Is(err, engine.ErrEntryGone) {
		return nil, &NotFoundError{What: "DLQ entry", Name: id + " in " + plan.Entry.DLQStream, Hint: "it was replayed or deleted meanwhile"}
	}
	if err != nil && !errors.Is(err, engine.ErrReplicaShortfall) {
		return nil, translate(err)
	}
	// On a replica shortfall the replay is done on the primary: say where it went, as the
	// broker placed it (the stream it appended to, not the plan).
	res := &ReplayResult{DLQID: id, DLQStream: plan.Entry.DLQStream, EventID: ev.ID, Stream: pub.Stream, EntryID: pub.EntryID, Removed: true}
	return res, err
}
