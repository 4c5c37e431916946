package outbox

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/pkg/engine"
)

// directKeys are keys inserted with plain SQL, as an application in another language
// would, against the CHECK constraint generated for the backfill suffix "slow".
var directKeys = []struct {
	name string
	key  sql.NullString
	ok   bool
}{
	{name: "no key (unpartitioned)", ok: true},
	{name: "plain", key: valid("client-1"), ok: true},
	{name: "255 bytes", key: valid(strings.Repeat("é", 127) + "k"), ok: true},
	{name: "default suffix is an ordinary key here", key: valid("backfill"), ok: true},
	{name: "three underscores", key: valid("___"), ok: true},
	{name: "dunder prefix only", key: valid("__x"), ok: true},
	{name: "empty", key: valid("")},
	{name: "256 bytes", key: valid(strings.Repeat("é", 128))},
	{name: "colon", key: valid("a:b")},
	{name: "dlq", key: valid("dlq")},
	{name: "configured suffix", key: valid("slow")},
	{name: "sentinel", key: valid("__partitions__")},
	{name: "four underscores", key: valid("____")},
	{name: "newline", key: valid("client\n1")},
	{name: "unit separator", key: valid("a\x1fb")},
	{name: "DEL", key: valid("a\x7f")},
	{name: "open brace", key: valid("{order")},
	{name: "close brace", key: valid("a}")},
	{name: "unicode and spaces", key: valid("café ü"), ok: true},
	{name: "tilde and brackets", key: valid("a~[b]"), ok: true},
}

func valid(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

// In direct SQL: the CHECK constraint refuses every rule, generated from the
// configured backfill suffix; the refusal fails the inserting transaction.
func TestCheckConstraintRefusesBadKeysOnDirectInsert(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{suffix: "slow"})
		for i, tc := range directKeys {
			t.Run(tc.name, func(t *testing.T) {
				// Sanity: the SQL rules and engine.ValidateKey agree.
				if engineOK := !tc.key.Valid || engine.ValidateKey(tc.key.String, "slow") == nil; engineOK != tc.ok {
					t.Fatalf("engine.ValidateKey(%q) ok = %v; the table says %v", tc.key.String, engineOK, tc.ok)
				}
				ins := "INSERT INTO seqctl_outbox (event_id, event_type, category, partition_key, payload) VALUES (?, 'OrderPlaced', 'order', ?, '{}')"
				if d == Postgres {
					ins = rebind(ins)
				}
				_, err := e.db.Exec(ins, "direct-"+string(rune('a'+i)), tc.key)
				switch {
				case tc.ok && err != nil:
					t.Errorf("insert %q refused: %v", tc.key.String, err)
				case !tc.ok && err == nil:
					t.Errorf("insert %q accepted; want the CHECK constraint to refuse it", tc.key.String)
				case !tc.ok && !strings.Contains(err.Error(), "seqctl_outbox_partition_key_rules"):
					t.Errorf("insert %q: %v; want an error naming seqctl_outbox_partition_key_rules", tc.key.String, err)
				}
			})
		}
	})
}

func TestMigrateIsIdempotentAndFollowsTheSuffix(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		ctx := context.Background()
		e := newEnv(t, d, domainOpts{})
		if err := e.ob.Migrate(ctx); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
		first := e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("slow", 1)})

		// The suffix becomes "slow": a row already uses it as a key, so Migrate refuses.
		slow, err := New(e.db, d, testDomain(t, domainOpts{suffix: "slow"}))
		if err != nil {
			t.Fatal(err)
		}
		if err := slow.Migrate(ctx); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "partition_key = 'slow'") {
			t.Fatalf("Migrate with conflicting rows = %v; want ErrSchema that says how to find them", err)
		}
		if _, err := e.db.Exec("DELETE FROM seqctl_outbox"); err != nil {
			t.Fatal(err)
		}
		if err := slow.Migrate(ctx); err != nil {
			t.Fatal(err)
		}

		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		next, err := slow.Enqueue(ctx, tx, Event{Type: "OrderPlaced", Data: orderData("backfill", 1)})
		if err != nil {
			t.Fatalf("key backfill under suffix slow: %v", err)
		}
		if next.RowID <= first.RowID {
			t.Errorf("row id %d after the rebuild is not above %d: ids must never go back", next.RowID, first.RowID)
		}
		ins := "INSERT INTO seqctl_outbox (event_id, event_type, category, partition_key, payload) VALUES ('x', 'OrderPlaced', 'order', 'slow', '{}')"
		if _, err := tx.Exec(ins); err == nil {
			t.Error("a direct insert of key slow was accepted after the suffix changed to slow")
		}
	})
}

func TestNewRefusesBadArguments(t *testing.T) {
	db, _ := openDB(t, "sqlite::memory:")
	dom := testDomain(t, domainOpts{})
	tests := []struct {
		name    string
		db      *sql.DB
		dialect Dialect
		dom     *engine.Domain
		opts    []Option
		wantHas string
	}{
		{name: "no db", dialect: SQLite, dom: dom, wantHas: "no database"},
		{name: "no dialect", db: db, dom: dom, wantHas: "unknown dialect"},
		{name: "uninitialized domain", db: db, dialect: SQLite, dom: engine.NewDomain("x"), wantHas: "not initialized"},
		{name: "bad table name", db: db, dialect: SQLite, dom: dom, opts: []Option{WithTable("Outbox; drop")}, wantHas: "not a lower-case SQL identifier"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.db, tc.dialect, tc.dom, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.wantHas) {
				t.Errorf("New = %v; want an error containing %q", err, tc.wantHas)
			}
		})
	}
}

func TestCustomTableName(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		db, _ := openDB(t, testDSN(t, d))
		ob, err := New(db, d, testDomain(t, domainOpts{}), WithTable("shop_events"))
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"shop_events", "shop_events_lease", "shop_events_meta"} {
			if _, err := db.Exec("SELECT count(*) FROM " + table); err != nil {
				t.Errorf("table %s: %v", table, err)
			}
		}
	})
}

// A table migrated before control characters and braces were refused gets the new CHECK
// on the next Migrate (the meta table records which rules the CHECK holds).
func TestMigrateUpgradesTheKeyRules(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		ctx := context.Background()
		e := newEnv(t, d, domainOpts{})
		// Put the table back in its earlier state: no control-character rule, recorded
		// as key rules 1.
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		old := "status = 'ABANDONED' OR partition_key IS NULL OR partition_key <> ''"
		if d == Postgres {
			_, err = tx.Exec("ALTER TABLE seqctl_outbox DROP CONSTRAINT seqctl_outbox_partition_key_rules")
			if err == nil {
				_, err = tx.Exec("ALTER TABLE seqctl_outbox ADD CONSTRAINT seqctl_outbox_partition_key_rules CHECK (" + old + ")")
			}
		} else {
			err = rebuildSQLite(ctx, tx, "seqctl_outbox", old)
		}
		if err == nil {
			_, err = tx.Exec(rebindFor(d, "UPDATE seqctl_outbox_meta SET value = '1' WHERE name = 'key_rules'"))
		}
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			t.Fatal(err)
		}
		ins := rebindFor(d, "INSERT INTO seqctl_outbox (event_id, event_type, category, partition_key, payload) VALUES (?, 'OrderPlaced', 'order', ?, '{}')")
		if _, err := e.db.Exec(ins, "before", "a\nb"); err != nil {
			t.Fatalf("the earlier CHECK refused a newline: %v", err)
		}
		if _, err := e.db.Exec("DELETE FROM seqctl_outbox"); err != nil {
			t.Fatal(err)
		}
		if err := e.ob.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.Exec(ins, "after", "a\nb"); err == nil || !strings.Contains(err.Error(), "seqctl_outbox_partition_key_rules") {
			t.Errorf("after Migrate, a key with a newline: %v; want the CHECK to refuse it", err)
		}
	})
}

func rebindFor(d Dialect, q string) string {
	if d == Postgres {
		return rebind(q)
	}
	return q
}
