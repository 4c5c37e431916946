package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rawRow is a row inserted with plain SQL, as an application in another language would.
type rawRow struct {
	eventID, typ, category string
	key                    sql.NullString
	payload                string
	priority               int
}

// insertRaw inserts a row with SQL. With bypass the partition-key CHECK constraint is not
// enforced for this insert (SQLite: PRAGMA ignore_check_constraints on one connection;
// PostgreSQL: the constraint is dropped and re-added NOT VALID in the same transaction), to
// plant rows the relay must abandon.
func (e *env) insertRaw(tb testing.TB, r rawRow, bypass bool) {
	tb.Helper()
	ctx := context.Background()
	t := e.ob.Table()
	ins := "INSERT INTO " + t + " (event_id, event_type, category, partition_key, payload, priority) VALUES (?, ?, ?, ?, ?, ?)"
	if e.dialect == Postgres {
		ins = rebind(ins)
	}
	args := []any{r.eventID, r.typ, r.category, r.key, r.payload, r.priority}
	if !bypass {
		if _, err := e.db.ExecContext(ctx, ins, args...); err != nil {
			tb.Fatal(err)
		}
		return
	}
	if e.dialect == SQLite {
		conn, err := e.db.Conn(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		defer conn.Close()
		for _, s := range []string{"PRAGMA ignore_check_constraints = ON", ins, "PRAGMA ignore_check_constraints = OFF"} {
			var a []any
			if s == ins {
				a = args
			}
			if _, err := conn.ExecContext(ctx, s, a...); err != nil {
				tb.Fatalf("%s: %v", s, err)
			}
		}
		return
	}
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, s := range []string{
		fmt.Sprintf("ALTER TABLE %[1]s DROP CONSTRAINT %[1]s_partition_key_rules", t),
		ins,
		fmt.Sprintf("ALTER TABLE %[1]s ADD CONSTRAINT %[1]s_partition_key_rules CHECK (%[2]s) NOT VALID", t, keyRulesCheck(Postgres, e.ob.suffix)),
	} {
		var a []any
		if s == ins {
			a = args
		}
		if _, err := tx.ExecContext(ctx, s, a...); err != nil {
			tb.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// streams returns every event id in every stream of the test's Redis, by stream.
func (e *env) streams(tb testing.TB) map[string][]string {
	tb.Helper()
	ctx := context.Background()
	keys, err := e.rdb.Keys(ctx, "*").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string][]string{}
	for _, k := range keys {
		if typ, _ := e.rdb.Type(ctx, k).Result(); typ != "stream" || strings.HasPrefix(k, "__seqctl__") {
			continue
		}
		for _, en := range e.stream(tb, k) {
			out[k] = append(out[k], en.EventID)
		}
	}
	return out
}

// The relay routes each row as the router does.
func TestRelayRoutesRows(t *testing.T) {
	valid := func(k string) sql.NullString { return sql.NullString{String: k, Valid: true} }
	type want struct {
		Status    Status
		Stream    string // "" when nothing may be published
		Key       string // the key in the envelope
		ReasonHas string // for ABANDONED
	}
	tests := []struct {
		name string
		opts domainOpts
		rows []rawRow // inserted in order; bypass the CHECK for all of them
		want []want
	}{{
		name: "keyed row to its partition stream",
		opts: domainOpts{lanes: true},
		rows: []rawRow{{typ: "OrderPlaced", category: "order", key: valid("c-1"), payload: `{"client_id":"c-1"}`, priority: 9}},
		want: []want{{Status: StatusPublished, Stream: "order:c-1", Key: "c-1"}},
	}, {
		name: "low-priority keyed row to the backfill lane",
		opts: domainOpts{lanes: true},
		rows: []rawRow{{typ: "OrderPlaced", category: "order", key: valid("c-1"), payload: `{"client_id":"c-1"}`, priority: 1}},
		want: []want{{Status: StatusPublished, Stream: "order:c-1:backfill", Key: "c-1"}},
	}, {
		name: "backfill lane with a configured suffix",
		opts: domainOpts{lanes: true, suffix: "slow"},
		rows: []rawRow{{typ: "OrderPlaced", category: "order", key: valid("backfill"), payload: `{"client_id":"backfill"}`}},
		want: []want{{Status: StatusPublished, Stream: "order:backfill:slow", Key: "backfill"}},
	}, {
		name: "lanes off: low priority stays on the primary lane",
		rows: []rawRow{{typ: "OrderPlaced", category: "order", key: valid("c-1"), payload: `{"client_id":"c-1"}`, priority: -3}},
		want: []want{{Status: StatusPublished, Stream: "order:c-1", Key: "c-1"}},
	}, {
		name: "unkeyed row to the base category",
		opts: domainOpts{lanes: true},
		rows: []rawRow{{typ: "AuditLogged", category: "audit", payload: `{"msg":"m"}`, priority: 1}},
		want: []want{{Status: StatusPublished, Stream: "audit"}},
	}, {
		name: "no capability: keyed row to the base category",
		opts: domainOpts{inline: true, lanes: true},
		rows: []rawRow{{typ: "OrderPlaced", category: "order", key: valid("c-1"), payload: `{"client_id":"c-1"}`, priority: 1}},
		want: []want{{Status: StatusPublished, Stream: "order"}},
	}, {
		name: "no capability: an invalid key is still abandoned",
		opts: domainOpts{inline: true},
		rows: []rawRow{
			{typ: "OrderPlaced", category: "order", key: valid("__partitions__"), payload: `{}`},
			{typ: "OrderPlaced", category: "order", key: valid("c-1"), payload: `{"client_id":"c-1"}`},
		},
		want: []want{{Status: StatusAbandoned, ReasonHas: "reserved __name__ form"}, {Status: StatusPublished, Stream: "order"}},
	}, {
		name: "key with a colon abandoned, the next row of the category published",
		rows: []rawRow{
			{typ: "OrderPlaced", category: "order", key: valid("a:b"), payload: `{"client_id":"a:b"}`},
			{typ: "OrderShipped", category: "order", key: valid("c-2"), payload: `{"client_id":"c-2"}`},
		},
		want: []want{{Status: StatusAbandoned, ReasonHas: `contains ':'`}, {Status: StatusPublished, Stream: "order:c-2", Key: "c-2"}},
	}, {
		name: "reserved token and missing key abandoned, next row published",
		rows: []rawRow{
			{typ: "OrderPlaced", category: "order", key: valid("dlq"), payload: `{"client_id":"dlq"}`},
			{typ: "OrderPlaced", category: "order", payload: `{}`},
			{typ: "OrderPlaced", category: "order", key: valid("c-3"), payload: `{"client_id":"c-3"}`},
		},
		want: []want{
			{Status: StatusAbandoned, ReasonHas: `reserved lane token "dlq"`},
			{Status: StatusAbandoned, ReasonHas: "null or empty"},
			{Status: StatusPublished, Stream: "order:c-3", Key: "c-3"},
		},
	}, {
		name: "undeclared event type abandoned",
		rows: []rawRow{
			{typ: "OrderLost", category: "order", key: valid("c-1"), payload: `{"client_id":"c-1"}`},
			{typ: "OrderPlaced", category: "order", key: valid("c-1"), payload: `{"client_id":"c-1"}`},
		},
		want: []want{{Status: StatusAbandoned, ReasonHas: "unknown event type"}, {Status: StatusPublished, Stream: "order:c-1", Key: "c-1"}},
	}}
	forEachDialect(t, func(t *testing.T, d Dialect) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, d, tc.opts)
				for i, r := range tc.rows {
					r.eventID = fmt.Sprintf("ev-%d", i)
					e.insertRaw(t, r, true)
				}
				if _, err := e.relay(t, nil, nil).Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
				rows := e.rows(t)
				wantStreams := map[string][]string{}
				for i, w := range tc.want {
					got := rows[i]
					if got.Status != w.Status || got.Stream != w.Stream && w.Stream != "" {
						t.Errorf("row %d (%s): status %s, stream %q; want %s, %q (last error %q)", i, got.EventID, got.Status, got.Stream, w.Status, w.Stream, got.LastError)
					}
					if w.ReasonHas != "" && !strings.Contains(got.LastError, w.ReasonHas) {
						t.Errorf("row %d: reason %q does not contain %q", i, got.LastError, w.ReasonHas)
					}
					if w.Stream != "" {
						wantStreams[w.Stream] = append(wantStreams[w.Stream], got.EventID)
						en := e.stream(t, w.Stream)
						if len(en) == 0 || en[0].Key != w.Key || en[0].EntryID != got.EntryID {
							t.Errorf("row %d: stream %s holds %+v; want the envelope key %q and the row's entry id %s", i, w.Stream, en, w.Key, got.EntryID)
						}
					}
				}
				gotStreams := e.streams(t)
				if diff := cmp.Diff(wantStreams, gotStreams); diff != "" {
					t.Errorf("event ids by stream (-want +got):\n%s", diff)
				}
			})
		}
	})
}
