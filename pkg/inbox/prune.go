package inbox

import (
	"context"
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
		for k, r := range rows {
			if k >= len(isGone) || !isGone[k] {
				continue
			}
			if dryRun {
				rep.Removed++
				continue
			}
			res, err := i.db.ExecContext(ctx, i.q.prune, r.Handler, r.Stream, r.ms, r.seq)
			if err != nil {
				return rep, fmt.Errorf("inbox: prune %s: %w", i.table, err)
			}
			if n, _ := res.RowsAffected(); n > 0 {
				rep.Removed++
			}
		}
		after = rows[len(rows)-1]
	}
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
