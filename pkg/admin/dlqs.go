package admin

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// DLQSummary is one partition's dead-letter stream: a row of 'seqctl dlq list' without a
// stream.
type DLQSummary struct {
	// Stream is the partition, {category}:{key}; DLQStream its DLQ, {category}:{key}:dlq.
	Stream    string `json:"stream"`
	DLQStream string `json:"dlq_stream"`
	Category  string `json:"category"`
	Key       string `json:"key"`
	// Length is the number of entries.
	Length int64 `json:"length"`
	// OldestID and NewestID are the first and last entry ids; OldestAgeMS the age of the
	// oldest entry by Redis TIME.
	OldestID    string `json:"oldest_id"`
	NewestID    string `json:"newest_id"`
	OldestAgeMS int64  `json:"oldest_age_ms"`
}

// DLQs lists every non-empty partition DLQ, found with SCAN (a DLQ outlives its
// partition's index entry when the partition is reaped), sorted by stream in natural
// order. It costs the SCAN and one pipelined round trip.
func (a *Admin) DLQs(ctx context.Context) ([]DLQSummary, error) {
	var names []string
	seen := map[string]bool{}
	err := a.scan(ctx, "*:dlq", "stream", func(k string) {
		if p, err := a.ParseStream(k); err == nil && p.Key != "" && p.dlqStream() == k && !seen[k] {
			seen[k] = true
			names = append(names, k)
		}
	})
	if err != nil {
		return nil, err
	}
	out := []DLQSummary{}
	if len(names) == 0 {
		return out, nil
	}
	pipe := a.rdb.Pipeline()
	type cmds struct {
		n           *redis.IntCmd
		first, last *redis.XMessageSliceCmd
	}
	cs := make([]cmds, len(names))
	for i, n := range names {
		cs[i] = cmds{pipe.XLen(ctx, n), pipe.XRangeN(ctx, n, "-", "+", 1), pipe.XRevRangeN(ctx, n, "+", "-", 1)}
	}
	now := pipe.Time(ctx)
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	for i, n := range names {
		c := cs[i]
		if c.n.Val() == 0 {
			continue
		}
		p, _ := a.ParseStream(n)
		s := DLQSummary{Stream: p.Stream(), DLQStream: n, Category: p.Category, Key: p.Key, Length: c.n.Val()}
		if f := c.first.Val(); len(f) > 0 {
			s.OldestID = f[0].ID
			s.OldestAgeMS = max(now.Val().UnixMilli()-int64(keyspace.ParseStreamID(s.OldestID).MS), 0)
		}
		if l := c.last.Val(); len(l) > 0 {
			s.NewestID = l[0].ID
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y DLQSummary) int { return NaturalCompare(x.Stream, y.Stream) })
	return out, nil
}

// PurgeResult says what a purge did.
type PurgeResult struct {
	Stream    string `json:"stream"`
	DLQStream string `json:"dlq_stream"`
	// Through is the last entry id the purge was allowed to remove.
	Through string `json:"through"`
	// Removed is the number of entries deleted; Left the entries still in the DLQ (added
	// after the operator looked).
	Removed int64  `json:"removed"`
	Left    int64  `json:"left"`
	Outcome string `json:"outcome"`
	// Warning says the audit record was not written.
	Warning string `json:"warning,omitempty"`
}

// audit names the partition, as 'dlq replay' records it.
func (r *PurgeResult) audit() (stream, detail string) {
	return r.Stream, fmt.Sprintf("removed %d entries of %s through %s; %d left", r.Removed, r.DLQStream, r.Through, r.Left)
}

func (r *PurgeResult) done(auditErr error) { dlqDone(&r.Outcome, &r.Warning, auditErr) }

// PurgeDLQ deletes the entries of a partition's DLQ up to and including through (the
// newest entry the operator saw), and keeps any entry added after it: a compare-and-act
// done by Redis (XTRIM MINID, exact), so an entry moved to the DLQ while the operator was
// deciding is never lost unseen. The attempt is recorded in the audit log.
func (a *Admin) PurgeDLQ(ctx context.Context, stream, through string, actor Actor) (*PurgeResult, error) {
	res, err := a.purge(ctx, stream, through)
	return auditedDLQ(ctx, a, actor, stream, through, res, err)
}

func (a *Admin) purge(ctx context.Context, stream, through string) (*PurgeResult, error) {
	p, err := a.parseDLQPartition(stream)
	if err != nil {
		return nil, err
	}
	minID, err := nextID(through)
	if err != nil {
		return nil, err
	}
	dlq := p.dlqStream()
	pipe := a.rdb.TxPipeline()
	var removed *redis.IntCmd
	if minID == "" { // through the largest id there is: every entry
		removed = pipe.XTrimMaxLen(ctx, dlq, 0)
	} else {
		removed = pipe.XTrimMinID(ctx, dlq, minID)
	}
	left := pipe.XLen(ctx, dlq)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, translate(err)
	}
	return &PurgeResult{Stream: p.Stream(), DLQStream: dlq, Through: through, Removed: removed.Val(), Left: left.Val()}, nil
}

// nextID returns the smallest stream id after through, the end of a range ("5-3" ->
// "5-4"; "5", every entry of millisecond 5, -> "6-0"); "" when nothing can follow it.
func nextID(through string) (string, error) {
	end, err := keyspace.ParseRangeEnd(through)
	if err != nil {
		return "", err
	}
	next, ok := end.Next()
	if !ok {
		return "", nil
	}
	return next.String(), nil
}
