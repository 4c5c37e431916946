package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("os/exec.(*Cmd).Wait"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("os.(*Process).blockUntilWaitable"),
	)
}

var dialects = []Dialect{SQLite, Postgres}

// forEachDialect runs fn as a parallel subtest per dialect.
func forEachDialect(t *testing.T, fn func(t *testing.T, d Dialect)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			if d == Postgres {
				sqltest.RequirePostgres(t)
			}
			fn(t, d)
		})
	}
}

// testDSN returns the DSN of a fresh, private database for the test (sqltest): a SQLite
// file in the test's temporary directory, or a PostgreSQL schema of its own.
func testDSN(tb testing.TB, d Dialect) string {
	tb.Helper()
	if d == SQLite {
		return sqltest.SQLiteDSN(tb, "outbox.db")
	}
	return sqltest.PostgresDSN(tb)
}

// openDB opens dsn and closes the database at cleanup.
func openDB(tb testing.TB, dsn string) (*sql.DB, Dialect) {
	tb.Helper()
	db, d, err := Open(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db, d
}

// domainOpts shape the test domain.
type domainOpts struct {
	inline    bool   // Init with the inline broker: partitioning declared but not applied
	lanes     bool   // priority lanes on, threshold 5
	suffix    string // backfill suffix ("" = default)
	noHandler bool
}

// testDomain declares OrderPlaced and OrderShipped in category "order", partitioned by
// client_id, and AuditLogged in the unpartitioned category "audit".
func testDomain(tb testing.TB, o domainOpts) *engine.Domain {
	tb.Helper()
	d := engine.NewDomain("test").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "n", "writer"}}).
		AddEvent(engine.EventType{Name: "OrderShipped", Category: "order", Fields: []string{"client_id", "n", "writer"}}).
		AddEvent(engine.EventType{Name: "AuditLogged", Category: "audit", Fields: []string{"msg"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order",
			Handles: []string{"OrderPlaced", "OrderShipped"}, SequentialBy: "client_id"}).
		AddHandler(engine.Handler{Name: "Auditor", Kind: engine.EventHandlerKind, PartOf: "audit", Handles: []string{"AuditLogged"}})
	d.BackfillSuffix = o.suffix
	if o.lanes {
		d.LanesEnabled, d.LanesThreshold = true, 5
	}
	var b engine.BrokerInfo = engine.NewRedisBroker(nil)
	if o.inline {
		b = engine.NewInlineBroker()
	}
	if err := d.Init(b); err != nil {
		tb.Fatal(err)
	}
	return d
}

// env is one test's outbox: its own database and its own redis-server.
type env struct {
	dsn     string
	db      *sql.DB
	dialect Dialect
	dom     *engine.Domain
	ob      *Outbox
	srv     *redistest.Server  // one node, or nil
	cl      *redistest.Cluster // a Redis Cluster, or nil
	rdb     redis.UniversalClient
	broker  *engine.RedisBroker
}

// client returns a new client of the env's Redis, closed at cleanup.
func (e *env) client(tb testing.TB) redis.UniversalClient {
	if e.cl != nil {
		return e.cl.Client(tb)
	}
	return e.srv.Client(tb)
}

// newEnvNoRedis is an env with its database, domain and outbox, and no Redis yet.
func newEnvNoRedis(tb testing.TB, d Dialect, o domainOpts) *env {
	tb.Helper()
	e := &env{dsn: testDSN(tb, d)}
	e.db, e.dialect = openDB(tb, e.dsn)
	e.dom = testDomain(tb, o)
	e.ob = newOutbox(tb, e.db, e.dialect, e.dom)
	return e
}

// newClusterEnv is newEnv over a 3-master Redis Cluster.
func newClusterEnv(tb testing.TB, d Dialect, o domainOpts) *env {
	tb.Helper()
	e := newEnvNoRedis(tb, d, o)
	e.cl = redistest.StartCluster(tb, 3)
	e.rdb = e.cl.Client(tb)
	e.broker = engine.NewRedisBroker(e.rdb)
	return e
}

func newEnv(tb testing.TB, d Dialect, o domainOpts) *env {
	tb.Helper()
	e := newEnvNoRedis(tb, d, o)
	e.srv = redistest.Start(tb)
	e.rdb = e.srv.Client(tb)
	e.broker = engine.NewRedisBroker(e.rdb)
	return e
}

// newOutbox returns a migrated outbox.
func newOutbox(tb testing.TB, db *sql.DB, d Dialect, dom *engine.Domain) *Outbox {
	tb.Helper()
	ob, err := New(db, d, dom)
	if err != nil {
		tb.Fatal(err)
	}
	if err := ob.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return ob
}

// order is the payload of the order events.
type order struct {
	Client any    `json:"client_id,omitempty"`
	N      int    `json:"n"`
	Writer string `json:"writer,omitempty"`
}

func orderData(client any, n int) []byte {
	b, _ := json.Marshal(order{Client: client, N: n})
	return b
}

// enqueue commits one event in its own transaction and returns the row.
func (e *env) enqueue(tb testing.TB, ev Event) Enqueued {
	tb.Helper()
	return e.enqueueIn(tb, context.Background(), ev)
}

// enqueueIn is enqueue under ctx (a span's, say).
func (e *env) enqueueIn(tb testing.TB, ctx context.Context, ev Event) Enqueued {
	tb.Helper()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		tb.Fatal(err)
	}
	got, err := e.ob.Enqueue(ctx, tx, ev)
	if err != nil {
		_ = tx.Rollback()
		tb.Fatalf("enqueue %s %s: %v", ev.Type, ev.Data, err)
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
	return got
}

// relay returns a relay with fast test timings over the env's broker (or pub).
func (e *env) relay(tb testing.TB, pub Publisher, mod func(*RelayConfig)) *Relay {
	tb.Helper()
	if pub == nil {
		pub = e.broker
	}
	cfg := RelayConfig{
		Publisher: pub, PollInterval: 10 * time.Millisecond, LeaseTTL: 2 * time.Second,
		RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, BatchSize: 64,
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewRelay(e.ob, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// run runs the relay until the test ends (or stop is called) and reports its error.
func run(tb testing.TB, r *Relay) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("relay %s: %v", r.Owner(), err)
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

// stored is a row as the tests inspect it.
type stored struct {
	ID        int64
	EventID   string
	Key       string
	Status    Status
	Attempts  int
	LastError string
	Stream    string
	EntryID   string
}

func (e *env) rows(tb testing.TB) []stored {
	tb.Helper()
	rs, err := e.db.Query("SELECT id, event_id, coalesce(partition_key, ''), status, attempts, coalesce(last_error, ''), " +
		"coalesce(stream, ''), coalesce(entry_id, '') FROM " + e.ob.Table() + " ORDER BY id")
	if err != nil {
		tb.Fatal(err)
	}
	defer rs.Close()
	var out []stored
	for rs.Next() {
		var s stored
		var status string
		if err := rs.Scan(&s.ID, &s.EventID, &s.Key, &status, &s.Attempts, &s.LastError, &s.Stream, &s.EntryID); err != nil {
			tb.Fatal(err)
		}
		s.Status = Status(status)
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func (e *env) row(tb testing.TB, eventID string) stored {
	tb.Helper()
	for _, r := range e.rows(tb) {
		if r.EventID == eventID {
			return r
		}
	}
	tb.Fatalf("no row with event id %s", eventID)
	return stored{}
}

// entry is a stream entry as the tests compare it.
type entry struct {
	EntryID string
	EventID string
	Key     string
	N       int
}

func (e *env) stream(tb testing.TB, name string) []entry {
	tb.Helper()
	msgs, err := e.rdb.XRange(context.Background(), name, "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := []entry{}
	for _, m := range msgs {
		ev, err := engine.EventFromMessage(m)
		if err != nil {
			tb.Fatal(err)
		}
		var p order
		_ = json.Unmarshal(ev.Data, &p)
		out = append(out, entry{EntryID: m.ID, EventID: ev.ID, Key: ev.Key, N: p.N})
	}
	return out
}

func (e *env) countStatus(tb testing.TB, s Status) int {
	tb.Helper()
	n := 0
	for _, r := range e.rows(tb) {
		if r.Status == s {
			n++
		}
	}
	return n
}
