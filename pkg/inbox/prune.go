package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Row is one row of the inbox table.
type Row struct {
	Handler    string `json:"handler"`
	Stream     string `json:"stream"`
	EntryID    string `json:"entry_id"`
	Generation int64  `json:"generation"`
	ms, seq    int64
}

// PruneReport says what Prune found and removed.
type PruneReport struct {
	Table   string `json:"table"`
	Rows    int    `json:"rows"`    // rows read
	Removed int    `json:"removed"` // rows of streams that are gone (to remove, with a dry run)
	DryRun  bool   `json:"dry_run"`
}

// pruneBatch is how many rows Prune reads and checks at a time.
const pruneBatch = 500

// Prune removes the rows whose lane stream no longer exists: gone reports, for each
// stream of a batch, whether it is gone (reaped). A row is needed only while its stream
// may deliver an entry at or below the one it records; a reaped stream's entries are
// gone, and a stream created again under the same name gets entry ids above every old
// one, so its row can go. Each row is removed only if it still records what Prune read
// (a row written meanwhile stays). With dryRun nothing is removed.
//
// The generation a removed row held still fences the owners it refused: the floor row of
// the handler and the stream's hash slot keeps the highest one, raised in the same
// transaction as the removal, and a delivery to a stream of that slot without a row is
// applied only from that generation on. So an
// owner that a newer one superseded before the reap, and that applies late (it stalled
// before its claim), is refused after the prune as before it. On PostgreSQL each batch
// holds the table's claims off while it runs (at most 10 s waiting for them).
func (i *Inbox) Prune(ctx context.Context, gone func(ctx context.Context, streams []string) ([]bool, error), dryRun bool) (PruneReport, error) {
	rep := PruneReport{Table: i.table, DryRun: dryRun}
	after := Row{}
	for {
		rows, err := i.rowsAfter(ctx, after, pruneBatch)
		if err != nil {
			return rep, err
		}
		if len(rows) == 0 {
			return rep, nil
		}
		rep.Rows += len(rows)
		streams := make([]string, len(rows))
		for k, r := range rows {
			streams[k] = r.Stream
		}
		isGone, err := gone(ctx, streams)
		if err != nil {
			return rep, err
		}
		var remove []Row
		for k, r := range rows {
			if k < len(isGone) && isGone[k] {
				remove = append(remove, r)
			}
		}
		if dryRun {
			rep.Removed += len(remove)
		} else if len(remove) > 0 {
			n, err := i.remove(ctx, remove)
			if err != nil {
				return rep, err
			}
			rep.Removed += n
		}
		after = rows[len(rows)-1]
	}
}

// remove removes rows (each only if it still records what was read) and raises their
// handlers' floors to the generations they held, in one transaction.
func (i *Inbox) remove(ctx context.Context, rows []Row) (int, error) {
	tx, err := i.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("inbox: prune %s: %w", i.table, err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, q := range i.q.lock {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return 0, fmt.Errorf("inbox: prune %s: the table stayed busy with claims: %w", i.table, err)
		}
	}
	floors := map[[2]string]int64{} // (handler, floor row) -> generation
	removed := 0
	for _, r := range rows {
		var gen int64
		err := tx.QueryRowContext(ctx, i.q.prune, r.Handler, r.Stream, r.ms, r.seq).Scan(&gen)
		if errors.Is(err, sql.ErrNoRows) {
			continue // written meanwhile
		}
		if err != nil {
			return 0, fmt.Errorf("inbox: prune %s: %w", i.table, err)
		}
		removed++
		f := [2]string{r.Handler, floorOf(r.Stream)}
		floors[f] = max(floors[f], gen)
	}
	for f, gen := range floors {
		if _, err := tx.ExecContext(ctx, i.q.lift, f[0], gen, f[1]); err != nil {
			return 0, fmt.Errorf("inbox: prune %s: raise the floor of %s: %w", i.table, f[0], err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("inbox: prune %s: %w", i.table, err)
	}
	return removed, nil
}

// rowsAfter reads up to n rows after the given one, in (handler, stream) order.
func (i *Inbox) rowsAfter(ctx context.Context, after Row, n int) ([]Row, error) {
	rs, err := i.db.QueryContext(ctx, i.q.page, after.Handler, after.Stream, n)
	if err != nil {
		return nil, fmt.Errorf("inbox: read %s: %w", i.table, err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.Handler, &r.Stream, &r.ms, &r.seq, &r.Generation); err != nil {
			return nil, fmt.Errorf("inbox: read %s: %w", i.table, err)
		}
		r.EntryID = fmt.Sprintf("%d-%d", r.ms, r.seq)
		out = append(out, r)
	}
	return out, rs.Err()
}
