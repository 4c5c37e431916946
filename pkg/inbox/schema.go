package inbox

import (
	"context"
	"fmt"
	"strconv"

	"github.com/seqctl/seqctl/internal/hashslot"

	"github.com/seqctl/seqctl/pkg/sqldb"
)

// floorPrefix starts the stream column of a handler's floor row for one hash slot:
// "__floor__:{slot}". No lane stream has it (a category cannot have the reserved
// __name__ form). Older versions kept one floor row per handler, with an empty stream:
// the claims and the floor check still honour it.
const floorPrefix = "__floor__:"

// floorOf names the floor row of a stream's hash slot. The generations a floor compares
// come from one clock: a partition's generations are floored at the Redis time of the
// master that serves its slot, so on Redis Cluster a floor shared by every stream of a
// handler would compare clocks of different masters, and a master whose clock runs ahead
// would fence the partitions of the others until their clocks passed it.
func floorOf(stream string) string { return floorPrefix + strconv.Itoa(hashslot.Of(stream)) }

// queries are the statements of one inbox table.
type queries struct {
	create string
	claim  string // $1 handler, $2 stream, $3 entry ms, $4 entry seq, $5 generation, $6 floor row
	// claimRun is claim for a run of entries: $3, $4 the last entry (recorded), $6 the
	// floor row, and $7, $8 the first entry the run applied (the row must hold an entry
	// before it).
	claimRun string
	read     string   // $1 handler, $2 stream
	floor    string   // $1 handler, $2 floor row: the floor (the legacy one too)
	raise    string   // $1 handler, $2 stream, $3 generation
	prune    string   // $1 handler, $2 stream, $3 entry ms, $4 entry seq; returns the generation
	lift     string   // $1 handler, $2 generation, $3 floor row: raise the floor row to it
	page     string   // $1 handler, $2 stream (the last row read), $3 how many
	lock     []string // PostgreSQL: keep claims out while a prune removes rows; none on SQLite
}

// nowMs is the database clock in Unix milliseconds.
func nowMs(d sqldb.Dialect) string {
	if d == sqldb.Postgres {
		return "(extract(epoch from clock_timestamp()) * 1000)::bigint"
	}
	return "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
}

func newQueries(d sqldb.Dialect, t string) queries {
	bigint := "INTEGER"
	if d == sqldb.Postgres {
		bigint = "bigint"
	}
	// One row per handler and lane stream: the last entry applied and the generation of
	// the owner that applied it; and per handler, once a prune removed rows, its floor
	// rows (stream floorOf, per hash slot): the highest generation of the rows removed.
	create := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	handler text NOT NULL,
	stream text NOT NULL,
	entry_ms %[2]s NOT NULL,
	entry_seq %[2]s NOT NULL,
	generation %[2]s NOT NULL,
	applied_ms %[2]s NOT NULL,
	CONSTRAINT %[1]s_pkey PRIMARY KEY (handler, stream)
)`, t, bigint)
	// The claim inserts the row when the delivery's generation is not below the handler's
	// floor (a row Prune removed may have held a newer owner's generation), or updates it
	// only when this delivery is from the same or a newer owner and its entry comes after
	// the applied one. Either way the row is locked until the transaction ends
	// (PostgreSQL locks a conflicting row even when the WHERE of DO UPDATE is false, and
	// re-reads it when another transaction held it; SQLite's transaction holds the write
	// lock from BEGIN). One changed row: commit. None: refused (see Inbox.Apply).
	//
	// A run's claim (Inbox.ApplyBatch) records its last entry but compares the row with
	// the first entry it applied: an owner that applied any entry of the run meanwhile
	// (a stalled one of an older generation, say) left the row at or after it, and the
	// claim is refused, so no entry's effects commit twice.
	claimTmpl := `INSERT INTO %[1]s AS i (handler, stream, entry_ms, entry_seq, generation, applied_ms)
SELECT CAST($1 AS text), CAST($2 AS text), CAST($3 AS %[3]s), CAST($4 AS %[3]s), CAST($5 AS %[3]s), %[2]s
WHERE CAST($5 AS %[3]s) >= COALESCE((SELECT MAX(f.generation) FROM %[1]s f WHERE f.handler = CAST($1 AS text) AND f.stream IN ('', CAST($6 AS text))), 0)
ON CONFLICT (handler, stream) DO UPDATE SET
	entry_ms = excluded.entry_ms, entry_seq = excluded.entry_seq,
	generation = excluded.generation, applied_ms = excluded.applied_ms
WHERE i.generation <= excluded.generation
	AND (i.entry_ms < %[4]s OR (i.entry_ms = %[4]s AND i.entry_seq < %[5]s))`
	claim := fmt.Sprintf(claimTmpl, t, nowMs(d), bigint, "excluded.entry_ms", "excluded.entry_seq")
	claimRun := fmt.Sprintf(claimTmpl, t, nowMs(d), bigint, "CAST($7 AS "+bigint+")", "CAST($8 AS "+bigint+")")
	q := queries{
		create:   create,
		claim:    claim,
		claimRun: claimRun,
		read:     fmt.Sprintf("SELECT entry_ms, entry_seq, generation FROM %s WHERE handler = $1 AND stream = $2", t),
		floor:    fmt.Sprintf("SELECT COALESCE(MAX(generation), 0) FROM %s WHERE handler = $1 AND stream IN ('', $2)", t),
		raise:    fmt.Sprintf("UPDATE %s SET generation = $3 WHERE handler = $1 AND stream = $2 AND generation < $3", t),
		page: fmt.Sprintf("SELECT handler, stream, entry_ms, entry_seq, generation FROM %s "+
			"WHERE (handler > $1 OR (handler = $1 AND stream > $2)) AND stream <> '' AND substr(stream, 1, 10) <> '"+floorPrefix+"' ORDER BY handler, stream LIMIT $3", t),
		prune: fmt.Sprintf("DELETE FROM %s WHERE handler = $1 AND stream = $2 AND entry_ms = $3 AND entry_seq = $4 RETURNING generation", t),
		lift: fmt.Sprintf(`INSERT INTO %[1]s AS i (handler, stream, entry_ms, entry_seq, generation, applied_ms)
VALUES ($1, $3, 0, 0, $2, %[2]s)
ON CONFLICT (handler, stream) DO UPDATE SET generation = excluded.generation, applied_ms = excluded.applied_ms
WHERE i.generation < excluded.generation`, t, nowMs(d)),
	}
	if d == sqldb.Postgres {
		// SHARE ROW EXCLUSIVE waits for the claims under way and keeps new ones out until
		// the prune's transaction ends: a claim then sees the floor it raised. Bounded, so
		// that an owner stalled with its claim made and not committed cannot hold a
		// prune forever.
		q.lock = []string{"SET LOCAL lock_timeout = '10s'", fmt.Sprintf("LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE", t)}
	}
	return q
}

// Migrate creates the inbox table when it is missing. It is idempotent.
func (i *Inbox) Migrate(ctx context.Context) error {
	if _, err := i.db.ExecContext(ctx, i.q.create); err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", i.table, err)
	}
	return nil
}
