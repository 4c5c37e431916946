package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// ApplyBatch applies a run of consecutive events of one lane stream (an
// engine.BatchFunc's call: d.Entries are their entry ids, in order) in one transaction
// of the inbox's database, with one claim for the last entry. It reads the inbox row of
// (d.Handler, d.Stream), then
//
//   - refuses the run with ErrStale when the row holds a higher generation than
//     d.Generation: nothing runs;
//   - reports Duplicate when every entry is at or below the row's: nothing runs;
//   - otherwise runs fn once for each event whose entry is after the row's, in order,
//     in the transaction (the events before it were applied by an earlier delivery and
//     are skipped), then records d.LastEntryID() and d.Generation in the row,
//     compare-and-set and locked until the commit, and commits: Applied.
//
// Each call of fn gets a context whose delivery (engine.DeliveryFrom) is the event's own:
// EntryID is its entry, Entries is nil, the rest is d's. So a TxFunc written for Apply
// works here unchanged, and the run commits all or nothing: an error of fn rolls back
// every event's effects and is returned, naming the event when the run has more than one.
//
// As in Apply, the row is checked again when it is written: the claim is refused when the
// row moved to or past the first entry fn ran for (an owner that stalled inside its
// transaction applied part of the run meanwhile), and the transaction is rolled back:
// ErrStale when that owner's generation is higher, Duplicate when it applied the whole
// run, and otherwise an error that fails the attempt, so that the next one skips what the
// other owner applied. No entry's effects commit twice.
//
// A run of one event (d.Entries nil or of length one) is the same as Apply.
func (i *Inbox) ApplyBatch(ctx context.Context, d engine.Delivery, evs []engine.Event, fn TxFunc) (Outcome, error) {
	entries, ids, err := runEntries(d, len(evs))
	if err != nil {
		return 0, err
	}
	key := rowKey{d.Handler, d.Stream}
	last := ids[len(ids)-1]
	// start is the first event fn runs for: after the entry the row holds.
	start := 0
	known, sure := i.remembered(key, d.Generation)
	if sure {
		if !known.entry.Less(last) {
			return Duplicate, nil
		}
		start = after(ids, known.entry)
	}
	tx, err := i.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if !sure {
		out, applied, err := i.check(ctx, tx, d, last)
		if out != 0 || err != nil {
			i.forget(key)
			return i.settle(ctx, tx, d, out, err)
		}
		start = after(ids, applied)
	}
	for k := start; k < len(evs); k++ {
		one := d
		one.EntryID, one.Entries = entries[k], nil
		if err := fn(engine.WithDelivery(ctx, one), tx, evs[k]); err != nil {
			i.forget(key)
			if len(evs) > 1 {
				return 0, fmt.Errorf("event %s (entry %s, %d of %d in the batch): %w", evs[k].ID, one.EntryID, k+1, len(evs), err)
			}
			return 0, err
		}
	}
	first := ids[start]
	res, err := tx.ExecContext(ctx, i.q.claimRun, d.Handler, d.Stream, int64(last.MS), int64(last.Seq), d.Generation, floorOf(d.Stream), int64(first.MS), int64(first.Seq))
	if err != nil {
		return 0, fmt.Errorf("inbox: record %s of %s on %s: %w", d.LastEntryID(), d.Handler, d.Stream, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("inbox: record %s of %s on %s: %w", d.LastEntryID(), d.Handler, d.Stream, err)
	} else if n == 0 {
		i.forget(key)
		// Applied or superseded while fn ran: the row is locked now, read it again. fn's
		// effects go with the rollback.
		out, applied, err := i.check(ctx, tx, d, last)
		switch {
		case err != nil:
			return 0, err
		case out != 0:
			return out, nil
		case !applied.Less(first):
			return 0, fmt.Errorf("inbox: another owner of %s applied entries up to %s of this batch (%s to %s) while it ran; nothing of it committed, and the next attempt skips what was applied",
				d.Stream, applied, d.EntryID, d.LastEntryID())
		}
		return 0, fmt.Errorf("inbox: the row of %s on %s refused %s for no reason it shows", d.Handler, d.Stream, d.LastEntryID())
	}
	if err := tx.Commit(); err != nil {
		i.forget(key)
		return 0, fmt.Errorf("inbox: commit the effects of %s to %s on %s: %w", d.EntryID, d.LastEntryID(), d.Stream, err)
	}
	i.remember(key, rowState{entry: last, gen: d.Generation})
	return Applied, nil
}

// runEntries returns the entry ids of a run of n events delivered with d, as given and
// parsed: d.Entries, or for a run of one without them, d.EntryID. They must be as many as
// the events, valid and ascending, and the delivery must name its handler and stream.
func runEntries(d engine.Delivery, n int) ([]string, []keyspace.StreamID, error) {
	if d.Handler == "" || d.Stream == "" {
		return nil, nil, fmt.Errorf("inbox: the delivery names no handler or stream (%+v): run the handler under the engine", d)
	}
	entries := d.Entries
	if len(entries) == 0 && n == 1 && d.EntryID != "" {
		entries = []string{d.EntryID}
	}
	switch {
	case n == 0:
		return nil, nil, errors.New("inbox: a batch of no events: nothing to apply")
	case len(entries) != n:
		return nil, nil, fmt.Errorf("inbox: the delivery's entry ids (%d) do not match its events (%d): run the handler under the engine, which lists each event's entry in Delivery.Entries", len(entries), n)
	}
	ids := make([]keyspace.StreamID, n)
	for k, e := range entries {
		id, err := keyspace.ParseEntryID(e)
		if err != nil {
			return nil, nil, fmt.Errorf("inbox: entry %d of the batch: %w", k+1, err)
		}
		if k > 0 && !ids[k-1].Less(id) {
			return nil, nil, fmt.Errorf("inbox: the batch's entries are not in stream order (%s after %s)", e, entries[k-1])
		}
		ids[k] = id
	}
	return entries, ids, nil
}

// after returns the index of the first id after applied (ids are ascending; len(ids)
// when there is none).
func after(ids []keyspace.StreamID, applied keyspace.StreamID) int {
	for k, id := range ids {
		if applied.Less(id) {
			return k
		}
	}
	return len(ids)
}

// BatchHandler returns an engine batch handler (Handler.BatchFunc) that applies each run
// through the inbox (ApplyBatch): fn runs at most once per entry with effects that
// commit, in stream order per lane, each run in one transaction.
func (i *Inbox) BatchHandler(fn TxFunc) engine.BatchFunc {
	return func(ctx context.Context, evs []engine.Event) error {
		d, ok := engine.DeliveryFrom(ctx)
		if !ok {
			return errors.New("inbox: the context carries no delivery: the handler runs outside the engine")
		}
		_, err := i.ApplyBatch(ctx, d, evs, fn)
		return err
	}
}
