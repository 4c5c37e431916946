package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("SEQCTL_DELIVER_ORPHAN_DIR"); dir != "" {
		orphanHelper(dir) // runs a handler, then waits to be killed
		return
	}
	goleak.VerifyTestMain(m,
		// The thread that starts exec handlers lives for the process (parent-death signal).
		goleak.IgnoreTopFunction("github.com/seqctl/seqctl/pkg/deliver.starterLoop"),
		goleak.IgnoreTopFunction("os/exec.(*Cmd).Wait"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("os.(*Process).blockUntilWaitable"),
		// Idle keep-alive connections of the shared HTTP transport (closed by
		// CloseIdleConnections, which a test may race with).
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// testEvent is an event as the engine hands it over, with its delivery in the context.
func testEvent(t testing.TB, data string) (context.Context, engine.Event) {
	t.Helper()
	ev := engine.Event{
		ID: "0b7e4c52-1d3f-4a5e-9c61-7f2a8e9d0c11", Type: "OrderPlaced", Category: "order", Key: "client-7",
		Data: []byte(data), PublishedAt: time.UnixMilli(1738317600123), Priority: 2,
	}
	d := engine.Delivery{
		Handler: "OrderProjector", Category: "order", Key: "client-7", Stream: "order:client-7",
		EntryID: "1738317600123-0", Generation: 42, Attempt: 3,
	}
	return engine.WithDelivery(context.Background(), d), ev
}

func TestMarshal(t *testing.T) {
	ctx, ev := testEvent(t, `{"order_id": "o-1", "client_id": "client-7", "total": 12.5}`)
	d, _ := engine.DeliveryFrom(ctx)
	got, err := Marshal(ev, d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"0b7e4c52-1d3f-4a5e-9c61-7f2a8e9d0c11","type":"OrderPlaced","category":"order","key":"client-7",` +
		`"stream":"order:client-7","entry_id":"1738317600123-0","data":{"order_id":"o-1","client_id":"client-7","total":12.5},` +
		`"published_at":"2025-01-31T10:00:00.123Z","priority":2}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("envelope mismatch (-want +got):\n%s", diff)
	}

	t.Run("published_at is UTC with milliseconds", func(t *testing.T) {
		ev := ev
		ev.PublishedAt = time.Date(2025, 1, 31, 11, 0, 0, 0, time.FixedZone("CET", 3600))
		got, _ := Marshal(ev, d)
		if !strings.Contains(string(got), `"published_at":"2025-01-31T10:00:00.000Z"`) {
			t.Errorf("got %s", got)
		}
	})
	t.Run("unknown publish time is null", func(t *testing.T) {
		ev := ev
		ev.PublishedAt = time.Time{}
		got, _ := Marshal(ev, d)
		if !strings.Contains(string(got), `"published_at":null`) {
			t.Errorf("got %s", got)
		}
	})
	t.Run("empty data is null", func(t *testing.T) {
		ev := ev
		ev.Data = nil
		got, _ := Marshal(ev, d)
		if !strings.Contains(string(got), `"data":null`) {
			t.Errorf("got %s", got)
		}
	})
	t.Run("data that is not JSON fails the attempt", func(t *testing.T) {
		ev := ev
		ev.Data = []byte(`{"oops"`)
		_, err := Marshal(ev, d)
		if !errors.Is(err, ErrBadPayload) {
			t.Errorf("err = %v, want ErrBadPayload", err)
		}
	})
	t.Run("round trip", func(t *testing.T) {
		var env Envelope
		if err := json.Unmarshal(got, &env); err != nil {
			t.Fatal(err)
		}
		if env.Key != "client-7" || env.Stream != "order:client-7" || string(env.Data) != `{"order_id":"o-1","client_id":"client-7","total":12.5}` {
			t.Errorf("decoded %+v", env)
		}
	})
}

func TestBind(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "handler.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat >/dev/null\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const base = `name = "shop"
[[events]]
name = "OrderPlaced"
category = "order"
fields = ["order_id", "client_id"]
[[events]]
name = "PaymentConfirmed"
category = "payment"
fields = ["order_id"]
[[commands]]
name = "PlaceOrder"
category = "order_command"
fields = ["order_id", "client_id"]
[[handlers]]
name = "PlaceOrderHandler"
kind = "command"
handles = ["PlaceOrder"]
sequential_by = "client_id"
`
	tests := []struct {
		name     string
		extra    string
		env      map[string]string
		want     []Binding
		problems []string // "PATH: fragment"
	}{
		{
			name: "http, signed, and exec",
			extra: `[[handlers]]
name = "Projector"
handles = ["OrderPlaced"]
sequential_by = "client_id"
[handlers.deliver]
http = "http://hook:pa55@127.0.0.1:1/orders"
signing_key_env = "PROJECTOR_SECRET"
[[process_managers]]
name = "Fulfillment"
sequential_by = true
[process_managers.deliver]
exec = ["` + script + `", "--quiet"]
[[process_managers.handles]]
event = "PaymentConfirmed"
correlate = "order_id"
start = true
`,
			env: map[string]string{"PROJECTOR_SECRET": "s3cret"},
			want: []Binding{
				{Name: "PlaceOrderHandler", Kind: "command handler"},
				{Name: "Projector", Kind: "handler", Mode: "http", Target: "http://hook:xxxxx@127.0.0.1:1/orders", Signed: true},
				{Name: "Fulfillment", Kind: "process manager", Mode: "exec", Target: script + " --quiet"},
			},
		},
		{
			name: "every problem at once",
			extra: `[[handlers]]
name = "GoOnly"
handles = ["OrderPlaced"]
[[handlers]]
name = "Signed"
handles = ["OrderPlaced"]
[handlers.deliver]
http = "http://127.0.0.1:1/x"
signing_key_env = "MISSING_SECRET"
[[handlers]]
name = "Missing"
handles = ["OrderPlaced"]
[handlers.deliver]
exec = ["./no/such/program"]
[[process_managers]]
name = "Fulfillment"
[[process_managers.handles]]
event = "PaymentConfirmed"
correlate = "order_id"
`,
			env: map[string]string{"MISSING_SECRET": ""},
			problems: []string{
				`handlers[1]: handler "GoOnly" has no [handlers.deliver] table`,
				"handlers[2].deliver.signing_key_env: the environment variable MISSING_SECRET is not set (or empty)",
				`handlers[3].deliver.exec: cannot run "./no/such/program"`,
				`process_managers[0]: process manager "Fulfillment" has no [process_managers.deliver] table`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse("domain.toml", []byte(base+tt.extra))
			if err != nil {
				t.Fatal(err)
			}
			dom, err := cfg.InitDomain()
			if err != nil {
				t.Fatal(err)
			}
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			got, err := Bind(cfg, dom, BindOptions{LookupEnv: lookup})
			if tt.problems != nil {
				var ce *config.Error
				if !errors.As(err, &ce) {
					t.Fatalf("err = %v, want a *config.Error", err)
				}
				if len(ce.Problems) != len(tt.problems) {
					t.Fatalf("problems:\n%s\nwant %d", ce.Error(), len(tt.problems))
				}
				for i, p := range ce.Problems {
					if line := p.Path + ": " + p.Message; !strings.HasPrefix(line, tt.problems[i]) {
						t.Errorf("problem %d = %q, want prefix %q", i, line, tt.problems[i])
					}
				}
				for _, h := range dom.Handlers {
					if h.Func != nil {
						t.Errorf("handler %s bound despite the problems", h.Name)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("bindings (-want +got):\n%s", diff)
			}
			for _, h := range dom.Handlers {
				if (h.Func != nil) != (h.Kind == engine.EventHandlerKind) {
					t.Errorf("handler %s (%v): Func set = %v", h.Name, h.Kind, h.Func != nil)
				}
			}
			for _, p := range dom.ProcessManagers {
				if p.Func == nil {
					t.Errorf("process manager %s: Func not set", p.Name)
				}
			}
		})
	}
}

// shopProjector is a domain.toml whose OrderProjector handles OrderPlaced by client_id,
// up to its [handlers.deliver] table, which each test appends.
const shopProjector = `name = "shop"
[[events]]
name = "OrderPlaced"
category = "order"
fields = ["order_id", "client_id"]
[[handlers]]
name = "OrderProjector"
handles = ["OrderPlaced"]
sequential_by = "client_id"
`

// A run under a limit key hands its permit to the handler: the value, the slot and the
// generation, in headers over HTTP and in the environment of an exec handler.
func TestLimitPermitDelivered(t *testing.T) {
	ctx, ev := testEvent(t, `{"order_id":"o-1","client_id":"client-7","tenant_id":"acme"}`)
	d, _ := engine.DeliveryFrom(ctx)
	d.Limit = &engine.LimitPermit{Value: "acme", Slot: 1, Generation: 1796545924710123}
	ctx = engine.WithDelivery(context.Background(), d)

	srv, reqs, _ := testServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	fn, err := HTTP(HTTPConfig{URL: srv.URL, Client: newTestClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(ctx, ev); err != nil {
		t.Fatal(err)
	}
	h := reqs()[0].header
	got := []string{h.Get(HeaderLimitKey), h.Get(HeaderLimitSlot), h.Get(HeaderLimitGeneration)}
	if diff := cmp.Diff([]string{"acme", "1", "1796545924710123"}, got); diff != "" {
		t.Errorf("limit headers (-want +got):\n%s", diff)
	}

	dir := t.TempDir()
	t.Setenv("OUT", dir)
	x, err := Exec(ExecConfig{Argv: []string{script(t, `env | grep -E '^SEQ_LIMIT_' | sort > "$OUT/env"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x(ctx, ev); err != nil {
		t.Fatal(err)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	want := "SEQ_LIMIT_GENERATION=1796545924710123\nSEQ_LIMIT_KEY=acme\nSEQ_LIMIT_SLOT=1\n"
	if diff := cmp.Diff(want, string(env)); diff != "" {
		t.Errorf("limit environment (-want +got):\n%s", diff)
	}
}
