package deliver

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/inbox"
	"github.com/seqctl/seqctl/pkg/sqldb"
)

// inboxReceiver is a Go service that receives deliveries through Receive into a SQLite inbox;
// runs counts how often its function ran.
type inboxReceiver struct {
	srv  *httptest.Server
	v    *Verifier
	runs atomic.Int64
	key  []byte
}

func newInboxReceiver(t *testing.T) *inboxReceiver {
	t.Helper()
	db, d, err := sqldb.Open(sqltest.SQLiteDSN(t, "inboxReceiver.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ib, err := inbox.New(db, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc := &inboxReceiver{key: []byte("inboxReceiver-key"), v: &Verifier{Keys: [][]byte{[]byte("inboxReceiver-key")}}}
	rc.srv = httptest.NewServer(Receive(ib, rc.v, func(ctx context.Context, tx *sql.Tx, env Envelope) error {
		rc.runs.Add(1)
		return nil
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// send delivers entry at generation gen with seqctl's HTTP delivery, signed with key.
func (rc *inboxReceiver) send(t *testing.T, key []byte, entry string, gen int64) error {
	t.Helper()
	fn, err := HTTP(HTTPConfig{URL: rc.srv.URL, Keys: [][]byte{key}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := engine.WithDelivery(context.Background(), engine.Delivery{Handler: "Projector", Category: "order", Key: "c-1",
		Stream: "order:c-1", EntryID: entry, Generation: gen, Attempt: 1})
	return fn(ctx, engine.Event{ID: "ev-" + entry, Type: "OrderPlaced", Category: "order", Key: "c-1", Data: []byte(`{"order_id":"o-1"}`)})
}

// A delivery runs once; a redelivered entry is acknowledged (2xx) without running; a
// delivery from an older generation than the applied one is answered 409, which the
// sender takes for a lost lease (an engine.ErrFenced).
func TestReceiveAppliesOnce(t *testing.T) {
	rc := newInboxReceiver(t)
	if err := rc.send(t, rc.key, "1-0", 5); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if err := rc.send(t, rc.key, "1-0", 5); err != nil {
		t.Fatalf("the redelivery: %v", err)
	}
	if err := rc.send(t, rc.key, "1-0", 6); err != nil {
		t.Fatalf("the new owner's redelivery: %v", err)
	}
	if n := rc.runs.Load(); n != 1 {
		t.Errorf("the function ran %d times, want 1", n)
	}
	err := rc.send(t, rc.key, "2-0", 5)
	var se *StatusError
	if !errors.Is(err, engine.ErrFenced) || !errors.As(err, &se) || se.StatusCode != http.StatusConflict {
		t.Fatalf("a delivery of a superseded generation: %v, want a 409 that is an engine.ErrFenced", err)
	}
	if n := rc.runs.Load(); n != 1 {
		t.Errorf("the function ran %d times after the stale delivery, want 1", n)
	}
}

// A forged signature and a request replayed after the tolerance are refused (401) and
// run nothing; a replay within the tolerance is the same delivery again: a duplicate.
func TestReceiveRefusesForgedAndReplayedRequests(t *testing.T) {
	rc := newInboxReceiver(t)
	var se *StatusError
	if err := rc.send(t, []byte("not-the-key"), "1-0", 5); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a request signed with another key: %v, want 401", err)
	}
	// Capture a genuine request, then replay it.
	var captured *http.Request
	var body []byte
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		captured = r.Clone(context.Background())
	}))
	defer capture.Close()
	fn, _ := HTTP(HTTPConfig{URL: capture.URL, Keys: [][]byte{rc.key}})
	ctx := engine.WithDelivery(context.Background(), engine.Delivery{Handler: "Projector", Category: "order", Key: "c-1",
		Stream: "order:c-1", EntryID: "7-0", Generation: 5, Attempt: 1})
	if err := fn(ctx, engine.Event{ID: "ev-7", Type: "OrderPlaced", Category: "order", Key: "c-1", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	replay := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, rc.srv.URL, bytes.NewReader(body))
		req.Header = captured.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(HeaderInbox) + " " + string(b)
	}
	if code, got := replay(); code != http.StatusOK || !strings.Contains(got, "applied") {
		t.Fatalf("the captured request, first seen: %d %s", code, got)
	}
	if code, got := replay(); code != http.StatusOK || !strings.Contains(got, "duplicate") {
		t.Fatalf("replayed within the tolerance: %d %s, want 200 duplicate", code, got)
	}
	rc.v.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	if code, got := replay(); code != http.StatusUnauthorized || !strings.Contains(got, "outside the tolerance") {
		t.Fatalf("replayed after the tolerance: %d %s, want 401", code, got)
	}
	if n := rc.runs.Load(); n != 1 {
		t.Errorf("the function ran %d times, want 1", n)
	}
	// Not a delivery at all.
	resp, err := http.Get(rc.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", resp.StatusCode)
	}
}

// A [handlers.deliver.sql] table binds the handler to a SQL sink; its DSN is read when the
// sink starts, and an unset variable says what to export.
func TestBindSQLSink(t *testing.T) {
	const src = shopProjector + `[handlers.deliver.sql]
dsn_env = "ORDERS_DB"
statement = "INSERT INTO orders(id) VALUES (json_extract($1, '$.order_id'))"
`
	cfg, err := config.Parse("domain.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	dom, err := cfg.InitDomain()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	bs, err := Bind(cfg, dom, BindOptions{LookupEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	b := bs[0]
	if b.Mode != "sql" || b.Sink == nil || b.Target != "sql: the DSN in $ORDERS_DB, inbox seqctl_inbox" || dom.Handlers[0].Func == nil {
		t.Fatalf("binding %+v, want a started-later sql sink bound to the handler", b)
	}
	ctx := context.Background()
	if err := b.Sink.Start(ctx); err == nil || !strings.Contains(err.Error(), "OrderProjector") || !strings.Contains(err.Error(), "ORDERS_DB is not set") {
		t.Fatalf("Start without the variable: %v", err)
	}
	dsn := sqltest.SQLiteDSN(t, "orders.db")
	db, d, err := sqldb.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ib, _ := inbox.New(db, d)
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	env["ORDERS_DB"] = dsn
	if err := b.Sink.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Sink.Close()
	dctx := engine.WithDelivery(ctx, engine.Delivery{Handler: "OrderProjector", Category: "order", Key: "c-1", Stream: "order:c-1", EntryID: "1-0", Generation: 1})
	if err := dom.Handlers[0].Func(dctx, engine.Event{ID: "e", Data: []byte(`{"order_id":"o-9"}`)}); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := db.QueryRow("SELECT id FROM orders").Scan(&id); err != nil || id != "o-9" {
		t.Errorf("orders holds %q (%v), want o-9", id, err)
	}
}
