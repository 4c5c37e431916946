package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/sqldb"
)

// forEachDialect runs fn on a fresh database of each dialect.
func forEachDialect(t *testing.T, fn func(t *testing.T, ib *Inbox)) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := sqltest.SQLiteDSN(t, "inbox.db")
			if name == "postgres" {
				dsn = sqltest.PostgresDSN(t)
			}
			fn(t, newTestInbox(t, dsn))
		})
	}
}

// newTestInbox opens dsn, migrates an inbox and an effects table (one row per applied
// effect, in the order applied).
func newTestInbox(t *testing.T, dsn string) *Inbox {
	t.Helper()
	db, d, err := sqldb.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ib, err := New(db, d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		t.Fatalf("a second Migrate: %v", err)
	}
	ddl := "CREATE TABLE effects (n INTEGER PRIMARY KEY AUTOINCREMENT, entry text NOT NULL, generation INTEGER NOT NULL)"
	if d == sqldb.Postgres {
		ddl = "CREATE TABLE effects (n bigserial PRIMARY KEY, entry text NOT NULL, generation bigint NOT NULL)"
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	return ib
}

// record is the effect under test: one row per run that commits.
func record(d engine.Delivery) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (entry, generation) VALUES ($1, $2)", d.EntryID, d.Generation)
		return err
	}
}

// effects lists the committed effects in the order applied, as "entry@generation".
func effects(t *testing.T, ib *Inbox) []string {
	t.Helper()
	rows, err := ib.DB().Query("SELECT entry, generation FROM effects ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var e string
		var g int64
		if err := rows.Scan(&e, &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s@%d", e, g))
	}
	return out
}

func delivery(entry string, gen int64) engine.Delivery {
	return engine.Delivery{Handler: "Projector", Category: "order", Key: "c-1", Stream: "order:c-1", EntryID: entry, Generation: gen}
}

func apply(t *testing.T, ib *Inbox, d engine.Delivery) (Outcome, error) {
	t.Helper()
	return ib.Apply(context.Background(), d, record(d))
}

// Each entry applies once; an entry at or below the applied one is a duplicate, whatever
// the generation of its delivery, and runs nothing.
func TestEachEntryAppliesOnceInOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		steps := []struct {
			d    engine.Delivery
			want Outcome
		}{
			{delivery("5-0", 1), Applied},
			{delivery("5-0", 1), Duplicate}, // a redelivery after a lost acknowledgement
			{delivery("4-9", 1), Duplicate}, // below the applied one
			{delivery("5-1", 1), Applied},   // same millisecond, later sequence
			{delivery("5-1", 2), Duplicate}, // a new owner redelivers what was applied
			{delivery("10-0", 2), Applied},  // and goes on
			{delivery("9-0", 3), Duplicate}, // ids compare as numbers, not as text
			{delivery("100-0", 3), Applied},
		}
		for _, s := range steps {
			got, err := apply(t, ib, s.d)
			if err != nil || got != s.want {
				t.Fatalf("Apply(%s@%d) = %v, %v; want %v", s.d.EntryID, s.d.Generation, got, err, s.want)
			}
		}
		want := []string{"5-0@1", "5-1@1", "10-0@2", "100-0@3"}
		if got := effects(t, ib); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("effects %v, want %v", got, want)
		}
		// Another handler and another lane each have their own row.
		other := delivery("1-0", 1)
		other.Handler = "Mailer"
		lane := delivery("1-0", 1)
		lane.Stream = "order:c-1:backfill"
		for _, d := range []engine.Delivery{other, lane} {
			if got, err := apply(t, ib, d); err != nil || got != Applied {
				t.Errorf("Apply(%s on %s) = %v, %v; want applied", d.Handler, d.Stream, got, err)
			}
		}
	})
}

// A delivery of an older generation than the row's is refused with ErrStale, which the
// engine takes for a lost lease; fn does not run.
func TestStaleGenerationIsRefused(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		if _, err := apply(t, ib, delivery("5-0", 7)); err != nil {
			t.Fatal(err)
		}
		ran := false
		_, err := ib.Apply(context.Background(), delivery("6-0", 6), func(context.Context, *sql.Tx) error { ran = true; return nil })
		if !errors.Is(err, ErrStale) || !errors.Is(err, engine.ErrFenced) {
			t.Fatalf("Apply from generation 6 after 7: %v, want ErrStale (an engine.ErrFenced)", err)
		}
		if ran {
			t.Error("fn ran for a stale delivery")
		}
		if got := effects(t, ib); len(got) != 1 {
			t.Errorf("effects %v, want only the first", got)
		}
	})
}

// An error of fn rolls its effects back and records nothing: the next delivery runs fn
// again.
func TestFailedAttemptLeavesNothing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		d := delivery("5-0", 1)
		boom := errors.New("boom")
		_, err := ib.Apply(context.Background(), d, func(ctx context.Context, tx *sql.Tx) error {
			if err := record(d)(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Apply = %v, want fn's error", err)
		}
		if got := effects(t, ib); len(got) != 0 {
			t.Fatalf("effects %v after a failed attempt", got)
		}
		if got, err := apply(t, ib, d); err != nil || got != Applied {
			t.Fatalf("the retry: %v, %v; want applied", got, err)
		}
	})
}

// An owner that stalls inside fn while a newer owner applies the same entry has its
// transaction rolled back when it writes the row: the newer owner's effects are the only
// ones. (PostgreSQL: SQLite has one writer, so a transaction in progress holds everyone
// else off until it ends; see the engine-level test for SQLite.)
func TestOwnerStalledInsideItsTransactionIsRefused(t *testing.T) {
	sqltest.RequirePostgres(t)
	ib := newTestInbox(t, sqltest.PostgresDSN(t))
	old := delivery("5-0", 1)
	inside, resume := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := ib.Apply(context.Background(), old, func(ctx context.Context, tx *sql.Tx) error {
			if err := record(old)(ctx, tx); err != nil {
				return err
			}
			close(inside)
			<-resume // stalled past its lease
			return nil
		})
		done <- err
	}()
	<-inside
	if got, err := apply(t, ib, delivery("5-0", 2)); err != nil || got != Applied {
		t.Fatalf("the new owner: %v, %v; want applied", got, err)
	}
	close(resume)
	if err := <-done; !errors.Is(err, ErrStale) {
		t.Fatalf("the stalled owner's commit: %v, want ErrStale", err)
	}
	if got := effects(t, ib); fmt.Sprint(got) != "[5-0@2]" {
		t.Errorf("effects %v, want only the new owner's", got)
	}
}

// Bad input: a delivery without its identity, a bad table name, no database.
func TestBadInput(t *testing.T) {
	ib := newTestInbox(t, sqltest.SQLiteDSN(t, "inbox.db"))
	if _, err := ib.Apply(context.Background(), engine.Delivery{Handler: "P"}, nil); err == nil {
		t.Error("a delivery without stream and entry id was applied")
	}
	if _, err := New(ib.DB(), sqldb.SQLite, WithTable("Bad-Name")); err == nil {
		t.Error("a table name that is not an identifier was accepted")
	}
	if _, err := New(nil, sqldb.SQLite); err == nil {
		t.Error("no database was accepted")
	}
	h := ib.Handler(func(context.Context, *sql.Tx, engine.Event) error { return nil })
	if err := h(context.Background(), engine.Event{}); err == nil {
		t.Error("a handler run without a delivery in its context succeeded")
	}
}

// A newer owner that redelivers an entry already applied (a duplicate) raises the row's
// generation: the older owner is refused from then on, before the newer one applies an
// entry of its own.
func TestDuplicateFromANewerOwnerFencesTheOlder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		for _, s := range []struct {
			d    engine.Delivery
			want Outcome
		}{{delivery("5-0", 7), Applied}, {delivery("5-0", 8), Duplicate}} {
			if got, err := apply(t, ib, s.d); err != nil || got != s.want {
				t.Fatalf("Apply(%s@%d) = %v, %v; want %v", s.d.EntryID, s.d.Generation, got, err, s.want)
			}
		}
		if _, err := apply(t, ib, delivery("6-0", 7)); !errors.Is(err, ErrStale) {
			t.Fatalf("the older owner's next entry: %v, want ErrStale", err)
		}
		if got, err := apply(t, ib, delivery("6-0", 8)); err != nil || got != Applied {
			t.Fatalf("the newer owner's next entry: %v, %v; want applied", got, err)
		}
	})
}

// Prune removes the rows of streams that are gone, and only those; a dry run counts them.
func TestPruneRemovesRowsOfGoneStreams(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		streams := []string{"order:a", "order:b", "order:c", "order:d"}
		for _, s := range streams {
			d := delivery("1-0", 1)
			d.Stream = s
			if _, err := apply(t, ib, d); err != nil {
				t.Fatal(err)
			}
		}
		gone := map[string]bool{"order:b": true, "order:d": true}
		check := func(_ context.Context, ss []string) ([]bool, error) {
			out := make([]bool, len(ss))
			for k, s := range ss {
				out[k] = gone[s]
			}
			return out, nil
		}
		rep, err := ib.Prune(context.Background(), check, true)
		if err != nil || rep.Rows != 4 || rep.Removed != 2 {
			t.Fatalf("dry run: %+v, %v; want 4 rows, 2 to remove", rep, err)
		}
		rep, err = ib.Prune(context.Background(), check, false)
		if err != nil || rep.Removed != 2 {
			t.Fatalf("prune: %+v, %v; want 2 removed", rep, err)
		}
		rep, err = ib.Prune(context.Background(), check, false)
		if err != nil || rep.Rows != 2 || rep.Removed != 0 {
			t.Fatalf("prune again: %+v, %v; want 2 rows left, none removed", rep, err)
		}
		// A stream created again after its row went: its entries apply.
		d := delivery("2-0", 1)
		d.Stream = "order:b"
		if got, err := apply(t, ib, d); err != nil || got != Applied {
			t.Fatalf("an entry of a recreated stream: %v, %v", got, err)
		}
	})
}

// goneCheck reports the streams of gone as gone (reaped), the others as live.
func goneCheck(gone ...string) func(context.Context, []string) ([]bool, error) {
	return func(_ context.Context, ss []string) ([]bool, error) {
		out := make([]bool, len(ss))
		for k, s := range ss {
			for _, g := range gone {
				out[k] = out[k] || s == g
			}
		}
		return out, nil
	}
}

// A prune keeps the fence: an owner whose lease was superseded before the partition was
// reaped and its row pruned is refused when it applies afterwards, on the same stream or
// on another one it has no row for; a newer owner's entries apply.
func TestPruneKeepsTheFenceOfAnOlderOwner(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		for _, d := range []engine.Delivery{delivery("5-0", 2), delivery("6-0", 2)} {
			if got, err := apply(t, ib, d); err != nil || got != Applied {
				t.Fatalf("the newer owner's %s: %v, %v", d.EntryID, got, err)
			}
		}
		rep, err := ib.Prune(context.Background(), goneCheck("order:c-1"), false)
		if err != nil || rep.Removed != 1 {
			t.Fatalf("prune: %+v, %v; want the row removed", rep, err)
		}
		if _, err := apply(t, ib, delivery("5-0", 1)); !errors.Is(err, ErrStale) {
			t.Fatalf("the older owner's late delivery of 5-0 after the prune: %v, want ErrStale", err)
		}
		if got := effects(t, ib); fmt.Sprint(got) != "[5-0@2 6-0@2]" {
			t.Errorf("effects %v, want only the newer owner's, in order", got)
		}
		// On a stream of the same hash slot with no row, an owner below the floor is
		// refused (its lease is older than the prune: it takes it again under a new
		// generation).
		other := delivery("1-0", 1)
		other.Stream = "{order:c-1}:other"
		if _, err := apply(t, ib, other); !errors.Is(err, ErrStale) {
			t.Fatalf("a delivery below the floor to a stream of its slot without a row: %v, want ErrStale", err)
		}
		// The partition created again, under a newer owner.
		if got, err := apply(t, ib, delivery("9-0", 3)); err != nil || got != Applied {
			t.Fatalf("an entry of the recreated stream: %v, %v", got, err)
		}
	})
}

// On Redis Cluster each master's clock floors the generations of its slots: a prune of a
// stream served by a master whose clock runs ahead does not fence the partitions of the
// other masters. A delivery to a stream of another slot, with a generation below the
// pruned row's, is applied; the pruned stream's older owner is still refused.
func TestPruneFloorsEachSlotApart(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		fast := delivery("5-0", 9_000)
		fast.Stream = "order:{c-fast}"
		if got, err := apply(t, ib, fast); err != nil || got != Applied {
			t.Fatalf("the fast master's owner: %v, %v", got, err)
		}
		if _, err := ib.Prune(context.Background(), goneCheck(fast.Stream), false); err != nil {
			t.Fatal(err)
		}
		slow := delivery("1-0", 5_000)
		slow.Stream = "order:{c-slow}"
		if got, err := apply(t, ib, slow); err != nil || got != Applied {
			t.Fatalf("a new partition on another master, generation %d below the pruned %d: %v, %v; want applied", slow.Generation, fast.Generation, got, err)
		}
		stale := delivery("5-0", 8_000)
		stale.Stream = fast.Stream
		if _, err := apply(t, ib, stale); !errors.Is(err, ErrStale) {
			t.Fatalf("the pruned stream's older owner: %v, want ErrStale", err)
		}
		rep, err := ib.Prune(context.Background(), goneCheck(), false)
		if err != nil || rep.Rows != 1 {
			t.Errorf("a prune read %+v, %v; want the one stream row, never a floor row", rep, err)
		}
	})
}

// The case of an owner that ran its statements and stalled before its claim, while a
// newer owner applied that entry and the next, the partition was reaped and its row
// pruned: its claim is refused and its statements roll back. (PostgreSQL: on SQLite the
// stalled transaction holds every other writer off.)
func TestPruneKeepsTheFenceOfAnOwnerStalledBeforeItsClaim(t *testing.T) {
	sqltest.RequirePostgres(t)
	ib := newTestInbox(t, sqltest.PostgresDSN(t))
	old := delivery("5-0", 1)
	inside, resume := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := ib.Apply(context.Background(), old, func(ctx context.Context, tx *sql.Tx) error {
			if err := record(old)(ctx, tx); err != nil {
				return err
			}
			close(inside)
			<-resume // stalled past its lease
			return nil
		})
		done <- err
	}()
	<-inside
	for _, d := range []engine.Delivery{delivery("5-0", 2), delivery("6-0", 2)} {
		if got, err := apply(t, ib, d); err != nil || got != Applied {
			t.Fatalf("the newer owner's %s: %v, %v", d.EntryID, got, err)
		}
	}
	if rep, err := ib.Prune(context.Background(), goneCheck("order:c-1"), false); err != nil || rep.Removed != 1 {
		t.Fatalf("prune: %+v, %v; want the row removed", rep, err)
	}
	close(resume)
	if err := <-done; !errors.Is(err, ErrStale) {
		t.Fatalf("the stalled owner's claim after the prune: %v, want ErrStale", err)
	}
	if got := effects(t, ib); fmt.Sprint(got) != "[5-0@2 6-0@2]" {
		t.Errorf("effects %v, want only the newer owner's, in order", got)
	}
}
