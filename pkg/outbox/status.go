package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// StatusCounts counts rows per status.
type StatusCounts struct {
	Pending   int64 `json:"pending"`
	Failed    int64 `json:"failed"`
	Published int64 `json:"published"`
	Abandoned int64 `json:"abandoned"`
}

// CategoryBacklog is the unpublished rows of one category.
type CategoryBacklog struct {
	Category string `json:"category"`
	// Rows counts PENDING and FAILED rows.
	Rows int64 `json:"rows"`
	// OldestAgeSeconds is the age of the oldest of them by the database clock (0 when none).
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// Backlog is what a metrics exporter needs: how many rows wait and for how long. Labels
// are categories (bounded), never keys.
type Backlog struct {
	// Rows counts all unpublished (PENDING and FAILED) rows.
	Rows int64 `json:"rows"`
	// OldestAge is the age of the oldest unpublished row (0 when none), by the database
	// clock. It grows while any key is held back by a failing row, so it is the number to
	// alert on.
	OldestAge time.Duration `json:"-"`
	// OldestAgeSeconds is OldestAge in seconds, for JSON.
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	// Oldest is when the oldest unpublished row was created, nil when none.
	Oldest     *time.Time        `json:"oldest,omitempty"`
	Categories []CategoryBacklog `json:"categories"`
}

// RowInfo describes a row for an operator: an abandoned row and why, or a failing one.
type RowInfo struct {
	RowID     int64     `json:"row_id"`
	EventID   string    `json:"event_id"`
	Type      string    `json:"type"`
	Category  string    `json:"category"`
	Key       string    `json:"key,omitempty"`
	Attempts  int       `json:"attempts"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// StatusReport is the state of an outbox table, for `seqctl outbox status` (-o json).
type StatusReport struct {
	Table   string       `json:"table"`
	Dialect string       `json:"dialect"`
	Counts  StatusCounts `json:"counts"`
	Backlog Backlog      `json:"backlog"`
	// Abandoned lists the most recent ABANDONED rows with their reasons, newest first.
	Abandoned []RowInfo `json:"abandoned"`
	// Failing lists the oldest FAILED rows (each holds back the later rows of its key)
	// with their last error.
	Failing []RowInfo   `json:"failing"`
	Leases  []LeaseInfo `json:"leases"`
}

// StatusOptions bounds the lists of Status.
type StatusOptions struct {
	// Limit is how many abandoned and failing rows to list (default 20).
	Limit int
}

// Status reports counts per status, the backlog and its oldest age, the latest abandoned
// and the oldest failing rows with reasons, and the relay leases. It only reads. Counting
// scans the table, so keep it small with Purge.
func (o *Outbox) Status(ctx context.Context, opt StatusOptions) (StatusReport, error) {
	if opt.Limit <= 0 {
		opt.Limit = 20
	}
	rep := StatusReport{Table: o.table, Dialect: o.dialect.String(), Abandoned: []RowInfo{}, Failing: []RowInfo{}, Leases: []LeaseInfo{}}
	wrap := func(what string, err error) error {
		return fmt.Errorf("outbox: status of %s: %s: %w", o.table, what, err)
	}

	type count struct {
		status string
		rows   int64
	}
	counts, err := queryRows(ctx, o.db, o.q.statusCounts, func(rows *sql.Rows) (c count, err error) {
		err = rows.Scan(&c.status, &c.rows)
		return c, err
	})
	if err != nil {
		return rep, wrap("count rows", err)
	}
	for _, c := range counts {
		switch Status(c.status) {
		case StatusPending:
			rep.Counts.Pending = c.rows
		case StatusFailed:
			rep.Counts.Failed = c.rows
		case StatusPublished:
			rep.Counts.Published = c.rows
		case StatusAbandoned:
			rep.Counts.Abandoned = c.rows
		}
	}
	if rep.Backlog, err = o.Backlog(ctx); err != nil {
		return rep, err
	}
	if rep.Abandoned, err = o.rowInfos(ctx, o.q.abandoned, opt.Limit); err != nil {
		return rep, wrap("list abandoned rows", err)
	}
	if rep.Failing, err = o.rowInfos(ctx, o.q.failing, opt.Limit); err != nil {
		return rep, wrap("list failing rows", err)
	}
	if rep.Leases, err = o.leaseInfos(ctx); err != nil {
		return rep, wrap("list leases", err)
	}
	return rep, nil
}

// Backlog returns the unpublished rows per category and the oldest one's age. It is cheap
// enough for every metrics scrape: it reads only the partial index of unpublished rows.
func (o *Outbox) Backlog(ctx context.Context) (Backlog, error) {
	b := Backlog{Categories: []CategoryBacklog{}}
	rows, err := o.db.QueryContext(ctx, o.q.backlog)
	if err != nil {
		return b, fmt.Errorf("outbox: backlog of %s: %w", o.table, err)
	}
	defer rows.Close()
	var oldest int64
	for rows.Next() {
		var c CategoryBacklog
		var minCreated, now int64
		if err := rows.Scan(&c.Category, &c.Rows, &minCreated, &now); err != nil {
			return b, fmt.Errorf("outbox: backlog of %s: %w", o.table, err)
		}
		c.OldestAgeSeconds = ageSeconds(now, minCreated)
		b.Categories = append(b.Categories, c)
		b.Rows += c.Rows
		if oldest == 0 || minCreated < oldest {
			oldest = minCreated
			b.OldestAgeSeconds = c.OldestAgeSeconds
		}
	}
	if err := rows.Err(); err != nil {
		return b, fmt.Errorf("outbox: backlog of %s: %w", o.table, err)
	}
	if oldest != 0 {
		t := time.UnixMilli(oldest).UTC()
		b.Oldest = &t
		b.OldestAge = time.Duration(b.OldestAgeSeconds * float64(time.Second))
	}
	return b, nil
}

func ageSeconds(nowMs, thenMs int64) float64 {
	if nowMs <= thenMs {
		return 0
	}
	return float64(nowMs-thenMs) / 1000
}

func (o *Outbox) rowInfos(ctx context.Context, query string, limit int) ([]RowInfo, error) {
	return queryRows(ctx, o.db, query, func(rows *sql.Rows) (ri RowInfo, err error) {
		var key, reason sql.NullString
		var created, updated int64
		err = rows.Scan(&ri.RowID, &ri.EventID, &ri.Type, &ri.Category, &key, &ri.Attempts, &reason, &created, &updated)
		ri.Key, ri.Reason = key.String, reason.String
		ri.CreatedAt, ri.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
		return ri, err
	}, limit)
}

func (o *Outbox) leaseInfos(ctx context.Context) ([]LeaseInfo, error) {
	return queryRows(ctx, o.db, o.q.leases, func(rows *sql.Rows) (li LeaseInfo, err error) {
		var expires, now int64
		err = rows.Scan(&li.Category, &li.Owner, &li.Generation, &expires, &now)
		li.ExpiresAt, li.Live = time.UnixMilli(expires).UTC(), expires > now
		return li, err
	})
}

// Purge deletes PUBLISHED rows published before the given time and returns how many. The
// relay never needs a published row again; ABANDONED and unpublished rows are kept. Run it
// periodically (for example daily, keeping a week) so Status and the indexes stay small.
func (o *Outbox) Purge(ctx context.Context, before time.Time) (int64, error) {
	res, err := o.db.ExecContext(ctx, o.q.purge, before.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("outbox: purge published rows of %s: %w", o.table, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
