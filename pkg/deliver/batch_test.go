package deliver

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/inbox"
	"github.com/seqctl/seqctl/pkg/sqldb"
)

// testRun is a run of three events as the engine hands it to a BatchFunc, with its
// delivery in the context.
func testRun(t testing.TB) (context.Context, []engine.Event) {
	t.Helper()
	ctx, ev := testEvent(t, `{"order_id":"o-1","client_id":"client-7"}`)
	d, _ := engine.DeliveryFrom(ctx)
	d.Entries = []string{"1738317600123-0", "1738317600123-1", "1738317600200-0"}
	evs := make([]engine.Event, 3)
	for k := range evs {
		evs[k] = ev
		evs[k].ID = fmt.Sprintf("ev-%d", k+1)
		evs[k].Data = []byte(fmt.Sprintf("{\n  \"order_id\": \"o-%d\",\n  \"client_id\": \"client-7\"\n}", k+1)) // pretty-printed
	}
	return engine.WithDelivery(context.Background(), d), evs
}

// The envelopes of a run: each is the envelope of the event alone, with its own entry id,
// in order: a JSON array for HTTP, one compact line each for exec.
func TestMarshalBatch(t *testing.T) {
	ctx, evs := testRun(t)
	d, _ := engine.DeliveryFrom(ctx)
	var want []string
	for k, ev := range evs {
		one := d
		one.EntryID, one.Entries = d.Entries[k], nil
		b, err := Marshal(ev, one)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, string(b))
	}
	arr, err := MarshalBatch(evs, d)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("["+strings.Join(want, ",")+"]", string(arr)); diff != "" {
		t.Errorf("array (-want +got):\n%s", diff)
	}
	var envs []Envelope
	if err := json.Unmarshal(arr, &envs); err != nil {
		t.Fatalf("the array is not JSON: %v", err)
	}
	if len(envs) != 3 || envs[0].EntryID != d.Entries[0] || envs[2].EntryID != d.Entries[2] || envs[1].ID != "ev-2" {
		t.Errorf("decoded %+v", envs)
	}
	nd, err := MarshalNDJSON(evs, d)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.Join(want, "\n")+"\n", string(nd)); diff != "" {
		t.Errorf("NDJSON (-want +got):\n%s", diff)
	}
	bad := append([]engine.Event(nil), evs...)
	bad[1].Data = []byte(`{"oops"`)
	if _, err := MarshalBatch(bad, d); !errors.Is(err, ErrBadPayload) || !strings.Contains(err.Error(), d.Entries[1]) {
		t.Errorf("a run with data that is not JSON: %v, want ErrBadPayload naming entry %s", err, d.Entries[1])
	}
}

// A run over HTTP is one signed POST of the array, with the first and last entry and the
// size in headers next to those of a single delivery; a 2xx answer is the whole run done,
// anything else fails it.
func TestHTTPBatchDelivers(t *testing.T) {
	status := http.StatusNoContent
	var mu sync.Mutex
	srv, reqs, _ := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
	})
	key := []byte("s3cret")
	fn, err := HTTPBatch(HTTPConfig{URL: srv.URL + "/orders", Keys: [][]byte{key}, Client: newTestClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, evs := testRun(t)
	if err := fn(ctx, evs); err != nil {
		t.Fatal(err)
	}
	d, _ := engine.DeliveryFrom(ctx)
	wantBody, _ := MarshalBatch(evs, d)
	r := reqs()[0]
	if string(r.body) != string(wantBody) {
		t.Errorf("body = %s\nwant %s", r.body, wantBody)
	}
	for name, want := range map[string]string{
		"Content-Type":    "application/json",
		HeaderHandler:     "OrderProjector",
		HeaderStream:      "order:client-7",
		HeaderKey:         "client-7",
		HeaderEventID:     "ev-1",
		HeaderGeneration:  "42",
		HeaderAttempt:     "3",
		HeaderFirstEntry:  "1738317600123-0",
		HeaderLastEntry:   "1738317600200-0",
		HeaderBatchSize:   "3",
		HeaderLimitKey:    "",
		HeaderTraceParent: "",
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	req := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader(r.body))
	req.Header = r.header
	if err := Verify(req, r.body, key); err != nil {
		t.Errorf("the signature over the batch does not verify: %v", err)
	}

	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	var se *StatusError
	if err := fn(ctx, evs); !errors.As(err, &se) || se.StatusCode != 500 {
		t.Errorf("a 500 answer: %v, want a *StatusError", err)
	}
	if err := fn(ctx, nil); err != nil {
		t.Errorf("a run of no events: %v, want nothing sent and nil", err)
	}
	if n := len(reqs()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// A single delivery sends none of the batch headers.
func TestHTTPSingleHasNoBatchHeaders(t *testing.T) {
	srv, reqs, _ := testServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	fn, err := HTTP(HTTPConfig{URL: srv.URL, Client: newTestClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, ev := testEvent(t, `{"order_id":"o-1"}`)
	if err := fn(ctx, ev); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{HeaderFirstEntry, HeaderLastEntry, HeaderBatchSize} {
		if v, ok := reqs()[0].header[name]; ok {
			t.Errorf("%s = %q on a single delivery", name, v)
		}
	}
}

// A run over exec is one process with the envelopes as NDJSON on stdin and the first
// and last entry and the size in the environment; exit 0 is the whole run done.
func TestExecBatchDelivers(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OUT", dir)
	p := script(t, `cat > "$OUT/stdin"
env | grep -E '^SEQ_(EVENT_ID|FIRST_ENTRY|LAST_ENTRY|BATCH_SIZE|ATTEMPT)=' | sort > "$OUT/env"
exit "${FAIL:-0}"
`)
	fn, err := ExecBatch(ExecConfig{Argv: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, evs := testRun(t)
	if err := fn(ctx, evs); err != nil {
		t.Fatal(err)
	}
	d, _ := engine.DeliveryFrom(ctx)
	want, _ := MarshalNDJSON(evs, d)
	stdin, _ := os.ReadFile(filepath.Join(dir, "stdin"))
	if diff := cmp.Diff(string(want), string(stdin)); diff != "" {
		t.Errorf("stdin (-want +got):\n%s", diff)
	}
	if n := bytes.Count(stdin, []byte("\n")); n != 3 {
		t.Errorf("stdin has %d lines, want 3 (one per event)", n)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	wantEnv := "SEQ_ATTEMPT=3\nSEQ_BATCH_SIZE=3\nSEQ_EVENT_ID=ev-1\nSEQ_FIRST_ENTRY=1738317600123-0\nSEQ_LAST_ENTRY=1738317600200-0\n"
	if diff := cmp.Diff(wantEnv, string(env)); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
	t.Setenv("FAIL", "3")
	fn, _ = ExecBatch(ExecConfig{Argv: []string{p}})
	var xe *ExitError
	if err := fn(ctx, evs); !errors.As(err, &xe) || xe.ExitCode != 3 {
		t.Errorf("exit 3: %v, want an *ExitError", err)
	}
}

// Bind gives a handler with batch_max above 1 a BatchFunc and no Func, whatever its
// delivery; the others keep a Func.
func TestBindBatches(t *testing.T) {
	handler := filepath.Join(t.TempDir(), "handler.sh")
	if err := os.WriteFile(handler, []byte("#!/bin/sh\ncat >/dev/null\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := `name = "shop"
[[events]]
name = "OrderPlaced"
category = "order"
fields = ["order_id", "client_id"]
[[handlers]]
name = "ByHTTP"
handles = ["OrderPlaced"]
sequential_by = "client_id"
batch_max = 32
batch_wait = "20ms"
[handlers.deliver]
http = "http://127.0.0.1:1/orders"
[[handlers]]
name = "ByExec"
handles = ["OrderPlaced"]
batch_max = 10
[handlers.deliver]
exec = ["` + handler + `"]
[[handlers]]
name = "BySQL"
handles = ["OrderPlaced"]
batch_max = 100
[handlers.deliver.sql]
dsn_env = "ORDERS_DB"
statement = "INSERT INTO orders(id) VALUES ($2)"
[[handlers]]
name = "OneAtATime"
handles = ["OrderPlaced"]
batch_max = 1
[handlers.deliver]
http = "http://127.0.0.1:1/orders"
`
	cfg, err := config.Parse("domain.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	dom, err := cfg.InitDomain()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := Bind(cfg, dom, BindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type shape struct {
		Name      string
		BatchMax  int
		Batch, Fn bool
	}
	var got []shape
	for k, h := range dom.Handlers {
		got = append(got, shape{h.Name, bs[k].BatchMax, h.BatchFunc != nil, h.Func != nil})
	}
	want := []shape{{"ByHTTP", 32, true, false}, {"ByExec", 10, true, false}, {"BySQL", 100, true, false}, {"OneAtATime", 1, false, true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bound (-want +got):\n%s", diff)
	}
	if bs[0].BatchWait.String() != "20ms" {
		t.Errorf("ByHTTP's BatchWait = %v, want 20ms", bs[0].BatchWait)
	}
	if bs[2].Sink == nil {
		t.Error("BySQL has no sink to start")
	}
}

// A Go service built with Receive takes a batch: each envelope not applied before runs
// once, in one transaction; a batch whose function fails for one envelope commits none;
// a body whose headers do not describe it is refused with 400.
func TestReceiveBatch(t *testing.T) {
	db, dialect, err := sqldb.Open(sqltest.SQLiteDSN(t, "receiver.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ib, err := inbox.New(db, dialect)
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE seen (entry text NOT NULL, event text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	key := []byte("receiver-key")
	srv := httptest.NewServer(Receive(ib, &Verifier{Keys: [][]byte{key}}, func(ctx context.Context, tx *sql.Tx, env Envelope) error {
		if strings.Contains(string(env.Data), "poison") {
			return errors.New("poison")
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO seen (entry, event) VALUES ($1, $2)", env.EntryID, env.ID)
		return err
	}))
	t.Cleanup(srv.Close)
	fn, err := HTTPBatch(HTTPConfig{URL: srv.URL, Keys: [][]byte{key}, Client: newTestClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	send := func(gen int64, entries []string, data ...string) error {
		d := engine.Delivery{Handler: "Projector", Category: "order", Key: "c-1", Stream: "order:c-1",
			EntryID: entries[0], Entries: entries, Generation: gen, Attempt: 1}
		evs := make([]engine.Event, len(entries))
		for k, e := range entries {
			evs[k] = engine.Event{ID: "ev-" + e, Type: "OrderPlaced", Category: "order", Key: "c-1", Data: []byte(`{"order_id":"o-1"}`)}
			if k < len(data) {
				evs[k].Data = []byte(data[k])
			}
		}
		return fn(engine.WithDelivery(context.Background(), d), evs)
	}
	seen := func() string {
		rows, err := db.Query("SELECT entry FROM seen ORDER BY rowid")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var e string
			_ = rows.Scan(&e)
			out = append(out, e)
		}
		return fmt.Sprint(out)
	}
	if err := send(5, []string{"1-0", "2-0", "3-0"}); err != nil {
		t.Fatalf("the batch: %v", err)
	}
	if err := send(5, []string{"2-0", "3-0", "4-0"}); err != nil {
		t.Fatalf("an overlapping batch: %v", err)
	}
	if err := send(5, []string{"5-0", "6-0"}, `{"order_id":"o-5"}`, `{"poison":true}`); err == nil {
		t.Error("a batch whose function fails for one envelope succeeded")
	}
	if got := seen(); got != "[1-0 2-0 3-0 4-0]" {
		t.Errorf("applied %s, want each of 1-0..4-0 once and nothing of the failed batch", got)
	}
	if err := send(4, []string{"7-0"}); !errors.Is(err, engine.ErrFenced) {
		t.Errorf("a batch of an older generation: %v, want a 409 taken for an engine.ErrFenced", err)
	}

	// Headers that do not describe the body.
	post := func(mutate func(http.Header)) int {
		body := []byte(`[{"id":"e","type":"OrderPlaced","category":"order","key":"c-1","stream":"order:c-1","entry_id":"9-0","data":{}}]`)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", bytes.NewReader(body))
		for k, v := range map[string]string{HeaderHandler: "Projector", HeaderGeneration: "5", HeaderAttempt: "1",
			HeaderFirstEntry: "9-0", HeaderLastEntry: "9-0", HeaderBatchSize: "1"} {
			req.Header.Set(k, v)
		}
		mutate(req.Header)
		signRequest(req, body, time.Now(), [][]byte{key})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for name, mutate := range map[string]func(http.Header){
		"size":        func(h http.Header) { h.Set(HeaderBatchSize, "2") },
		"first entry": func(h http.Header) { h.Set(HeaderFirstEntry, "8-0") },
		"no size":     func(h http.Header) { h.Del(HeaderBatchSize) },
	} {
		if code := post(mutate); code != http.StatusBadRequest {
			t.Errorf("a batch with a wrong %s header: status %d, want 400", name, code)
		}
	}
	if code := post(func(http.Header) {}); code != http.StatusOK {
		t.Errorf("the same batch with its headers right: status %d, want 200", code)
	}
}
