package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/pkg/engine"
)

// runDelivery is the delivery of a run of the entries, by the owner of generation gen.
func runDelivery(gen int64, entries ...string) engine.Delivery {
	d := delivery(entries[0], gen)
	d.Entries = entries
	return d
}

// eventsOf returns one event per entry.
func eventsOf(entries ...string) []engine.Event {
	evs := make([]engine.Event, len(entries))
	for k, e := range entries {
		evs[k] = engine.Event{ID: "ev-" + e, Type: "OrderPlaced", Category: "order", Key: "c-1"}
	}
	return evs
}

// recordEach is the effect under test for a run: one row per event that commits, named
// by the entry of the event's own delivery.
func recordEach(ctx context.Context, tx *sql.Tx, _ engine.Event) error {
	d, ok := engine.DeliveryFrom(ctx)
	if !ok || len(d.Entries) != 0 {
		return fmt.Errorf("fn's context holds %+v, want the event's own delivery", d)
	}
	return record(d)(ctx, tx)
}

func applyRun(t *testing.T, ib *Inbox, gen int64, entries ...string) (Outcome, error) {
	t.Helper()
	return ib.ApplyBatch(context.Background(), runDelivery(gen, entries...), eventsOf(entries...), recordEach)
}

// A run applies each of its events once, in order, each with its own entry id; a run
// redelivered is a duplicate, and a run that overlaps what was applied runs only its new
// events, whether the inbox remembers the row or reads it (another instance's inbox).
func TestBatchAppliesEachEntryOnceInOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		other, err := New(ib.DB(), ib.dialect) // another instance: it reads the row
		if err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			ib      *Inbox
			gen     int64
			entries []string
			want    Outcome
		}{
			{ib, 1, []string{"1-0", "2-0", "3-0"}, Applied},
			{ib, 1, []string{"1-0", "2-0", "3-0"}, Duplicate},           // redelivered after a lost acknowledgement
			{other, 2, []string{"1-0", "2-0", "3-0"}, Duplicate},        // by a new owner
			{ib, 2, []string{"2-0", "3-0", "4-0", "5-0"}, Applied},      // overlapping, remembered: 4-0 and 5-0 run
			{other, 3, []string{"5-0", "6-0", "10-0", "10-1"}, Applied}, // overlapping, read: 6-0 up
		}
		for _, s := range steps {
			got, err := s.ib.ApplyBatch(context.Background(), runDelivery(s.gen, s.entries...), eventsOf(s.entries...), recordEach)
			if err != nil || got != s.want {
				t.Fatalf("ApplyBatch(%v@%d) = %v, %v; want %v", s.entries, s.gen, got, err, s.want)
			}
		}
		// One event at a time after runs: the row holds the run's last entry.
		if got, err := apply(t, other, delivery("10-1", 3)); err != nil || got != Duplicate {
			t.Fatalf("Apply(10-1) after the run that ended with it: %v, %v; want duplicate", got, err)
		}
		if got, err := apply(t, other, delivery("11-0", 3)); err != nil || got != Applied {
			t.Fatalf("Apply(11-0): %v, %v; want applied", got, err)
		}
		want := []string{"1-0@1", "2-0@1", "3-0@1", "4-0@2", "5-0@2", "6-0@3", "10-0@3", "10-1@3", "11-0@3"}
		if got := effects(t, ib); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("effects %v, want %v", got, want)
		}
	})
}

// A run is all or nothing: an error of fn for any event rolls back every event's effects
// and records nothing, and names the event; the next delivery of the run applies it whole.
func TestBatchIsAllOrNothing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		boom := errors.New("boom")
		entries := []string{"1-0", "2-0", "3-0", "4-0"}
		_, err := ib.ApplyBatch(context.Background(), runDelivery(1, entries...), eventsOf(entries...), func(ctx context.Context, tx *sql.Tx, ev engine.Event) error {
			if err := recordEach(ctx, tx, ev); err != nil {
				return err
			}
			if ev.ID == "ev-3-0" {
				return boom
			}
			return nil
		})
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "event ev-3-0 (entry 3-0, 3 of 4 in the batch)") {
			t.Fatalf("ApplyBatch = %v, want fn's error naming event ev-3-0", err)
		}
		if got := effects(t, ib); len(got) != 0 {
			t.Fatalf("effects %v after a failed run, want none", got)
		}
		if got, err := applyRun(t, ib, 1, entries...); err != nil || got != Applied {
			t.Fatalf("the retry: %v, %v; want applied", got, err)
		}
		if got := effects(t, ib); fmt.Sprint(got) != "[1-0@1 2-0@1 3-0@1 4-0@1]" {
			t.Errorf("effects %v, want the four, once each", got)
		}
	})
}

// A run of an older generation than the row's is refused with ErrStale; fn does not run.
func TestBatchStaleGenerationIsRefused(t *testing.T) {
	forEachDialect(t, func(t *testing.T, ib *Inbox) {
		if _, err := applyRun(t, ib, 7, "1-0", "2-0"); err != nil {
			t.Fatal(err)
		}
		ran := false
		_, err := ib.ApplyBatch(context.Background(), runDelivery(6, "3-0", "4-0"), eventsOf("3-0", "4-0"), func(context.Context, *sql.Tx, engine.Event) error { ran = true; return nil })
		if !errors.Is(err, ErrStale) || !errors.Is(err, engine.ErrFenced) {
			t.Fatalf("a run of generation 6 after 7: %v, want ErrStale (an engine.ErrFenced)", err)
		}
		if ran {
			t.Error("fn ran for a stale run")
		}
	})
}

// A run of one is Apply: with Entries or without them (EntryID alone), and through
// BatchHandler.
func TestBatchOfOne(t *testing.T) {
	ib := newTestInbox(t, sqltest.SQLiteDSN(t, "inbox.db"))
	if got, err := ib.ApplyBatch(context.Background(), delivery("1-0", 1), eventsOf("1-0"), recordEach); err != nil || got != Applied {
		t.Fatalf("a run of one without Entries: %v, %v; want applied", got, err)
	}
	if got, err := applyRun(t, ib, 1, "2-0"); err != nil || got != Applied {
		t.Fatalf("a run of one with Entries: %v, %v; want applied", got, err)
	}
	h := ib.BatchHandler(recordEach)
	if err := h(engine.WithDelivery(context.Background(), runDelivery(1, "3-0", "4-0")), eventsOf("3-0", "4-0")); err != nil {
		t.Fatalf("BatchHandler: %v", err)
	}
	if got := effects(t, ib); fmt.Sprint(got) != "[1-0@1 2-0@1 3-0@1 4-0@1]" {
		t.Errorf("effects %v", got)
	}
	if err := h(context.Background(), eventsOf("5-0")); err == nil {
		t.Error("BatchHandler run without a delivery in its context succeeded")
	}
}

// A run that does not describe its events is refused before anything runs, saying what
// is wrong.
func TestBatchBadInput(t *testing.T) {
	ib := newTestInbox(t, sqltest.SQLiteDSN(t, "inbox.db"))
	noStream := runDelivery(1, "1-0")
	noStream.Stream = ""
	for _, tt := range []struct {
		name string
		d    engine.Delivery
		evs  []engine.Event
		want string
	}{
		{"no events", runDelivery(1, "1-0"), nil, "no events"},
		{"fewer entries than events", runDelivery(1, "1-0", "2-0"), eventsOf("1-0", "2-0", "3-0"), "entry ids (2) do not match its events (3)"},
		{"no entries for a run", delivery("1-0", 1), eventsOf("1-0", "2-0"), "entry ids (0) do not match its events (2)"},
		{"out of order", runDelivery(1, "2-0", "1-0"), eventsOf("2-0", "1-0"), "not in stream order"},
		{"twice", runDelivery(1, "1-0", "1-0"), eventsOf("1-0", "1-0"), "not in stream order"},
		{"not an entry id", runDelivery(1, "1-0", "later"), eventsOf("1-0", "2-0"), "entry 2 of the batch"},
		{"no stream", noStream, eventsOf("1-0"), "names no handler or stream"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ib.ApplyBatch(context.Background(), tt.d, tt.evs, func(context.Context, *sql.Tx, engine.Event) error {
				t.Error("fn ran")
				return nil
			})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ApplyBatch = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// An owner that stalls inside its run's transaction while a newer owner applies part of
// the run has its transaction rolled back when it writes the row. (PostgreSQL: on SQLite
// a transaction in progress holds every other writer off.)
func TestBatchOwnerStalledInsideItsTransactionIsRefused(t *testing.T) {
	sqltest.RequirePostgres(t)
	ib := newTestInbox(t, sqltest.PostgresDSN(t))
	inside, resume := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		entries := []string{"5-0", "6-0", "7-0"}
		_, err := ib.ApplyBatch(context.Background(), runDelivery(1, entries...), eventsOf(entries...), func(ctx context.Context, tx *sql.Tx, ev engine.Event) error {
			if err := recordEach(ctx, tx, ev); err != nil {
				return err
			}
			if ev.ID == "ev-7-0" {
				close(inside)
				<-resume // stalled past its lease
			}
			return nil
		})
		done <- err
	}()
	<-inside
	if got, err := applyRun(t, ib, 2, "5-0", "6-0"); err != nil || got != Applied {
		t.Fatalf("the new owner: %v, %v; want applied", got, err)
	}
	close(resume)
	if err := <-done; !errors.Is(err, ErrStale) {
		t.Fatalf("the stalled owner's commit: %v, want ErrStale", err)
	}
	if got := effects(t, ib); fmt.Sprint(got) != "[5-0@2 6-0@2]" {
		t.Errorf("effects %v, want only the new owner's", got)
	}
}

// The case the run's claim is built for: an owner of an older generation, stalled inside
// its transaction, commits the first entry of a run while the newer owner's run is under
// way. The run's claim compares the row with the first entry it applied, not with its
// last: it is refused, the run rolls back and fails its attempt, and the next attempt
// applies only the rest. Every entry's effects commit once. (PostgreSQL, as above.)
func TestBatchRefusedWhenAnOlderOwnerAppliedPartOfTheRun(t *testing.T) {
	sqltest.RequirePostgres(t)
	ib := newTestInbox(t, sqltest.PostgresDSN(t))
	old := delivery("5-0", 1)
	oldInside, oldResume := make(chan struct{}), make(chan struct{})
	oldDone := make(chan error, 1)
	go func() {
		_, err := ib.Apply(context.Background(), old, func(ctx context.Context, tx *sql.Tx) error {
			if err := record(old)(ctx, tx); err != nil {
				return err
			}
			close(oldInside)
			<-oldResume
			return nil
		})
		oldDone <- err
	}()
	<-oldInside
	entries := []string{"5-0", "6-0", "7-0"}
	newInside, newResume := make(chan struct{}), make(chan struct{})
	newDone := make(chan error, 1)
	go func() {
		_, err := ib.ApplyBatch(context.Background(), runDelivery(2, entries...), eventsOf(entries...), func(ctx context.Context, tx *sql.Tx, ev engine.Event) error {
			if err := recordEach(ctx, tx, ev); err != nil {
				return err
			}
			if ev.ID == "ev-7-0" {
				close(newInside)
				<-newResume
			}
			return nil
		})
		newDone <- err
	}()
	<-newInside // the new owner read the row (none) and ran its statements
	close(oldResume)
	if err := <-oldDone; err != nil {
		t.Fatalf("the old owner's commit (nobody else claimed 5-0 yet): %v", err)
	}
	close(newResume)
	err := <-newDone
	if err == nil || errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "another owner") {
		t.Fatalf("the new owner's run: %v, want a failed attempt saying another owner applied part of it", err)
	}
	if got, err := applyRun(t, ib, 2, entries...); err != nil || got != Applied {
		t.Fatalf("the new owner's next attempt: %v, %v; want applied", got, err)
	}
	if got := effects(t, ib); fmt.Sprint(got) != "[5-0@1 6-0@2 7-0@2]" {
		t.Errorf("effects %v, want 5-0 once (the old owner's), then 6-0 and 7-0", got)
	}
}

// deliverRun hands the sink's batch handler a run of events, one per entry, with data.
func deliverRun(s *Sink, gen int64, entries []string, data []string) error {
	ctx := engine.WithDelivery(context.Background(), engine.Delivery{Handler: "OrderProjector", Category: "order", Key: "c-1",
		Stream: "order:c-1", EntryID: entries[0], Entries: entries, Generation: gen})
	evs := make([]engine.Event, len(entries))
	for k, e := range entries {
		evs[k] = engine.Event{ID: "ev-" + e, Type: "OrderPlaced", Category: "order", Key: "c-1", Data: []byte(data[k])}
	}
	return s.BatchHandler()(ctx, evs)
}

// A SQL sink's run runs the statement once per event, each with its own entry id ($4),
// in one transaction: a redelivered run runs nothing, and a statement that raises for
// one event of a run fails the whole run, naming that event, with none of its effects.
func TestSinkBatchRunsTheStatementOncePerEntry(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			stmt := "INSERT INTO orders(id, client, entry, generation) VALUES (json_extract($1, '$.order_id'), $3, $4, $5)"
			if dialect == "postgres" {
				stmt = "INSERT INTO orders(id, client, entry, generation) VALUES ($1::jsonb->>'order_id', $3, $4, $5)"
			}
			s, db := sinkFor(t, dialect, stmt)
			orders := func() string {
				var got []string
				rows, err := db.Query("SELECT id, entry, generation FROM orders ORDER BY n")
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				for rows.Next() {
					var id, e string
					var g int64
					_ = rows.Scan(&id, &e, &g)
					got = append(got, fmt.Sprintf("%s@%s/%d", id, e, g))
				}
				return fmt.Sprint(got)
			}
			run := []string{"1-0", "2-0", "3-0"}
			data := []string{`{"order_id":"o-1"}`, `{"order_id":"o-2"}`, `{"order_id":"o-3"}`}
			for range 2 { // the second time, a redelivery
				if err := deliverRun(s, 7, run, data); err != nil {
					t.Fatalf("run %v: %v", run, err)
				}
			}
			if want := "[o-1@1-0/7 o-2@2-0/7 o-3@3-0/7]"; orders() != want {
				t.Fatalf("orders %s, want %s", orders(), want)
			}
			// o-1 again in the middle of a run breaks the UNIQUE constraint.
			err := deliverRun(s, 7, []string{"4-0", "5-0", "6-0"}, []string{`{"order_id":"o-4"}`, `{"order_id":"o-1"}`, `{"order_id":"o-6"}`})
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unique") || !strings.Contains(err.Error(), "event ev-5-0 (entry 5-0, 2 of 3") {
				t.Errorf("a run whose second statement raises: %v, want the database's unique-constraint error naming event ev-5-0", err)
			}
			if want := "[o-1@1-0/7 o-2@2-0/7 o-3@3-0/7]"; orders() != want {
				t.Errorf("orders %s after the failed run, want %s (nothing of it)", orders(), want)
			}
			// The events of the failed run one at a time, as the engine splits a run that
			// failed its last attempt: the one before the poison applies.
			if err := deliverRun(s, 7, []string{"4-0"}, []string{`{"order_id":"o-4"}`}); err != nil {
				t.Fatalf("4-0 alone: %v", err)
			}
			if err := deliverRun(s, 7, []string{"5-0"}, []string{`{"order_id":"o-1"}`}); err == nil || strings.Contains(err.Error(), "in the batch") {
				t.Errorf("5-0 alone: %v, want the statement's error as it is", err)
			}
			if want := "[o-1@1-0/7 o-2@2-0/7 o-3@3-0/7 o-4@4-0/7]"; orders() != want {
				t.Errorf("orders %s, want %s", orders(), want)
			}
		})
	}
}
