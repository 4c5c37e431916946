package inbox

import (
	"context"
	"fmt"

	"github.com/seqctl/seqctl/pkg/engine/outbox"
)

// queries are the statements of one inbox table.
type queries struct {
	create string
	claim  string // $1 handler, $2 stream, $3 entry ms, $4 entry seq, $5 generation
	read   string // $1 handler, $2 stream
	raise  string // $1 handler, $2 stream, $3 generation
	prune  string // $1 handler, $2 stream, $3 entry ms, $4 entry seq
	page   string // $1 handler, $2 stream (the last row read), $3 how many
}

// nowMs is the database clock in Unix milliseconds.
func nowMs(d outbox.Dialect) string {
	if d == outbox.Postgres {
		return "(extract(epoch from clock_timestamp()) * 1000)::bigint"
	}
	return "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
}

func newQueries(d outbox.Dialect, t string) queries {
	bigint := "INTEGER"
	if d == outbox.Postgres {
		bigint = "bigint"
	}
	// One row per handler and lane stream: the last entry applied and the generation of
	// the owner that applied it.
	create := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	handler text NOT NULL,
	stream text NOT NULL,
	entry_ms %[2]s NOT NULL,
	entry_seq %[2]s NOT NULL,
	generation %[2]s NOT NULL,
	applied_ms %[2]s NOT NULL,
	CONSTRAINT %[1]s_pkey PRIMARY KEY (handler, stream)
)`, t, bigint)
	// The claim inserts the row, or updates it only when this delivery is from the same or
	// a newer owner and its entry comes after the applied one. Either way the row is
	// locked until the transaction ends (PostgreSQL locks a conflicting row even when the
	// WHERE of DO UPDATE is false, and re-reads it when another transaction held it;
	// SQLite's transaction holds the write lock from BEGIN). One changed row: commit.
	// None: refused (see Inbox.Apply).
	claim := fmt.Sprintf(`INSERT INTO %[1]s AS i (handler, stream, entry_ms, entry_seq, generation, applied_ms)
VALUES ($1, $2, $3, $4, $5, %[2]s)
ON CONFLICT (handler, stream) DO UPDATE SET
	entry_ms = excluded.entry_ms, entry_seq = excluded.entry_seq,
	generation = excluded.generation, applied_ms = excluded.applied_ms
WHERE i.generation <= excluded.generation
	AND (i.entry_ms < excluded.entry_ms OR (i.entry_ms = excluded.entry_ms AND i.entry_seq < excluded.entry_seq))`, t, nowMs(d))
	return queries{
		create: create,
		claim:  claim,
		read:   fmt.Sprintf("SELECT entry_ms, entry_seq, generation FROM %s WHERE handler = $1 AND stream = $2", t),
		raise:  fmt.Sprintf("UPDATE %s SET generation = $3 WHERE handler = $1 AND stream = $2 AND generation < $3", t),
		page: fmt.Sprintf("SELECT handler, stream, entry_ms, entry_seq, generation FROM %s "+
			"WHERE handler > $1 OR (handler = $1 AND stream > $2) ORDER BY handler, stream LIMIT $3", t),
		prune: fmt.Sprintf("DELETE FROM %s WHERE handler = $1 AND stream = $2 AND entry_ms = $3 AND entry_seq = $4", t),
	}
}

// Migrate creates the inbox table when it is missing. It is idempotent.
func (i *Inbox) Migrate(ctx context.Context) error {
	if _, err := i.db.ExecContext(ctx, i.q.create); err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", i.table, err)
	}
	return nil
}
