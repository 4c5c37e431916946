package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/faultproxy"
	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/sqldb"
)

func TestHighestParam(t *testing.T) {
	for _, tt := range []struct {
		stmt string
		want int
		err  string
	}{
		{"INSERT INTO orders(id) VALUES ($1::jsonb->>'order_id')", 1, ""},
		{"INSERT INTO t VALUES ($1, $3, $2)", 3, ""},
		{"UPDATE t SET g = $5 WHERE k = $3 AND d = $1 AND e = $2 AND i = $4", 5, ""},
		{"SELECT '$9' || \"$8\" -- $7\n /* $6 */ || $$ $9 $$ || $tag$ $9 $tag$, $2", 2, ""},
		{"SELECT 'it''s $9', $1", 1, ""},
		{"DELETE FROM t", 0, ""},
		{"SELECT $6", 0, "names $6"},
		{"   ", 0, "is empty"},
	} {
		got, err := highestParam(tt.stmt)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("highestParam(%q) = %d, %v; want an error containing %q", tt.stmt, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("highestParam(%q) = %d, %v; want %d", tt.stmt, got, err, tt.want)
		}
	}
}

// sinkFor starts a sink of stmt on a fresh database of the dialect, with an orders table
// and a migrated inbox.
func sinkFor(t *testing.T, dialect, stmt string) (*Sink, *sql.DB) {
	t.Helper()
	dsn := sqltest.SQLiteDSN(t, "sink.db")
	ddl := "CREATE TABLE orders (n INTEGER PRIMARY KEY AUTOINCREMENT, id text NOT NULL UNIQUE, client text, entry text, generation INTEGER)"
	if dialect == "postgres" {
		dsn = sqltest.PostgresDSN(t)
		ddl = "CREATE TABLE orders (n bigserial PRIMARY KEY, id text NOT NULL UNIQUE, client text, entry text, generation bigint)"
	}
	db, d, err := sqldb.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ib, _ := New(db, d)
	if err := ib.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	s, err := NewSink(SinkConfig{Handler: "OrderProjector", DSN: func() (string, error) { return dsn, nil }, Statement: stmt, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, db
}

func deliverTo(s *Sink, entry string, gen int64, data string) error {
	ctx := engine.WithDelivery(context.Background(), engine.Delivery{Handler: "OrderProjector", Category: "order", Key: "c-1",
		Stream: "order:c-1", EntryID: entry, Generation: gen})
	return s.Handler()(ctx, engine.Event{ID: "ev-" + entry, Type: "OrderPlaced", Category: "order", Key: "c-1", Data: []byte(data)})
}

// The statement gets the parameters it names, runs once per entry, and an error it
// raises fails the attempt with the database's message.
func TestSinkRunsTheStatementOncePerEntry(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			stmt := "INSERT INTO orders(id, client, entry, generation) VALUES (json_extract($1, '$.order_id'), $3, $4, $5)"
			if dialect == "postgres" {
				stmt = "INSERT INTO orders(id, client, entry, generation) VALUES ($1::jsonb->>'order_id', $3, $4, $5)"
			}
			s, db := sinkFor(t, dialect, stmt)
			if ok, why := s.Ready(); !ok {
				t.Fatalf("not ready after Start: %s", why)
			}
			for _, step := range []struct {
				entry string
				data  string
			}{{"1-0", `{"order_id":"o-1"}`}, {"1-0", `{"order_id":"o-1"}`}, {"2-0", `{"order_id":"o-2"}`}} {
				if err := deliverTo(s, step.entry, 7, step.data); err != nil {
					t.Fatalf("entry %s: %v", step.entry, err)
				}
			}
			var got []string
			rows, _ := db.Query("SELECT id, client, entry, generation FROM orders ORDER BY n")
			for rows.Next() {
				var id, c, e string
				var g int64
				_ = rows.Scan(&id, &c, &e, &g)
				got = append(got, fmt.Sprintf("%s %s %s %d", id, c, e, g))
			}
			rows.Close()
			if want := "[o-1 c-1 1-0 7 o-2 c-1 2-0 7]"; fmt.Sprint(got) != want {
				t.Errorf("orders %v, want %s", got, want)
			}
			// A duplicate order id breaks the UNIQUE constraint: the statement's error.
			err := deliverTo(s, "3-0", 7, `{"order_id":"o-1"}`)
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unique") {
				t.Errorf("a statement that raises: %v, want the database's unique-constraint error", err)
			}
		})
	}
}

// A sink whose inbox row belongs to a newer owner refuses with ErrStale (an
// engine.ErrFenced), so the engine gives the partition up.
func TestSinkStaleDeliveryIsFenced(t *testing.T) {
	s, _ := sinkFor(t, "sqlite", "INSERT INTO orders(id) VALUES (json_extract($1, '$.order_id'))")
	if err := deliverTo(s, "1-0", 9, `{"order_id":"o-1"}`); err != nil {
		t.Fatal(err)
	}
	if err := deliverTo(s, "2-0", 8, `{"order_id":"o-2"}`); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("a delivery of an older generation: %v, want an engine.ErrFenced", err)
	}
}

// Start refuses what waiting cannot fix, naming the handler: a statement the database
// refuses to prepare, an inbox table that does not exist, a DSN it cannot read.
func TestSinkStartRefusesWhatWaitingCannotFix(t *testing.T) {
	dsn := sqltest.PostgresDSN(t)
	db, d, err := sqldb.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ib, _ := New(db, d)
	if err := ib.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := func(stmt, table string, dsnOf func() (string, error)) error {
		s, err := NewSink(SinkConfig{Handler: "OrderProjector", DSN: dsnOf, Statement: stmt, Table: table})
		if err != nil {
			return err
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.Start(ctx)
	}
	fixed := func() (string, error) { return dsn, nil }
	for _, tt := range []struct {
		name, stmt, table string
		dsn               func() (string, error)
		want              []string
	}{
		{"bad statement", "INSERT INTO nowhere VALUES ($1)", "", fixed, []string{"OrderProjector", "refused the statement", "nowhere"}},
		{"bad syntax", "INSERTT 1", "", fixed, []string{"OrderProjector", "refused the statement", "syntax"}},
		{"no inbox table", "SELECT $1::text", "other_inbox", fixed, []string{"OrderProjector", "other_inbox", "seqctl inbox migrate"}},
		{"unreadable dsn", "SELECT $1::text", "", func() (string, error) { return "", errors.New("ORDERS_DB is not set") }, []string{"OrderProjector", "ORDERS_DB is not set"}},
		{"parameter out of range", "SELECT $7", "", fixed, []string{"OrderProjector", "names $7"}},
	} {
		err := start(tt.stmt, tt.table, tt.dsn)
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want an error containing %q", tt.name, err, w)
			}
		}
	}
}

// A server that refuses the password ends Start at once with its message; the password
// is never in the error.
func TestSinkStartRefusesAWrongPassword(t *testing.T) {
	addr := sqltest.RefusingPostgres(t)
	dsn := "postgres://app:s3cret-pass@" + addr + "/app?sslmode=disable"
	s, err := NewSink(SinkConfig{Handler: "OrderProjector", DSN: func() (string, error) { return dsn, nil }, Statement: "SELECT $1::text"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = s.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "OrderProjector") || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("Start against a server refusing the password: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret-pass") {
		t.Errorf("the error shows the password: %v", err)
	}
}

// While the database cannot be reached, Start waits (Ready false, one log line per
// cause) and goes on once it answers.
func TestSinkStartWaitsForTheDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens: connection refused
	var logs testkit.Buffer
	dsn := sqltest.PostgresDSN(t)
	if db, d, err := sqldb.Open(dsn); err == nil {
		ib, _ := New(db, d)
		if err := ib.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		_ = db.Close()
	}
	dsn = strings.Replace(dsn, sqltest.PostgresAddr(), addr, 1) // where nothing listens yet
	s, err := NewSink(SinkConfig{Handler: "OrderProjector", DSN: func() (string, error) { return dsn, nil },
		Statement: "SELECT $1::text", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() { done <- s.Start(context.Background()) }()
	testkit.WaitFor(t, 10*time.Second, "the sink to say the database is unreachable", func() bool {
		ok, why := s.Ready()
		return !ok && strings.Contains(why, "cannot be reached")
	})
	time.Sleep(1500 * time.Millisecond) // several retries
	if n := strings.Count(logs.String(), "database unreachable"); n != 1 {
		t.Errorf("logged %d times, want once for one cause:\n%s", n, logs.String())
	}
	// The database comes up where the DSN points: a proxy to the real server.
	faultproxy.StartOn(t, addr, sqltest.PostgresAddr())
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start after the database came up: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Start did not return after the database came up")
	}
	if ok, why := s.Ready(); !ok {
		t.Errorf("not ready: %s", why)
	}
}

// On PostgreSQL a statement may name any of the parameters, in any order, with or without
// a WITH clause of its own.
func TestSinkStatementNamesAnyParameter(t *testing.T) {
	for i, stmt := range []string{
		"INSERT INTO orders(id, entry) VALUES ($2, $4)",
		"UPDATE orders SET entry = $4 WHERE client = $3",
		"WITH x AS (SELECT 1 AS one) INSERT INTO orders(id, generation) SELECT $2 || '-with', $5 FROM x",
		"with recursive r(n) AS (SELECT 1) INSERT INTO orders(id) SELECT $2 || '-rec' FROM r",
		"  -- a comment first\n  DELETE FROM orders WHERE id = $2",
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s, _ := sinkFor(t, "postgres", stmt)
			if err := deliverTo(s, "1-0", 3, `{}`); err != nil {
				t.Fatalf("%q: %v", stmt, err)
			}
		})
	}
	if _, ok := typedParams("MERGE INTO t USING s ON true WHEN MATCHED THEN DO NOTHING"); ok {
		t.Error("a MERGE was given the parameters' prefix, which PostgreSQL refuses before WITH")
	}
}
