package outbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/seqctl/seqctl/pkg/engine"
)

// schemaVersion is recorded in the meta table; Migrate refuses a newer one. 2: the
// traceparent and tracestate columns.
const schemaVersion = 2

// The SQL of this file names every table, index, constraint, trigger and sequence the
// outbox creates. Names derive from the validated table name t:
//
//	t                        the outbox rows
//	t_lease                  one row per category: the relay lease and the dedupe counter
//	t_meta                   schema_version, backfill_suffix
//	t_unpublished            partial index (category, id) of PENDING and FAILED rows
//	t_by_status              index (status, id)
//	t_partition_key_rules    CHECK constraint generated from the backfill suffix
//	t_status_values          CHECK constraint on status
//	t_id_seq, t_before_insert(), trigger t_order   (PostgreSQL only; see pgOrderTrigger)

// nowMs is the SQL expression for the database clock in Unix milliseconds. Every stored
// time (created, updated, published, lease expiry) uses the database clock, so relays on
// hosts with skewed clocks agree on lease expiry and on ages.
func nowMs(d Dialect) string {
	if d == Postgres {
		return "(extract(epoch from clock_timestamp()) * 1000)::bigint"
	}
	return "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
}

// keyRulesCheck renders engine.ValidateKey's rules (all but the JSON-type rule, which the
// text column makes moot) as a SQL boolean over partition_key. NULL passes: an unpartitioned
// category has no key, and a partitioned row with none is abandoned by the relay. An
// ABANDONED row passes whatever its key, so the relay can always abandon a row that reached
// the table with a bad key (PostgreSQL checks every constraint on every UPDATE), and keeps
// the key for the operator to see.
func keyRulesCheck(d Dialect, suffix string) string {
	byteLen, colonPos := "length(CAST(partition_key AS BLOB))", "instr(partition_key, ':')"
	// Control characters (0x01-0x1F, 0x7F) and braces, as a character class built with
	// char()/chr() so the DDL holds no raw control bytes. NUL: PostgreSQL text cannot hold
	// one; SQLite text can, and its string functions stop at it, so the bytes are searched.
	class := "'[' || char(1) || '-' || char(31) || char(127) || '{}]'"
	forbidden := "partition_key NOT GLOB ('*' || " + class + " || '*') AND instr(CAST(partition_key AS BLOB), x'00') = 0"
	if d == Postgres {
		byteLen, colonPos = "octet_length(partition_key)", "strpos(partition_key, ':')"
		forbidden = "partition_key !~ ('[' || chr(1) || '-' || chr(31) || chr(127) || '{}]')"
	}
	return fmt.Sprintf("status = 'ABANDONED' OR partition_key IS NULL OR ("+
		"%s BETWEEN 1 AND %d"+ // empty; too long
		" AND %s = 0"+ // contains ':'
		" AND partition_key NOT IN ('dlq', %s)"+ // reserved tokens
		" AND partition_key NOT LIKE '!_!_%%!_!_' ESCAPE '!'"+ // __name__ sentinel
		" AND %s)", // control characters, braces
		byteLen, engine.MaxKeyBytes, colonPos, sqlString(suffix), forbidden)
}

// keyRulesVersion is recorded in the meta table with the CHECK it generated; Migrate
// replaces an older CHECK. 2: control characters and braces are refused.
const keyRulesVersion = 2

// sqlString quotes s as a SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// outboxColumns lists the row columns in table order (used to copy a table on rebuild).
const outboxColumns = "id, event_id, event_type, category, partition_key, payload, priority, status, attempts, " +
	"last_error, created_ms, updated_ms, next_attempt_ms, published_ms, publish_seq, stream, entry_id, traceparent, tracestate"

// createTable returns the CREATE TABLE statement of the outbox (named name, constraints
// named after table). check is the key-rules expression, or "" to leave it out (PostgreSQL
// adds it with ALTER TABLE so that it can be replaced).
func createTable(d Dialect, name, table, check string) string {
	idCol, bigint := "id INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER"
	if d == Postgres {
		// No default: the BEFORE INSERT trigger assigns the id after it holds the key's
		// lock, so ids of one key follow commit order.
		idCol, bigint = "id bigint PRIMARY KEY", "bigint"
	}
	now := nowMs(d)
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (\n", name)
	fmt.Fprintf(&b, "\t%s,\n", idCol)
	b.WriteString("\tevent_id text NOT NULL,\n")
	b.WriteString("\tevent_type text NOT NULL,\n")
	b.WriteString("\tcategory text NOT NULL,\n")
	b.WriteString("\tpartition_key text,\n")
	b.WriteString("\tpayload text NOT NULL,\n")
	b.WriteString("\tpriority integer NOT NULL DEFAULT 0,\n")
	b.WriteString("\tstatus text NOT NULL DEFAULT 'PENDING',\n")
	b.WriteString("\tattempts integer NOT NULL DEFAULT 0,\n")
	b.WriteString("\tlast_error text,\n")
	fmt.Fprintf(&b, "\tcreated_ms %s NOT NULL DEFAULT (%s),\n", bigint, now)
	fmt.Fprintf(&b, "\tupdated_ms %s NOT NULL DEFAULT (%s),\n", bigint, now)
	fmt.Fprintf(&b, "\tnext_attempt_ms %s NOT NULL DEFAULT 0,\n", bigint)
	fmt.Fprintf(&b, "\tpublished_ms %s,\n", bigint)
	fmt.Fprintf(&b, "\tpublish_seq %s,\n", bigint)
	b.WriteString("\tstream text,\n")
	b.WriteString("\tentry_id text,\n")
	b.WriteString("\ttraceparent text,\n")
	b.WriteString("\ttracestate text,\n")
	fmt.Fprintf(&b, "\tCONSTRAINT %s_event_id_unique UNIQUE (event_id),\n", table)
	fmt.Fprintf(&b, "\tCONSTRAINT %s_status_values CHECK (status IN ('PENDING', 'FAILED', 'PUBLISHED', 'ABANDONED'))", table)
	if check != "" {
		fmt.Fprintf(&b, ",\n\tCONSTRAINT %s_partition_key_rules CHECK (%s)", table, check)
	}
	b.WriteString("\n)")
	return b.String()
}

// auxiliary returns the statements that create the indexes, the lease and the meta table.
func auxiliary(d Dialect, t string) []string {
	bigint := "INTEGER"
	if d == Postgres {
		bigint = "bigint"
	}
	return []string{
		fmt.Sprintf("CREATE INDEX IF NOT EXISTS %[1]s_unpublished ON %[1]s (category, id) WHERE status IN ('PENDING', 'FAILED')", t),
		fmt.Sprintf("CREATE INDEX IF NOT EXISTS %[1]s_by_status ON %[1]s (status, id)", t),
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s_lease (\n"+
			"\tcategory text PRIMARY KEY,\n"+
			"\towner text NOT NULL,\n"+
			"\tgeneration %[2]s NOT NULL,\n"+
			"\texpires_ms %[2]s NOT NULL,\n"+
			"\tlast_seq %[2]s NOT NULL DEFAULT 0\n)", t, bigint),
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s_meta (name text PRIMARY KEY, value text NOT NULL)", t),
	}
}

// notifyChannel is the LISTEN/NOTIFY channel of a PostgreSQL outbox table: short and
// unique per schema-qualified table, so tables in different schemas do not wake each
// other's relays.
func notifyChannel(schema, table string) string {
	sum := sha256.Sum256([]byte(schema + "." + table))
	return "seqctl_outbox_" + hex.EncodeToString(sum[:8])
}

// pgOrderTrigger returns the PostgreSQL trigger function and trigger that keep each key's
// rows in commit order and wake the relay. Before each insert it takes a transaction-level
// advisory lock on (table, category, key), then assigns the row id from the sequence, then
// queues a NOTIFY (delivered at commit). Because the id is drawn only once the lock is held,
// a second transaction enqueueing the same key gets a larger id and cannot commit before
// the first has committed or rolled back: a relay that sees row N of a key never later finds
// a smaller id of that key committing. Rows without a key take no lock.
func pgOrderTrigger(schema, t string) []string {
	qualifiedSeq := sqlString(pgIdent(schema) + "." + t + "_id_seq")
	return []string{
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s_before_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	IF NEW.partition_key IS NOT NULL THEN
		PERFORM pg_advisory_xact_lock(hashtextextended(
			'seqctl-outbox:' || TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME || ':' || NEW.category || ':' || NEW.partition_key, 0));
	END IF;
	NEW.id := nextval(%[2]s::regclass);
	PERFORM pg_notify(%[3]s, NEW.category);
	RETURN NEW;
END
$fn$`, t, qualifiedSeq, sqlString(notifyChannel(schema, t))),
		fmt.Sprintf("DROP TRIGGER IF EXISTS %[1]s_order ON %[1]s", t),
		fmt.Sprintf("CREATE TRIGGER %[1]s_order BEFORE INSERT ON %[1]s FOR EACH ROW EXECUTE FUNCTION %[1]s_before_insert()", t),
	}
}

// pgIdent quotes a PostgreSQL identifier.
func pgIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// ErrSchema is matched by Migrate errors about the existing schema (a newer version, or
// rows that the new key rules would refuse).
var ErrSchema = errors.New("outbox: schema")

// Migrate creates the outbox table, its indexes, the lease and meta tables and (on
// PostgreSQL) the ordering trigger, or brings them up to date. It is idempotent and safe
// to run from several processes at once (PostgreSQL serializes it with an advisory lock,
// SQLite with its write lock); everything happens in one transaction.
//
// The partition-key CHECK constraint is generated from the domain's backfill suffix. When
// the suffix differs from the one recorded by the last Migrate, the constraint is replaced
// (on SQLite by rebuilding the table, which rewrites it); if existing rows break the new
// rules Migrate fails with ErrSchema and changes nothing.
func (o *Outbox) Migrate(ctx context.Context) error {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: migrate %s: begin: %w", o.table, err)
	}
	defer func() { _ = tx.Rollback() }()
	if o.dialect == Postgres {
		err = o.migratePostgres(ctx, tx)
	} else {
		err = o.migrateSQLite(ctx, tx)
	}
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: migrate %s: commit: %w", o.table, err)
	}
	return nil
}

func (o *Outbox) migratePostgres(ctx context.Context, tx *sql.Tx) error {
	t := o.table
	var schema sql.NullString
	if err := tx.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", t, err)
	}
	if !schema.Valid {
		return fmt.Errorf("%w: no current schema: set search_path to an existing schema in the DSN", ErrSchema)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "seqctl-outbox-migrate:"+schema.String+"."+t); err != nil {
		return fmt.Errorf("outbox: migrate %s: lock: %w", t, err)
	}
	stmts := []string{fmt.Sprintf("CREATE SEQUENCE IF NOT EXISTS %s_id_seq AS bigint", t), createTable(Postgres, t, t, "")}
	stmts = append(stmts, fmt.Sprintf("ALTER SEQUENCE %[1]s_id_seq OWNED BY %[1]s.id", t))
	for _, c := range traceColumns {
		stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s text", t, c))
	}
	stmts = append(stmts, auxiliary(Postgres, t)...)
	stmts = append(stmts, pgOrderTrigger(schema.String, t)...)
	if err := execAll(ctx, tx, t, stmts); err != nil {
		return err
	}
	recorded, err := o.readMeta(ctx, tx)
	if err != nil {
		return err
	}
	var hasRules bool
	err = tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = $1::regclass AND conname = $2)",
		t, t+"_partition_key_rules").Scan(&hasRules)
	if err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", t, err)
	}
	if !hasRules || recorded.suffix != o.suffix || recorded.keyRules != keyRulesVersion {
		stmts := []string{
			fmt.Sprintf("ALTER TABLE %[1]s DROP CONSTRAINT IF EXISTS %[1]s_partition_key_rules", t),
			fmt.Sprintf("ALTER TABLE %[1]s ADD CONSTRAINT %[1]s_partition_key_rules CHECK (%[2]s)", t, keyRulesCheck(Postgres, o.suffix)),
		}
		if err := execAll(ctx, tx, t, stmts); err != nil {
			return o.rulesError(err)
		}
	}
	return o.writeMeta(ctx, tx)
}

func (o *Outbox) migrateSQLite(ctx context.Context, tx *sql.Tx) error {
	t := o.table
	var existed bool
	if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)", t).Scan(&existed); err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", t, err)
	}
	stmts := append([]string{createTable(SQLite, t, t, keyRulesCheck(SQLite, o.suffix))}, auxiliary(SQLite, t)...)
	if err := execAll(ctx, tx, t, stmts); err != nil {
		return err
	}
	if err := addTraceColumnsSQLite(ctx, tx, t); err != nil {
		return err
	}
	recorded, err := o.readMeta(ctx, tx)
	if err != nil {
		return err
	}
	if existed && (recorded.suffix != o.suffix || recorded.keyRules != keyRulesVersion) {
		if err := rebuildSQLite(ctx, tx, t, keyRulesCheck(SQLite, o.suffix)); err != nil {
			return o.rulesError(err)
		}
	}
	return o.writeMeta(ctx, tx)
}

// traceColumns are the columns schema version 2 added: a table of version 1 gets them
// (empty) from Migrate.
var traceColumns = []string{"traceparent", "tracestate"}

// addTraceColumnsSQLite adds the trace columns a table made before them lacks (SQLite
// has no ADD COLUMN IF NOT EXISTS).
func addTraceColumnsSQLite(ctx context.Context, tx *sql.Tx, t string) error {
	for _, c := range traceColumns {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info(?) WHERE name = ?", t, c).Scan(&n); err != nil {
			return fmt.Errorf("outbox: migrate %s: %w", t, err)
		}
		if n == 0 {
			if err := execAll(ctx, tx, t, []string{fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s text", t, c)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// rebuildSQLite replaces the outbox table by a copy whose key-rules constraint is check
// ("" for none: tests use that to insert rows the rules would refuse). SQLite cannot alter
// a constraint in place. The AUTOINCREMENT counter is carried over, so ids never go back.
func rebuildSQLite(ctx context.Context, tx *sql.Tx, t, check string) error {
	tmp := t + "__rebuild"
	var counter sql.NullInt64
	_ = tx.QueryRowContext(ctx, "SELECT seq FROM sqlite_sequence WHERE name = ?", t).Scan(&counter)
	stmts := []string{
		"DROP TABLE IF EXISTS " + tmp,
		createTable(SQLite, tmp, t, check),
		fmt.Sprintf("INSERT INTO %s (%s) SELECT %[2]s FROM %s", tmp, outboxColumns, t),
		"DROP TABLE " + t,
		fmt.Sprintf("ALTER TABLE %s RENAME TO %s", tmp, t),
	}
	stmts = append(stmts, auxiliary(SQLite, t)[:2]...)
	if err := execAll(ctx, tx, t, stmts); err != nil {
		return err
	}
	if counter.Valid {
		if _, err := tx.ExecContext(ctx, "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", counter.Int64, t); err != nil {
			return fmt.Errorf("outbox: rebuild %s: keep the id counter: %w", t, err)
		}
	}
	return nil
}

func (o *Outbox) rulesError(err error) error {
	return fmt.Errorf("%w: cannot apply the partition-key rules for backfill suffix %q to %s: existing rows break them "+
		"(find them with: SELECT id, partition_key FROM %[3]s WHERE partition_key = %[4]s; keys with control characters "+
		"or braces are refused too: mark such rows ABANDONED), "+
		"or keep the previous backfill_suffix: %v", ErrSchema, o.suffix, o.table, sqlString(o.suffix), err)
}

type meta struct {
	version  int
	suffix   string
	keyRules int // keyRulesVersion of the CHECK in place; 0 before it was recorded
}

func (o *Outbox) readMeta(ctx context.Context, tx *sql.Tx) (meta, error) {
	pairs, err := queryRows(ctx, tx, o.q.readMeta, func(rows *sql.Rows) (kv [2]string, err error) {
		err = rows.Scan(&kv[0], &kv[1])
		return kv, err
	})
	if err != nil {
		return meta{}, fmt.Errorf("outbox: migrate %s: read %[1]s_meta: %w", o.table, err)
	}
	var m meta
	for _, kv := range pairs {
		switch name, value := kv[0], kv[1]; name {
		case "schema_version":
			m.version, _ = strconv.Atoi(value)
		case "backfill_suffix":
			m.suffix = value
		case "key_rules":
			m.keyRules, _ = strconv.Atoi(value)
		}
	}
	if m.version > schemaVersion {
		return meta{}, fmt.Errorf("%w: %s has schema version %d, newer than this seqctl's %d: upgrade seqctl", ErrSchema, o.table, m.version, schemaVersion)
	}
	return m, nil
}

func (o *Outbox) writeMeta(ctx context.Context, tx *sql.Tx) error {
	for _, kv := range [][2]string{{"schema_version", strconv.Itoa(schemaVersion)}, {"backfill_suffix", o.suffix}, {"key_rules", strconv.Itoa(keyRulesVersion)}} {
		if _, err := tx.ExecContext(ctx, o.q.writeMeta, kv[0], kv[1]); err != nil {
			return fmt.Errorf("outbox: migrate %s: write %[1]s_meta: %w", o.table, err)
		}
	}
	return nil
}

func execAll(ctx context.Context, tx *sql.Tx, table string, stmts []string) error {
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			first, _, _ := strings.Cut(s, "\n")
			return fmt.Errorf("outbox: migrate %s: %s: %w", table, first, err)
		}
	}
	return nil
}
