package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// unpublished is the predicate of the partial index t_unpublished; queries repeat it
// verbatim so both planners pick the index.
const unpublished = "status IN ('PENDING', 'FAILED')"

// queries holds the runtime SQL of one outbox table in one dialect, written with '?'
// placeholders and rebound to $n for PostgreSQL.
type queries struct {
	insert string

	readMeta, writeMeta string

	hasWork, categories               string
	selectSequenced, selectUnsequence string

	leaseAcquire, leaseFence, leaseRelease string

	assignSeq, releaseSeq, markPublished, markFailed, markAbandoned string
	// PostgreSQL only: one statement for a whole batch, over arrays.
	assignSeqBatch, releaseSeqBatch, markPublishedBatch string

	statusCounts, backlog, abandoned, failing, leases, purge, now string
}

func newQueries(d Dialect, t string) queries {
	now := nowMs(d)
	greatest := "max"
	if d == Postgres {
		greatest = "GREATEST"
	}
	rowCols := "id, event_id, event_type, category, partition_key, payload, priority, status, attempts, next_attempt_ms, publish_seq, stream, traceparent, tracestate"
	q := queries{
		insert: fmt.Sprintf("INSERT INTO %s (event_id, event_type, category, partition_key, payload, priority, traceparent, tracestate) "+
			"VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id", t),

		readMeta:  fmt.Sprintf("SELECT name, value FROM %s_meta", t),
		writeMeta: fmt.Sprintf("INSERT INTO %s_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value", t),

		hasWork:    fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE category = ? AND %s)", t, unpublished),
		categories: fmt.Sprintf("SELECT DISTINCT category FROM %s WHERE %s", t, unpublished),
		// Rows already given a dedupe sequence go first, in sequence order: they may be in
		// the stream already, and every later row of their stream must get a larger one.
		selectSequenced: fmt.Sprintf("SELECT %s FROM %s WHERE category = ? AND %s AND publish_seq IS NOT NULL "+
			"ORDER BY publish_seq LIMIT ?", rowCols, t, unpublished),
		// The rest in id order, leaving out the keys already known to be held back (a
		// JSON array on SQLite, a text[] on PostgreSQL), so a long backlog behind one
		// failing key cannot hide the rows of other keys from the scan.
		selectUnsequence: fmt.Sprintf("SELECT %s FROM %s WHERE category = ? AND %s AND publish_seq IS NULL AND id > ? "+
			"AND (partition_key IS NULL OR %s) ORDER BY id LIMIT ?", rowCols, t, unpublished, notHeldBack(d)),

		// Take a free or expired lease; a takeover increments the generation. No row comes
		// back when another owner holds a live lease.
		leaseAcquire: fmt.Sprintf("INSERT INTO %[1]s_lease (category, owner, generation, expires_ms, last_seq) "+
			"VALUES (?, ?, 1, %[2]s + ?, 0) "+
			"ON CONFLICT (category) DO UPDATE SET owner = excluded.owner, generation = %[1]s_lease.generation + 1, "+
			"expires_ms = excluded.expires_ms WHERE %[1]s_lease.expires_ms <= %[2]s "+
			"RETURNING generation", t, now),
		// The fence: renews the lease and allocates n dedupe sequences in one statement,
		// only while the lease still names this owner at this generation. In a transaction
		// it also locks the lease row, so a takeover waits for the transaction to end.
		// ARGV: ttl ms, floor (Unix µs), n, category, owner, generation.
		leaseFence: fmt.Sprintf("UPDATE %[1]s_lease SET expires_ms = %[2]s + ?, last_seq = %[3]s(last_seq, ?) + ? "+
			"WHERE category = ? AND owner = ? AND generation = ? RETURNING last_seq", t, now, greatest),
		leaseRelease: fmt.Sprintf("UPDATE %s_lease SET expires_ms = 0 WHERE category = ? AND owner = ? AND generation = ?", t),

		assignSeq: fmt.Sprintf("UPDATE %s SET publish_seq = ?, stream = ?, updated_ms = %s WHERE id = ? AND %s", t, now, unpublished),
		// Gives back the sequence of a row that was assigned one this round but never
		// attempted, so rows that wait behind a failing one do not pile up as sequenced.
		releaseSeq: fmt.Sprintf("UPDATE %s SET publish_seq = NULL, stream = NULL WHERE id = ? AND %s", t, unpublished),
		markPublished: fmt.Sprintf("UPDATE %s SET status = 'PUBLISHED', attempts = attempts + 1, stream = ?, entry_id = ?, "+
			"published_ms = %[2]s, updated_ms = %[2]s WHERE id = ? AND %[3]s", t, now, unpublished),
		markFailed: fmt.Sprintf("UPDATE %s SET status = 'FAILED', attempts = attempts + 1, last_error = ?, next_attempt_ms = ?, "+
			"updated_ms = %s WHERE id = ? AND %s", t, now, unpublished),
		markAbandoned: fmt.Sprintf("UPDATE %s SET status = 'ABANDONED', last_error = ?, updated_ms = %s WHERE id = ? AND %s",
			t, now, unpublished),

		statusCounts: fmt.Sprintf("SELECT status, count(*) FROM %s GROUP BY status", t),
		backlog: fmt.Sprintf("SELECT category, count(*), min(created_ms), %s FROM %s WHERE %s GROUP BY category ORDER BY category",
			now, t, unpublished),
		abandoned: fmt.Sprintf("SELECT id, event_id, event_type, category, partition_key, attempts, last_error, created_ms, updated_ms "+
			"FROM %s WHERE status = 'ABANDONED' ORDER BY id DESC LIMIT ?", t),
		failing: fmt.Sprintf("SELECT id, event_id, event_type, category, partition_key, attempts, last_error, created_ms, updated_ms "+
			"FROM %s WHERE status = 'FAILED' ORDER BY id LIMIT ?", t),
		leases: fmt.Sprintf("SELECT category, owner, generation, expires_ms, %s FROM %s_lease ORDER BY category", now, t),
		purge:  fmt.Sprintf("DELETE FROM %s WHERE status = 'PUBLISHED' AND published_ms < ?", t),
		now:    "SELECT " + now,
	}
	if d == Postgres {
		rebindAll(&q)
		q.assignSeqBatch = fmt.Sprintf("UPDATE %s SET publish_seq = v.seq, stream = v.stream, updated_ms = %s "+
			"FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS v(id, seq, stream) WHERE %[1]s.id = v.id AND %[3]s",
			t, now, unpublished)
		q.releaseSeqBatch = fmt.Sprintf("UPDATE %s SET publish_seq = NULL, stream = NULL WHERE id = ANY($1::bigint[]) AND %s", t, unpublished)
		q.markPublishedBatch = fmt.Sprintf("UPDATE %s SET status = 'PUBLISHED', attempts = attempts + 1, stream = v.stream, "+
			"entry_id = v.entry, published_ms = %s, updated_ms = %[2]s "+
			"FROM unnest($1::bigint[], $2::text[], $3::text[]) AS v(id, stream, entry) WHERE %[1]s.id = v.id AND %[3]s",
			t, now, unpublished)
	}
	return q
}

// notHeldBack is the SQL condition "partition_key is not in the held-back list" (one
// parameter).
func notHeldBack(d Dialect) string {
	if d == Postgres {
		return "NOT (partition_key = ANY(?::text[]))"
	}
	return "partition_key NOT IN (SELECT value FROM json_each(?))"
}

// rebindAll rewrites every '?' placeholder of q to PostgreSQL's $1, $2, ...
func rebindAll(q *queries) {
	for _, p := range []*string{
		&q.insert, &q.readMeta, &q.writeMeta, &q.hasWork, &q.categories, &q.selectSequenced, &q.selectUnsequence,
		&q.leaseAcquire, &q.leaseFence, &q.leaseRelease, &q.assignSeq, &q.releaseSeq, &q.markPublished, &q.markFailed,
		&q.markAbandoned, &q.statusCounts, &q.backlog, &q.abandoned, &q.failing, &q.leases, &q.purge, &q.now,
	} {
		*p = rebind(*p)
	}
}

// rebind numbers the '?' placeholders of one statement. The statements above hold no '?'
// inside literals.
func rebind(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// queryer runs a query: a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryRows runs a query and returns its rows as scan reads them (an empty slice when there
// are none), or the first error of the query, a scan or the iteration.
func queryRows[T any](ctx context.Context, q queryer, query string, scan func(*sql.Rows) (T, error), args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
