package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/pkg/engine"
)

// badKeys covers every partition-key rule, as a payload field value.
var badKeys = []struct {
	name  string
	value any // the client_id field; nil leaves it out
	raw   string
	rule  engine.KeyRule
}{
	{name: "missing", rule: engine.KeyEmpty},
	{name: "null", raw: `{"client_id":null}`, rule: engine.KeyEmpty},
	{name: "empty", value: "", rule: engine.KeyEmpty},
	{name: "too long", value: strings.Repeat("k", engine.MaxKeyBytes+1), rule: engine.KeyTooLong},
	{name: "colon", value: "a:b", rule: engine.KeyHasColon},
	{name: "dlq", value: "dlq", rule: engine.KeyReservedToken},
	{name: "backfill suffix", value: "backfill", rule: engine.KeyReservedToken},
	{name: "sentinel", value: "__partitions__", rule: engine.KeySentinel},
	{name: "bool", value: true, rule: engine.KeyWrongType},
	{name: "float", value: 1.5, rule: engine.KeyWrongType},
}

func (e *env) count(tb testing.TB, table string) int {
	tb.Helper()
	var n int
	if err := e.db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// A bad key fails the caller's operation: the caller rolls back and neither
// its own row nor any outbox row remains. Enqueue itself writes nothing for a bad key.
func TestEnqueueBadKeyRollsBackAndWritesNothing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		for _, inline := range []bool{false, true} {
			name := "redis broker"
			if inline {
				name = "inline broker (key stored, not applied)"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, d, domainOpts{inline: inline})
				ctx := context.Background()
				if _, err := e.db.Exec("CREATE TABLE widgets (name text)"); err != nil {
					t.Fatal(err)
				}
				insWidget := "INSERT INTO widgets (name) VALUES (?)"
				if d == Postgres {
					insWidget = rebind(insWidget)
				}
				for _, bk := range badKeys {
					t.Run(bk.name, func(t *testing.T) {
						data := []byte(bk.raw)
						if bk.raw == "" {
							data = orderData(bk.value, 1)
						}
						tx, err := e.db.BeginTx(ctx, nil)
						if err != nil {
							t.Fatal(err)
						}
						if _, err := tx.ExecContext(ctx, insWidget, "w"); err != nil {
							t.Fatal(err)
						}
						if _, err := e.ob.Enqueue(ctx, tx, Event{Type: "OrderPlaced", Data: orderData("good", 1)}); err != nil {
							t.Fatal(err)
						}
						_, err = e.ob.Enqueue(ctx, tx, Event{Type: "OrderPlaced", Data: data})
						var ike *engine.InvalidKeyError
						if !errors.As(err, &ike) {
							t.Fatalf("Enqueue(%s) = %v; want *engine.InvalidKeyError", data, err)
						}
						got := struct {
							Rule            engine.KeyRule
							Category, Field string
						}{ike.Rule, ike.Category, ike.Field}
						want := got
						want.Rule, want.Category, want.Field = bk.rule, "order", "client_id"
						if diff := cmp.Diff(want, got); diff != "" {
							t.Errorf("error %q (-want +got):\n%s", err, diff)
						}
						if !errors.Is(err, engine.ErrInvalidKey) || !strings.Contains(err.Error(), `category "order"`) {
							t.Errorf("error %q should match engine.ErrInvalidKey and name the category", err)
						}
						if err := tx.Rollback(); err != nil {
							t.Fatal(err)
						}
						if n, m := e.count(t, e.ob.Table()), e.count(t, "widgets"); n != 0 || m != 0 {
							t.Errorf("after rollback: %d outbox rows and %d widgets; want none", n, m)
						}
					})
				}
				t.Run("nothing written even if the caller commits", func(t *testing.T) {
					tx, err := e.db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := e.ob.Enqueue(ctx, tx, Event{Type: "OrderPlaced", Data: orderData("a:b", 1)}); err == nil {
						t.Fatal("Enqueue accepted key a:b")
					}
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
					if n := e.count(t, e.ob.Table()); n != 0 {
						t.Errorf("%d outbox rows; want none", n)
					}
				})
				t.Run("a good key is stored on the row", func(t *testing.T) {
					en := e.enqueue(t, Event{Type: "OrderPlaced", Data: []byte(`{"client_id": 42, "n": 1}`), Priority: 3})
					got := e.row(t, en.EventID)
					want := stored{ID: en.RowID, EventID: en.EventID, Key: "42", Status: StatusPending}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("row (-want +got):\n%s", diff)
					}
				})
			})
		}
	})
}

func TestEnqueueRefusesUnusableEvents(t *testing.T) {
	e := newEnv(t, SQLite, domainOpts{})
	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	tests := []struct {
		name    string
		tx      bool
		ev      Event
		wantIs  error
		wantHas string
	}{
		{name: "no transaction", ev: Event{Type: "OrderPlaced", Data: orderData("c", 1)}, wantHas: "needs the caller's transaction"},
		{name: "undeclared type", tx: true, ev: Event{Type: "Nope", Data: []byte(`{}`)}, wantIs: engine.ErrUnknownEvent, wantHas: "declare it"},
		{name: "invalid JSON", tx: true, ev: Event{Type: "AuditLogged", Data: []byte(`{`)}, wantHas: "not valid JSON"},
		{name: "not an object for a partitioned category", tx: true, ev: Event{Type: "OrderPlaced", Data: []byte(`[1]`)}, wantHas: "not a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var use = tx
			if !tc.tx {
				use = nil
			}
			_, err := e.ob.Enqueue(ctx, use, tc.ev)
			if err == nil || !strings.Contains(err.Error(), tc.wantHas) || tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Enqueue = %v; want an error containing %q (is %v)", err, tc.wantHas, tc.wantIs)
			}
		})
	}
}
