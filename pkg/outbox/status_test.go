package outbox

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/internal/testkit"
)

func TestStatusReportsCountsBacklogAndReasons(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{})
		ctx := context.Background()
		for n := 1; n <= 2; n++ {
			e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("ok", n)})
		}
		failing := e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("bad", 1)})
		e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("bad", 2)})
		e.insertRaw(t, rawRow{eventID: "planted", typ: "OrderPlaced", category: "order", key: valid("x:y"), payload: `{}`}, true)

		pub := &flaky{RedisBroker: e.broker}
		pub.fail("bad")
		r := e.relay(t, pub, func(c *RelayConfig) { c.Owner = "status-relay" })
		if _, err := r.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the backlog ages

		rep, err := e.ob.Status(ctx, StatusOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(StatusCounts{Pending: 1, Failed: 1, Published: 2, Abandoned: 1}, rep.Counts); diff != "" {
			t.Errorf("counts (-want +got):\n%s", diff)
		}
		if rep.Backlog.Rows != 2 || rep.Backlog.OldestAge <= 0 || rep.Backlog.Oldest == nil {
			t.Errorf("backlog %+v: want 2 rows with a positive oldest age", rep.Backlog)
		}
		if diff := cmp.Diff([]CategoryBacklog{{Category: "order", Rows: 2}}, rep.Backlog.Categories,
			cmpopts.IgnoreFields(CategoryBacklog{}, "OldestAgeSeconds")); diff != "" {
			t.Errorf("backlog by category (-want +got):\n%s", diff)
		}
		ignoreTimes := cmpopts.IgnoreFields(RowInfo{}, "RowID", "CreatedAt", "UpdatedAt", "Reason")
		wantAbandoned := []RowInfo{{EventID: "planted", Type: "OrderPlaced", Category: "order", Key: "x:y"}}
		if diff := cmp.Diff(wantAbandoned, rep.Abandoned, ignoreTimes); diff != "" {
			t.Errorf("abandoned (-want +got):\n%s", diff)
		}
		if len(rep.Abandoned) == 1 && !strings.Contains(rep.Abandoned[0].Reason, `contains ':'`) {
			t.Errorf("abandoned reason %q does not name the rule", rep.Abandoned[0].Reason)
		}
		wantFailing := []RowInfo{{EventID: failing.EventID, Type: "OrderPlaced", Category: "order", Key: "bad", Attempts: 1}}
		if diff := cmp.Diff(wantFailing, rep.Failing, ignoreTimes); diff != "" {
			t.Errorf("failing (-want +got):\n%s", diff)
		}
		if len(rep.Failing) == 1 && !strings.Contains(rep.Failing[0].Reason, errInjected.Error()) {
			t.Errorf("failing reason %q is not the publish error", rep.Failing[0].Reason)
		}
		wantLeases := []LeaseInfo{{Category: "order", Owner: "status-relay", Generation: 1, Live: false}}
		if diff := cmp.Diff(wantLeases, rep.Leases, cmpopts.IgnoreFields(LeaseInfo{}, "ExpiresAt")); diff != "" {
			t.Errorf("leases after Drain released them (-want +got):\n%s", diff)
		}

		// The JSON a CLI prints with -o json.
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range doc {
			keys = append(keys, k)
		}
		if diff := cmp.Diff([]string{"abandoned", "backlog", "counts", "dialect", "failing", "leases", "table"}, keys, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			t.Errorf("JSON keys (-want +got):\n%s", diff)
		}

		// Purge keeps everything that is not PUBLISHED.
		n, err := e.ob.Purge(ctx, time.Now().Add(time.Minute))
		if err != nil || n != 2 {
			t.Fatalf("Purge = %d, %v; want 2 published rows deleted", n, err)
		}
		if got := len(e.rows(t)); got != 3 {
			t.Errorf("%d rows after Purge; want 3", got)
		}
	})
}

func TestRelayStatsAndBacklogOfAnEmptyOutbox(t *testing.T) {
	e := newEnv(t, SQLite, domainOpts{})
	b, err := e.ob.Backlog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Backlog{Categories: []CategoryBacklog{}}, b); diff != "" {
		t.Errorf("backlog (-want +got):\n%s", diff)
	}
}

func TestOpenMemorySQLiteWorks(t *testing.T) {
	db, d := openDB(t, "sqlite::memory:")
	ob := newOutbox(t, db, d, testDomain(t, domainOpts{}))
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(context.Background(), tx, Event{Type: "AuditLogged", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rep, err := ob.Status(context.Background(), StatusOptions{})
	if err != nil || rep.Counts.Pending != 1 {
		t.Fatalf("Status = %+v, %v; want 1 pending row", rep.Counts, err)
	}
}

// Low latency on PostgreSQL: with a one-minute poll, only NOTIFY can wake the relay.
func TestPostgresNotifyWakesTheRelay(t *testing.T) {
	sqltest.RequirePostgres(t)
	t.Parallel()
	e := newEnv(t, Postgres, domainOpts{})
	r := e.relay(t, nil, func(c *RelayConfig) { c.PollInterval = time.Minute; c.LeaseTTL = 10 * time.Minute })
	run(t, r)
	testkit.WaitFor(t, 5*time.Second, "the LISTEN connection", func() bool { return r.Stats().Listening })
	for n := 1; n <= 3; n++ {
		en := e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", n)})
		testkit.WaitFor(t, 5*time.Second, "the relay to be woken by NOTIFY", func() bool {
			return e.row(t, en.EventID).Status == StatusPublished
		})
	}
}
