package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
)

// confirmReplicated runs between the publish and the mark of a round when
// RelayConfig.MinReplicas > 0: it waits until that many Redis replicas have acknowledged
// every append the round relies on (the rows appended now and the rows found appended
// already by the dedupe mark; engine.WaitReplicas covers both with one WAIT).
//
// When the replicas fall short, or the wait fails, none of those rows is marked
// PUBLISHED: each is recorded as a failed attempt with the reason and retried with its
// backoff, and the rows behind it in its unit wait, so per-key order holds. The retry does
// not append a second time: the stream's dedupe mark shows the append done, and the row is
// marked once a later wait succeeds. The returned error says how many rows, which
// category and why, with the numbers (*engine.ReplicaShortfallError); Run logs it and
// Drain returns it.
func (r *Relay) confirmReplicated(ctx context.Context, cat string, ready []*row) error {
	if r.cfg.MinReplicas <= 0 {
		return nil
	}
	var appended []*row
	for _, rw := range ready {
		if rw.out.kind == published || rw.out.kind == duplicate {
			appended = append(appended, rw)
		}
	}
	if len(appended) == 0 {
		return nil
	}
	// The wait runs even when ctx ended during the publish, like the mark after it: a
	// relay shutting down still records what it knows.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ReplicaTimeout+5*time.Second)
	defer cancel()
	rdb := r.cfg.Publisher.(streamClient).Client() // checked by NewRelay
	err := engine.WaitReplicas(wctx, rdb, "outbox append", r.cfg.MinReplicas, r.cfg.ReplicaTimeout)
	if err == nil {
		return nil
	}
	for _, rw := range appended {
		rw.out = outcome{kind: failed, err: fmt.Errorf("appended to %s as %s but not marked published: %w", rw.route.Stream, rw.out.entryID, err)}
	}
	r.count(func(s *RelayStats) { s.Unreplicated += uint64(len(appended)) })
	what := fmt.Sprintf("%d rows", len(appended))
	if len(appended) == 1 {
		what = "1 row"
	}
	return fmt.Errorf("outbox: %s of category %q appended but left unpublished, to be retried (the stream's dedupe mark prevents a second append): %w",
		what, cat, err)
}
