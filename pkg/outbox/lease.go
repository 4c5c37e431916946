package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrFenced reports that the relay no longer holds a category's lease at the generation it
// acted under: another relay took the category over. The relay stops publishing that
// category at once; rows it appended but did not mark are found by the new owner, whose
// publish of them is a no-op (the dedupe mark), so nothing is appended twice.
var ErrFenced = errors.New("outbox: category lease lost")

// A category lease lives in the row {table}_lease(category): owner, generation,
// expires_ms (database clock) and last_seq (the last dedupe sequence handed out for the
// category). Acquiring a free or expired lease increments the generation. Every write the
// relay makes to rows of the category runs in a transaction that first executes the fence
// statement (queries.leaseFence): it matches only while owner and generation are still the
// relay's, renews the expiry, and locks the lease row until the transaction ends, so a
// takeover is ordered entirely before or entirely after each of the relay's writes.
//
// lease is owned by the relay's loop goroutine.
type lease struct {
	category   string
	generation int64
	// deadline is the local monotonic time after which the relay must not start another
	// publish under this lease: when the last successful renewal was sent, plus
	// 4/5 of the TTL. A relay that was frozen (GC, SIGSTOP, a slow network) past its lease
	// thus stops by itself, and the fence catches anything already under way.
	deadline time.Time
	// renewedAt is when the last successful renewal was sent.
	renewedAt time.Time
}

func (l *lease) valid(now time.Time) bool { return now.Before(l.deadline) }

func (r *Relay) renewed(l *lease, sentAt time.Time) {
	l.renewedAt = sentAt
	l.deadline = sentAt.Add(r.cfg.LeaseTTL * 4 / 5)
}

// acquire tries to take the category's lease. ok is false when another relay holds a live
// lease.
func (r *Relay) acquire(ctx context.Context, category string) (l *lease, ok bool, err error) {
	sent := time.Now()
	var gen int64
	err = r.o.db.QueryRowContext(ctx, r.o.q.leaseAcquire, category, r.cfg.Owner, r.cfg.LeaseTTL.Milliseconds()).Scan(&gen)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("outbox: acquire the relay lease of category %q: %w", category, err)
	}
	l = &lease{category: category, generation: gen}
	r.renewed(l, sent)
	return l, true, nil
}

// fence renews the lease inside tx (or directly on the database when tx is nil) and
// allocates n dedupe sequences, returning the last one: the block is last-n+1 .. last.
// Sequences never go below the current Unix time in microseconds, so a table restored from
// a backup, or re-created, keeps handing out sequences above every dedupe mark already in
// Redis. It returns ErrFenced when the lease is no longer this relay's.
func (r *Relay) fence(ctx context.Context, tx *sql.Tx, l *lease, n int) (last int64, err error) {
	sent := time.Now()
	args := []any{r.cfg.LeaseTTL.Milliseconds(), sent.UnixMicro(), n, l.category, r.cfg.Owner, l.generation}
	if tx != nil {
		err = tx.QueryRowContext(ctx, r.o.q.leaseFence, args...).Scan(&last)
	} else {
		err = r.o.db.QueryRowContext(ctx, r.o.q.leaseFence, args...).Scan(&last)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: category %q at generation %d", ErrFenced, l.category, l.generation)
	}
	if err != nil {
		return 0, fmt.Errorf("outbox: renew the relay lease of category %q: %w", l.category, err)
	}
	r.renewed(l, sent)
	return last, nil
}

// release gives the lease up so another relay can take the category at once. Errors are
// ignored: an unreleased lease simply expires after LeaseTTL.
func (r *Relay) release(ctx context.Context, l *lease) {
	_, _ = r.o.db.ExecContext(ctx, r.o.q.leaseRelease, l.category, r.cfg.Owner, l.generation)
}

// LeaseInfo is one row of the lease table, as Status reports it.
type LeaseInfo struct {
	Category   string    `json:"category"`
	Owner      string    `json:"owner"`
	Generation int64     `json:"generation"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Live is false once the lease has expired (or was released) by the database clock:
	// the next relay to look takes it at generation+1.
	Live bool `json:"live"`
}
