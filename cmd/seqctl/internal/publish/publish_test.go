package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestPublishParse(t *testing.T) {
	cmdtest.ParseTable(t, "", NewCmd, []cmdtest.ParseCase[Options]{
		{
			Name: "one event",
			Argv: []string{"--event", "OrderPlaced", "--data", `{"client_id":"c-1"}`, "--priority", "-1", "--id", "e-1"},
			Want: Options{ConfigPath: "domain.toml", Event: "OrderPlaced", Data: `{"client_id":"c-1"}`, Priority: -1, ID: "e-1", RetryFor: 15 * time.Second},
		},
		{
			Name: "a file of payloads",
			Argv: []string{"--config", "d.toml", "-e", "OrderPlaced", "-d", "@orders.jsonl", "-o", "json", "--redis-url", "redis://x:1/2"},
			Want: Options{ConfigPath: "d.toml", Event: "OrderPlaced", Data: "@orders.jsonl", Output: "json", Redis: redisconn.Flags{URL: "redis://x:1/2"}, RetryFor: 15 * time.Second},
		},
		{
			Name: "a file of event lines",
			Argv: []string{"--data", "@-", "--retry-for", "0"},
			Want: Options{ConfigPath: "domain.toml", Data: "@-"},
		},
		{Name: "no data", Argv: []string{"--event", "OrderPlaced"}, WantErr: "--data is required"},
		{Name: "no event", Argv: []string{"--data", "{}"}, WantErr: "--event is required"},
		{Name: "data not JSON", Argv: []string{"--event", "X", "--data", "{client_id: 1}"}, WantErr: "--data is not valid JSON"},
		{Name: "data with trailing garbage", Argv: []string{"--event", "X", "--data", "{} {}"}, WantErr: "--data is not valid JSON"},
		{Name: "bare @", Argv: []string{"--data", "@"}, WantErr: "--data @ needs a file name"},
		{Name: "id with a file", Argv: []string{"--data", "@x.jsonl", "--id", "e-1"}, WantErr: "--id names one event"},
		{Name: "bad output", Argv: []string{"--event", "X", "--data", "{}", "-o", "csv"}, WantErr: `invalid value "csv" for --output`},
		{
			Name: "table output is text",
			Argv: []string{"--event", "X", "--data", "{}", "-o", "table"},
			Want: Options{ConfigPath: "domain.toml", Event: "X", Data: "{}", Output: "table", RetryFor: 15 * time.Second},
		},
		{Name: "bad priority", Argv: []string{"--event", "X", "--data", "{}", "--priority", "high"}, WantErr: `invalid argument "high"`},
	}, cmpopts.IgnoreFields(Options{}, "IO"))
}

// publishFixture is a Redis server and a config pointing at it.
func publishFixture(t *testing.T) (*redis.Client, string, string) {
	t.Helper()
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.Start(t)
	return srv.Client(t), cmdtest.WriteDomain(t, "publish"), srv.URL
}

// keys lists every key in Redis, sorted.
func keys(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	ks, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ks)
	return ks
}

func TestPublishOne(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	base := []string{"publish", "--config", cfg, "--redis-url", url}

	res := cmdtest.RunCLI(t, false, append(base, "--event", "OrderPlaced", "--data", `{"order_id":"o-1","client_id":"c-1"}`, "--id", "e-1")...)
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	row := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\t")
	if len(row) != 3 || row[0] != "order:c-1" || row[2] != "e-1" {
		t.Fatalf("stdout = %q, want order:c-1<TAB>ENTRY<TAB>e-1", res.Stdout)
	}
	msgs, err := rdb.XRange(context.Background(), "order:c-1", "-", "+").Result()
	if err != nil || len(msgs) != 1 || msgs[0].ID != row[1] {
		t.Fatalf("stream order:c-1 = %v, %v", msgs, err)
	}
	ev, err := engine.EventFromMessage(msgs[0])
	if err != nil || ev.ID != "e-1" || ev.Type != "OrderPlaced" || ev.Key != "c-1" || string(ev.Data) != `{"order_id":"o-1","client_id":"c-1"}` {
		t.Errorf("entry = %+v, %v", ev, err)
	}
	if ok, _ := rdb.SIsMember(context.Background(), "order:__partitions__", "c-1").Result(); !ok {
		t.Error("c-1 not in the discovery index")
	}

	t.Run("terminal", func(t *testing.T) {
		res := cmdtest.RunCLI(t, true, append(base, "--event", "OrderPlaced", "--data", `{"client_id":"c-1"}`)...)
		if res.Code != 0 || !strings.HasPrefix(res.Stdout, "✓ published OrderPlaced ") || !strings.Contains(res.Stdout, " to order:c-1 as entry ") {
			t.Errorf("exit %d, stdout %q", res.Code, res.Stdout)
		}
	})
	t.Run("json, backfill lane", func(t *testing.T) {
		res := cmdtest.RunCLI(t, false, append(base, "--event", "OrderPlaced", "--data", `{"client_id":"c-2"}`, "--priority", "-1", "-o", "json")...)
		var got publishResult
		if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil || res.Code != 0 {
			t.Fatalf("exit %d, stdout %q: %v", res.Code, res.Stdout, err)
		}
		if got.Stream != "order:c-2:backfill" || got.Key != "c-2" || got.Category != "order" || got.Type != "OrderPlaced" || got.EntryID == "" || got.EventID == "" {
			t.Errorf("result = %+v", got)
		}
	})
	t.Run("unpartitioned category", func(t *testing.T) {
		res := cmdtest.RunCLI(t, false, append(base, "--event", "Audited", "--data", `{"what":"x"}`)...)
		if res.Code != 0 || !strings.HasPrefix(res.Stdout, "audit\t") {
			t.Errorf("exit %d, stdout %q", res.Code, res.Stdout)
		}
	})
	t.Run("unknown event", func(t *testing.T) {
		res := cmdtest.RunCLI(t, false, append(base, "--event", "Nope", "--data", `{}`)...)
		if res.Code != cmdutil.ExitUsage || !strings.Contains(res.Stderr, `unknown event type "Nope" (declared events: Audited, OrderPlaced)`) {
			t.Errorf("exit %d, stderr %q", res.Code, res.Stderr)
		}
	})
	for _, tt := range []struct{ name, event, data, want string }{
		{"a typo gets a suggestion", "OrderPlcaed", `{"client_id":"c-1"}`, `unknown event type "OrderPlcaed": did you mean "OrderPlaced"? (declared events: Audited, OrderPlaced)`},
		{"case is forgiven in the suggestion", "orderplaced", `{"client_id":"c-1"}`, `did you mean "OrderPlaced"?`},
		{"an array payload", "OrderPlaced", `[{"client_id":"c-1"}]`, `the payload is a JSON array; an event payload is a JSON object`},
		{"a string payload", "OrderPlaced", `"c-1"`, `the payload is a JSON string; an event payload is a JSON object`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := cmdtest.RunCLI(t, false, append(base, "--event", tt.event, "--data", tt.data)...)
			if res.Code != cmdutil.ExitUsage || !strings.Contains(res.Stderr, tt.want) || strings.Contains(res.Stderr, "engine:") || strings.Contains(res.Stderr, "Go value") {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q in the user's terms", res.Code, res.Stderr, tt.want)
			}
		})
	}
}

// TestPublishInvalidKeys: every kind of invalid key exits 2 with the reason, and Redis
// is unchanged.
func TestPublishInvalidKeys(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	ctx := context.Background()
	// Something in Redis first, so "unchanged" means more than "still empty".
	cmdtest.PublishOne(t, cfg, url, `{"client_id":"c-1"}`)
	before := keys(t, rdb)
	lenBefore, _ := rdb.XLen(ctx, "order:c-1").Result()
	tests := []struct {
		name, data, reason string
	}{
		{"null", `{"client_id":null}`, `the field "client_id" is null`},
		{"missing", `{"order_id":"o-1"}`, `the payload has no field "client_id"`},
		{"empty", `{"client_id":""}`, "the key is null or empty"},
		{"too long", `{"client_id":"` + strings.Repeat("k", 256) + `"}`, "the key is 256 bytes, longer than the limit of 255 bytes"},
		{"colon", `{"client_id":"a:b"}`, `"a:b" contains ':'`},
		{"dlq", `{"client_id":"dlq"}`, `"dlq" equals the reserved lane token "dlq"`},
		{"backfill", `{"client_id":"backfill"}`, `"backfill" equals the reserved lane token "backfill"`},
		{"sentinel", `{"client_id":"__sentinel__"}`, `"__sentinel__" has the reserved __name__ form`},
		{"wrong type", `{"client_id":{"id":1}}`, "the field holds a JSON object; a partition key must be a string or an integer"},
		{"NUL", `{"client_id":"a\u0000b"}`, `"a\x00b" contains the control character U+0000 at byte 1`},
		{"newline", `{"client_id":"a\nb"}`, `"a\nb" contains the control character U+000A at byte 1`},
		{"brace", `{"client_id":"{x}"}`, `"{x}" contains '{' or '}'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", tt.data)
			if res.Code != cmdutil.ExitUsage {
				t.Errorf("exit code = %d, want 2", res.Code)
			}
			if !strings.Contains(res.Stderr, `invalid partition key for category "order" (field "client_id"): `+tt.reason) {
				t.Errorf("stderr = %q, want the reason %q", res.Stderr, tt.reason)
			}
			if res.Stdout != "" {
				t.Errorf("stdout = %q, want nothing", res.Stdout)
			}
			if diff := cmp.Diff(before, keys(t, rdb)); diff != "" {
				t.Errorf("Redis keys changed (-before +after):\n%s", diff)
			}
			if n, _ := rdb.DBSize(ctx).Result(); n != int64(len(before)) {
				t.Errorf("DBSIZE = %d, want %d", n, len(before))
			}
			if n, _ := rdb.XLen(ctx, "order:c-1").Result(); n != lenBefore {
				t.Errorf("order:c-1 has %d entries, want %d", n, lenBefore)
			}
		})
	}
}

func TestPublishFile(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	ctx := context.Background()
	dir := t.TempDir()
	payloads := filepath.Join(dir, "orders.jsonl")
	cmdtest.WriteFile(t, payloads, `{"order_id":"o-1","client_id":"c-1"}
{"order_id":"o-2","client_id":"c-2"}

{"order_id":"o-3","client_id":"a:b"}
{"order_id":"o-4"
{"order_id":"o-5","client_id":"c-1"}
`)
	t.Run("payload lines with --event", func(t *testing.T) {
		res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", "@"+payloads)
		if res.Code != cmdutil.ExitUsage {
			t.Errorf("exit %d, want 2", res.Code)
		}
		for _, w := range []string{
			payloads + `:4: invalid partition key for category "order" (field "client_id"): "a:b" contains ':'`,
			payloads + ":5: the payload is not valid JSON",
			payloads + ": published 3 of 5 events, 2 failed",
		} {
			if !strings.Contains(res.Stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, res.Stderr)
			}
		}
		lines := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "1\torder:c-1\t") || !strings.HasPrefix(lines[1], "2\torder:c-2\t") || !strings.HasPrefix(lines[2], "6\torder:c-1\t") {
			t.Errorf("stdout rows:\n%s", res.Stdout)
		}
		msgs, _ := rdb.XRange(ctx, "order:c-1", "-", "+").Result()
		var orders []string
		for _, m := range msgs {
			var p struct {
				Order string `json:"order_id"`
			}
			ev, _ := engine.EventFromMessage(m)
			_ = json.Unmarshal(ev.Data, &p)
			orders = append(orders, p.Order)
		}
		if diff := cmp.Diff([]string{"o-1", "o-5"}, orders); diff != "" {
			t.Errorf("order:c-1 (-want +got):\n%s", diff)
		}
		if ks := keys(t, rdb); slices.ContainsFunc(ks, func(k string) bool { return strings.Contains(k, "a:b") || strings.HasPrefix(k, "order:a") }) {
			t.Errorf("a bad line wrote something: %v", ks)
		}
	})

	t.Run("event lines, json summary", func(t *testing.T) {
		events := filepath.Join(dir, "events.jsonl")
		cmdtest.WriteFile(t, events, `{"event":"OrderPlaced","data":{"client_id":"c-9"},"priority":-1}
{"event":"Audited","data":{"what":"login"},"id":"audit-1"}
{"event":"Nope","data":{}}
{"data":{"client_id":"c-9"}}
{"event":"OrderPlaced","data":{"client_id":"c-9"},"extra":1}
{"event":"OrderPlaced","data":{"client_id":"c-9"},"priority":"high"}
[1,2]
{"event":"OrderPlaced","data":[1]}
`)
		res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--data", "@"+events, "-o", "json")
		if res.Code != cmdutil.ExitUsage {
			t.Errorf("exit %d, want 2", res.Code)
		}
		var sum fileSummary
		if err := json.Unmarshal([]byte(res.Stdout), &sum); err != nil {
			t.Fatalf("stdout %q: %v", res.Stdout, err)
		}
		if sum.Lines != 8 || sum.Published != 2 || sum.Failed != 6 || len(sum.Failures) != 6 {
			t.Fatalf("summary = %+v", sum)
		}
		for i, w := range []struct {
			line int
			msg  string
		}{
			{3, `unknown event type "Nope"`}, {4, `the line has no "event"`}, {5, `unknown field "extra"; an event line is {"event": NAME`},
			{6, `"priority" is a JSON string; it must be an integer`}, {7, `the line is a JSON array, not an object`},
			{8, `the payload is a JSON array; an event payload is a JSON object`},
		} {
			if f := sum.Failures[i]; f.Line != w.line || !strings.Contains(f.Error, w.msg) || strings.Contains(f.Error, "Go ") {
				t.Errorf("failure %d = %+v, want line %d and %q in the user's terms", i, f, w.line, w.msg)
			}
		}
		if n, _ := rdb.XLen(ctx, "order:c-9:backfill").Result(); n != 1 {
			t.Errorf("order:c-9:backfill has %d entries, want 1 (priority -1)", n)
		}
		msgs, _ := rdb.XRange(ctx, "audit", "-", "+").Result()
		if len(msgs) != 1 || msgs[0].Values["id"] != "audit-1" {
			t.Errorf("audit stream = %v", msgs)
		}
	})

	t.Run("stdin, all good", func(t *testing.T) {
		ios, in, out, errOut := cmdutil.NewTestIOStreams()
		in.WriteString(`{"client_id":"c-7"}` + "\n" + `{"client_id":"c-7"}`)
		code := cmdtest.RunRoot(context.Background(), &cmdutil.Factory{IOStreams: ios, Build: cmdtest.TestBuild},
			[]string{"publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", "@-"})
		if code != 0 || strings.Count(out.String(), "\n") != 2 || !strings.Contains(errOut.String(), "stdin: published 2 of 2 events, 0 failed") {
			t.Errorf("exit %d\nstdout %q\nstderr %q", code, out.String(), errOut.String())
		}
	})

	t.Run("progress bar on a terminal", func(t *testing.T) {
		ios, _, out, errOut := cmdutil.NewTestIOStreams()
		ios.IsTerminal = true
		opts := &Options{IO: ios, ConfigPath: cfg, Redis: redisconn.Flags{URL: url}, Event: "OrderPlaced", Data: "@" + payloads, ProgressTTY: true}
		err := publishRun(context.Background(), opts)
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage {
			t.Errorf("err = %v", err)
		}
		if !strings.Contains(errOut.String(), "\r\x1b[2K[") || !strings.Contains(errOut.String(), "/6 lines") {
			t.Errorf("no progress bar on stderr: %q", errOut.String())
		}
		if out.String() != "" {
			t.Errorf("terminal stdout = %q, want nothing (the summary is on stderr)", out.String())
		}
	})

	t.Run("missing file", func(t *testing.T) {
		res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", "@"+filepath.Join(dir, "absent.jsonl"))
		if res.Code != cmdutil.ExitUsage || !strings.Contains(res.Stderr, "no such file") {
			t.Errorf("exit %d, stderr %q", res.Code, res.Stderr)
		}
	})
}

// A Redis that does not answer: with --retry-for 0 the publish fails at once; otherwise
// it says it publishes again, and fails once --retry-for has passed.
func TestPublishRedisDown(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	cfg := cmdtest.WriteDomain(t, "publish")
	for _, retry := range []string{"0", "300ms"} {
		res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", "redis://127.0.0.1:1/0", "--retry-for", retry,
			"--event", "OrderPlaced", "--data", `{"client_id":"c-1"}`)
		if res.Code != cmdutil.ExitFailure || !strings.Contains(res.Stderr, "redis unavailable") {
			t.Errorf("--retry-for %s: exit %d, stderr %q", retry, res.Code, res.Stderr)
		}
		said := strings.Contains(res.Stderr, "publishing again with the same event id for up to 300ms (--retry-for)")
		if said != (retry != "0") {
			t.Errorf("--retry-for %s: the retry is said %v, want %v: %q", retry, said, retry != "0", res.Stderr)
		}
	}
}

// A file published while Redis restarts: each event is published again, with its id,
// until Redis answers, and every line is published exactly once.
func TestPublishFileRidesOutARedisRestart(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cfg := cmdtest.WriteDomain(t, "publish")
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, `{"order_id":"o-%d","client_id":"c-%d"}`+"\n", i, i%5)
	}
	file := filepath.Join(t.TempDir(), "orders.jsonl")
	cmdtest.WriteFile(t, file, b.String())
	srv.Stop()
	done := make(chan cmdtest.Result, 1)
	go func() {
		done <- cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", srv.URL, "--event", "OrderPlaced", "--data", "@"+file)
	}()
	// Longer than go-redis's own retries of a refused dial (about 3.3 s for the pipeline
	// of a chunk, twice a single command's), so that the command's own retry is what
	// rides the restart out.
	time.Sleep(5 * time.Second)
	srv.StartAgain()
	res := <-done
	if res.Code != 0 || !strings.Contains(res.Stderr, "publishing again with the same event id") {
		t.Fatalf("exit %d, stderr:\n%s", res.Code, res.Stderr)
	}
	ctx := context.Background()
	var total int64
	for i := range 5 {
		total += rdb.XLen(ctx, fmt.Sprintf("order:c-%d", i)).Val()
	}
	if total != 50 {
		t.Errorf("%d entries in the streams, want the file's 50", total)
	}
}

// With [broker] min_replicas, seqctl publish reports a publish done only once that many
// replicas have it (one WAIT per command, a file's events included): with no replica it
// exits 1 saying the events are on the primary but a failover may lose them; with one, 0.
func TestPublishWaitsForReplicas(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	primary := redistest.Start(t)
	domain := strings.Replace(cmdtest.DomainText(t, "publish"), `name = "shop"`, "name = \"shop\"\n\n[broker]\nmin_replicas = 1\nreplica_timeout_ms = 300", 1)
	cfg := cmdtest.WriteConfig(t, domain)
	base := []string{"publish", "--config", cfg, "--redis-url", primary.URL}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	cmdtest.WriteFile(t, file, "{\"client_id\":\"c-1\"}\n{\"client_id\":\"c-2\"}\n{\"client_id\":\"c-3\"}\n")
	one := append(base, "--event", "OrderPlaced", "--data", `{"client_id":"c-1"}`)
	many := append(base, "--event", "OrderPlaced", "--data", "@"+file)
	rdb := primary.Client(t)
	waits := func() int64 { return redistest.CommandCalls(t, rdb, "wait") }

	for _, args := range [][]string{one, many} {
		res := cmdtest.RunCLI(t, false, args...)
		if res.Code != cmdutil.ExitFailure || !strings.Contains(res.Stderr, "0 of the 1 required replicas") || !strings.Contains(res.Stderr, "a failover may lose") {
			t.Errorf("%v without a replica: exit %d, stderr %q; want exit 1 naming the replicas", args[len(args)-1], res.Code, res.Stderr)
		}
	}
	if n := rdb.XLen(context.Background(), "order:c-1").Val(); n != 2 {
		t.Errorf("order:c-1 holds %d entries, want 2: the publishes are done on the primary", n)
	}

	redistest.StartReplica(t, primary)
	for _, args := range [][]string{one, many} {
		before := waits()
		res := cmdtest.RunCLI(t, false, args...)
		if res.Code != 0 {
			t.Errorf("%v with a replica: exit %d, stderr %q", args[len(args)-1], res.Code, res.Stderr)
		}
		if n := waits() - before; n != 1 {
			t.Errorf("%v: %d WAIT calls, want 1", args[len(args)-1], n)
		}
	}
}

// $TRACEPARENT (and $TRACESTATE), or --traceparent, go with every event published; one
// that is not a W3C traceparent is refused before anything is written.
func TestPublishTraceContext(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	ctx := context.Background()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	t.Setenv("TRACEPARENT", tp)
	t.Setenv("TRACESTATE", "rojo=1")
	if res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", `{"client_id":"c-1"}`); res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, res.Stderr)
	}
	msgs := rdb.XRange(ctx, "order:c-1", "-", "+").Val()
	if len(msgs) != 1 || msgs[0].Values["traceparent"] != tp || msgs[0].Values["tracestate"] != "rojo=1" {
		t.Fatalf("entries %v", msgs)
	}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	cmdtest.WriteFile(t, file, "{\"client_id\":\"c-5\"}\n{\"client_id\":\"c-5\"}\n")
	if res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", "@"+file); res.Code != 0 {
		t.Fatalf("a file: exit %d: %s", res.Code, res.Stderr)
	}
	for _, m := range rdb.XRange(ctx, "order:c-5", "-", "+").Val() {
		if m.Values["traceparent"] != tp || m.Values["tracestate"] != "rojo=1" {
			t.Errorf("an entry of a file lacks the trace context: %v", m.Values)
		}
	}
	t.Setenv("TRACEPARENT", "00-abc-def-01")
	res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", `{"client_id":"c-2"}`)
	if res.Code != cmdutil.ExitUsage || !strings.Contains(res.Stderr, `$TRACEPARENT: traceparent "00-abc-def-01" is not a W3C trace context`) {
		t.Errorf("a bad $TRACEPARENT: exit %d, stderr %q", res.Code, res.Stderr)
	}
	res = cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--traceparent", "x", "--event", "OrderPlaced", "--data", `{"client_id":"c-2"}`)
	if res.Code != cmdutil.ExitUsage || !strings.Contains(res.Stderr, `--traceparent: traceparent "x"`) {
		t.Errorf("a bad --traceparent: exit %d, stderr %q", res.Code, res.Stderr)
	}
	if n := rdb.Exists(ctx, "order:c-2").Val(); n != 0 {
		t.Errorf("a refused publish wrote the stream")
	}
}

// seqctl publish and engine.RedisBroker.Publish are one writer: for the same event (type,
// payload, id, priority and W3C trace context, which a Go publisher gives as its ctx's
// span context) they leave Redis in the same state, field by field: the entry, the
// discovery index, the control notice and the dedupe mark. Only published_at (Redis
// TIME) and the entry id differ.
func TestPublishWritesWhatBrokerPublishWrites(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	ctx := context.Background()
	conf, err := cmdutil.LoadConfigFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := conf.InitDomain()
	if err != nil {
		t.Fatal(err)
	}
	broker := engine.NewRedisBroker(rdb)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tt := range []struct {
		name, event, data string
		priority          int
		traceparent       string
		tracestate        string
		refused           string // seqctl publish refuses the event with this usage error
	}{
		{name: "a partitioned event", event: "OrderPlaced", data: `{"order_id":"o-1","client_id":"c-1"}`},
		{name: "the backfill lane", event: "OrderPlaced", data: `{"client_id":"c-2"}`, priority: -1},
		{name: "an unpartitioned category", event: "Audited", data: `{"what":"x"}`},
		{name: "trace context", event: "OrderPlaced", data: `{"client_id":"c-3"}`, traceparent: tp, tracestate: "rojo=1"},
		{name: "a tracestate with spaces", event: "OrderPlaced", data: `{"client_id":"c-3"}`, traceparent: tp, tracestate: "rojo=1 , congo=2"},
		{name: "a tracestate that does not parse", event: "OrderPlaced", data: `{"client_id":"c-3"}`, traceparent: tp, tracestate: "not a tracestate"},
		{name: "the random trace flag", event: "OrderPlaced", data: `{"client_id":"c-3"}`, traceparent: tp[:53] + "03"},
		// Flags version 00 does not define: Broker.Publish has no trace context to store
		// (the propagator refuses the header), so seqctl publish refuses it.
		{name: "undefined trace flags", event: "OrderPlaced", data: `{"client_id":"c-3"}`, traceparent: tp[:53] + "ff",
			refused: `$TRACEPARENT: traceparent "` + tp[:53] + `ff" sets trace flags W3C trace context does not define`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const id = "e-same"
			t.Setenv("TRACEPARENT", tt.traceparent)
			t.Setenv("TRACESTATE", tt.tracestate)
			rdb.FlushAll(ctx)
			res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", tt.event, "--data", tt.data,
				"--priority", strconv.Itoa(tt.priority), "--id", id)
			if tt.refused != "" {
				if res.Code != cmdutil.ExitUsage || !strings.Contains(res.Stderr, tt.refused) {
					t.Errorf("seqctl publish: exit %d, stderr %q; want exit 2 and %q", res.Code, res.Stderr, tt.refused)
				}
				tt.traceparent, tt.tracestate = "", ""
				t.Setenv("TRACEPARENT", "")
				res = cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", tt.event, "--data", tt.data,
					"--priority", strconv.Itoa(tt.priority), "--id", id)
			}
			if res.Code != 0 {
				t.Fatalf("seqctl publish: exit %d: %s", res.Code, res.Stderr)
			}
			byCLI := redisState(t, rdb)

			rdb.FlushAll(ctx)
			pctx := ctx
			if tt.traceparent != "" {
				pctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tt.traceparent, "tracestate": tt.tracestate})
			}
			if _, err := broker.Publish(pctx, dom, tt.event, []byte(tt.data), engine.PublishOptions{ID: id, Priority: tt.priority}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(redisState(t, rdb), byCLI); diff != "" {
				t.Errorf("what seqctl publish wrote differs from what Broker.Publish wrote (-Publish +CLI):\n%s", diff)
			}
		})
	}
}

// redisState is every key of the server with its type and content, entry ids and
// published_at left out (they differ between two publishes of one event): a stream's
// entries' fields, a set's members, a hash, a string value (an entry id reads "<entry>"),
// and whether the key expires.
func redisState(t *testing.T, rdb *redis.Client) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	var entryIDs []string
	for _, k := range keys(t, rdb) {
		if rdb.Type(ctx, k).Val() == "stream" {
			for _, m := range rdb.XRange(ctx, k, "-", "+").Val() {
				entryIDs = append(entryIDs, m.ID)
			}
		}
	}
	for _, k := range keys(t, rdb) {
		var v any
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "stream":
			var entries []map[string]any
			for _, m := range rdb.XRange(ctx, k, "-", "+").Val() {
				delete(m.Values, "published_at")
				entries = append(entries, m.Values)
			}
			v = entries
		case "set":
			ms := rdb.SMembers(ctx, k).Val()
			slices.Sort(ms)
			v = ms
		case "hash":
			v = rdb.HGetAll(ctx, k).Val()
		case "string":
			s := rdb.Get(ctx, k).Val()
			if slices.Contains(entryIDs, s) {
				s = "<entry>"
			}
			v = s
		default:
			v = typ
		}
		out[k] = map[string]any{"value": v, "expires": rdb.PTTL(ctx, k).Val() > 0}
	}
	return out
}

// orderLines writes a file of n OrderPlaced payloads, line i ordering "o-i" for the
// client key(i), and returns its path.
func orderLines(t *testing.T, n int, key func(i int) string) string {
	t.Helper()
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"order_id":"o-%d","client_id":%q}`+"\n", i, key(i))
	}
	file := filepath.Join(t.TempDir(), "orders.jsonl")
	cmdtest.WriteFile(t, file, b.String())
	return file
}

// streamOrders returns the order ids of a stream's events in stream order, and the
// order id and event id of each entry id.
func streamOrders(t *testing.T, rdb *redis.Client, stream string) (orders []string, byEntry map[string][2]string) {
	t.Helper()
	byEntry = map[string][2]string{}
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		ev, err := engine.EventFromMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Order string `json:"order_id"`
		}
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			t.Fatal(err)
		}
		orders = append(orders, p.Order)
		byEntry[m.ID] = [2]string{p.Order, ev.ID}
	}
	return orders, byEntry
}

// A file of several hundred lines over several keys, a few chunks long: each key's
// stream holds its lines in file order, and each line has its row, in file order,
// naming the entry that holds its event.
func TestPublishFileKeepsEachKeysOrder(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	const lines, keys = 700, 7
	key := func(i int) string { return fmt.Sprintf("c-%d", i%keys) }
	file := orderLines(t, lines, key)
	res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", "@"+file)
	if res.Code != 0 || !strings.Contains(res.Stderr, fmt.Sprintf("published %d of %d events, 0 failed", lines, lines)) {
		t.Fatalf("exit %d, stderr %q", res.Code, res.Stderr)
	}
	entries := map[string][2]string{} // stream + " " + entry id -> order id, event id
	for k := range keys {
		stream := fmt.Sprintf("order:c-%d", k)
		var want []string
		for i := 1; i <= lines; i++ {
			if key(i) == fmt.Sprintf("c-%d", k) {
				want = append(want, fmt.Sprintf("o-%d", i))
			}
		}
		got, byEntry := streamOrders(t, rdb, stream)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", stream, diff)
		}
		for id, e := range byEntry {
			entries[stream+" "+id] = e
		}
	}
	rows := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
	if len(rows) != lines {
		t.Fatalf("%d rows, want %d", len(rows), lines)
	}
	for i, row := range rows {
		line := i + 1
		f := strings.Split(row, "\t")
		e, ok := entries[f[1]+" "+f[2]]
		if len(f) != 4 || f[0] != strconv.Itoa(line) || f[1] != "order:"+key(line) || !ok || e != [2]string{fmt.Sprintf("o-%d", line), f[3]} {
			t.Errorf("row %d = %q, want %d<TAB>order:%s<TAB>the entry of o-%d<TAB>its event id (entry: %v)", i, row, line, key(line), line, e)
		}
	}
}

// Bad lines in the middle of chunks: each is reported by its line number and counted,
// the other lines of its chunk are published, and the publish goes on to the end.
func TestPublishFileChunkWithBadLines(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	const lines = 600
	bad := map[int]string{ // line -> what stderr says about it
		3:   `invalid partition key for category "order" (field "client_id"): "a:b" contains ':'`,
		100: "the line is not valid JSON: unexpected end of JSON input",
		255: `unknown event type "OrderPlcaed": did you mean "OrderPlaced"?`,
		256: `the line has no "event"`,
		257: "the payload is a JSON array",
		599: `"priority" is a JSON string; it must be an integer`,
	}
	var b strings.Builder
	var want []string
	for i := 1; i <= lines; i++ {
		switch i {
		case 3:
			b.WriteString(`{"event":"OrderPlaced","data":{"client_id":"a:b"}}`)
		case 100:
			b.WriteString(`{"event":"OrderPlaced","data":{"client_id":"c-1"}`)
		case 255:
			b.WriteString(`{"event":"OrderPlcaed","data":{"client_id":"c-1"}}`)
		case 256:
			b.WriteString(`{"data":{"client_id":"c-1"}}`)
		case 257:
			b.WriteString(`{"event":"OrderPlaced","data":[{"client_id":"c-1"}]}`)
		case 599:
			b.WriteString(`{"event":"OrderPlaced","data":{"client_id":"c-1"},"priority":"high"}`)
		default:
			fmt.Fprintf(&b, `{"event":"OrderPlaced","data":{"order_id":"o-%d","client_id":"c-1"}}`, i)
			want = append(want, fmt.Sprintf("o-%d", i))
		}
		b.WriteString("\n")
	}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	cmdtest.WriteFile(t, file, b.String())
	res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", url, "--data", "@"+file)
	if res.Code != cmdutil.ExitUsage {
		t.Errorf("exit %d, want 2", res.Code)
	}
	var reported []int
	for _, l := range strings.Split(res.Stderr, "\n") {
		rest, ok := strings.CutPrefix(l, file+":")
		if !ok {
			continue
		}
		n, msg, _ := strings.Cut(rest, ": ")
		line, _ := strconv.Atoi(n)
		reported = append(reported, line)
		if !strings.Contains(msg, bad[line]) || bad[line] == "" {
			t.Errorf("line %d: %q, want %q", line, msg, bad[line])
		}
	}
	if diff := cmp.Diff([]int{3, 100, 255, 256, 257, 599}, reported); diff != "" {
		t.Errorf("lines reported on stderr (-want +got):\n%s", diff)
	}
	if w := fmt.Sprintf("published %d of %d events, %d failed", lines-len(bad), lines, len(bad)); !strings.Contains(res.Stderr, w) {
		t.Errorf("stderr lacks %q:\n%s", w, res.Stderr)
	}
	got, _ := streamOrders(t, rdb, "order:c-1")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order:c-1 (-want +got):\n%s", diff)
	}
	var rowLines []int
	for _, row := range strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n") {
		n, _, _ := strings.Cut(row, "\t")
		line, _ := strconv.Atoi(n)
		rowLines = append(rowLines, line)
	}
	if len(rowLines) != lines-len(bad) || slices.ContainsFunc(rowLines, func(l int) bool { return bad[l] != "" }) || !slices.IsSorted(rowLines) {
		t.Errorf("rows are not the good lines in file order: %v", rowLines)
	}
}

// roundTrips counts what a go-redis client sends: each command sent alone and each
// pipeline is one round trip; those carrying an event (EVALSHA or EVAL) are counted
// apart from the connection's handshake and the loading of scripts.
type roundTrips struct{ all, events atomic.Int64 }

func (h *roundTrips) count(cmds ...redis.Cmder) {
	h.all.Add(1)
	if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }) {
		h.events.Add(1)
	}
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// A file is sent a chunk at a time, a pipeline each: 1,000 lines take 4 pipelines
// (chunkEvents lines each), plus what loading the publish script costs once, not 1,000
// round trips. The test gives the publisher a client it counts on (publishWith takes the
// publisher; publishRun only builds one from the flags).
func TestPublishFileRoundTrips(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	ctx := context.Background()
	conf, err := cmdutil.LoadConfigFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := conf.InitDomain()
	if err != nil {
		t.Fatal(err)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	counted := redis.NewClient(opt)
	t.Cleanup(func() { _ = counted.Close() })
	var rt roundTrips
	counted.AddHook(&rt)

	const lines = 1000
	file := orderLines(t, lines, func(i int) string { return fmt.Sprintf("c-%d", i%10) })
	ios, _, out, errOut := cmdutil.NewTestIOStreams()
	opts := &Options{IO: ios, ConfigPath: cfg, Event: "OrderPlaced", Data: "@" + file}
	p := &publisher{dom: dom, broker: engine.NewRedisBroker(counted), errOut: ios.ErrOut}
	if err := publishWith(ctx, opts, p); err != nil {
		t.Fatalf("publish: %v\n%s", err, errOut)
	}
	if n := strings.Count(out.String(), "\n"); n != lines {
		t.Errorf("%d rows, want %d", n, lines)
	}
	var total int64
	for k := range 10 {
		total += rdb.XLen(ctx, fmt.Sprintf("order:c-%d", k)).Val()
	}
	if total != lines {
		t.Errorf("%d entries, want %d", total, lines)
	}
	chunks := int64((lines + chunkEvents - 1) / chunkEvents)
	// The first chunk meets a server without the script: NOSCRIPT, the scripts loaded,
	// and the chunk sent again. The other round trips are the connection's handshake.
	if n := rt.events.Load(); n > chunks+1 {
		t.Errorf("%d round trips carried the events of %d lines, want at most %d: one per chunk of %d, and the first again once the script is loaded",
			n, lines, chunks+1, chunkEvents)
	}
	if n := rt.all.Load(); n > lines/50 {
		t.Errorf("%d round trips in all for %d lines", n, lines)
	}
}

// Lines piped in slowly are published as they come: a chunk is sent when no more input
// is at hand, not held back until it is full.
func TestPublishStdinPublishesLinesAsTheyCome(t *testing.T) {
	rdb, cfg, url := publishFixture(t)
	ctx := context.Background()
	pr, pw := io.Pipe()
	ios, _, out, errOut := cmdutil.NewTestIOStreams()
	ios.In = pr
	done := make(chan int, 1)
	go func() {
		done <- cmdtest.RunRoot(ctx, &cmdutil.Factory{IOStreams: ios, Build: cmdtest.TestBuild},
			[]string{"publish", "--config", cfg, "--redis-url", url, "--event", "OrderPlaced", "--data", "@-"})
	}()
	for i := 1; i <= 3; i++ {
		if _, err := fmt.Fprintf(pw, `{"order_id":"o-%d","client_id":"c-1"}`+"\n", i); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); rdb.XLen(ctx, "order:c-1").Val() < int64(i); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				pw.Close()
				<-done
				t.Fatalf("line %d is not published while stdin waits for the next one", i)
			}
		}
	}
	pw.Close()
	if code := <-done; code != 0 || strings.Count(out.String(), "\n") != 3 {
		t.Errorf("exit %d\nstdout %q\nstderr %q", code, out.String(), errOut.String())
	}
}

// Redis refusing one event of a chunk (a key the ACL user may not write) stops the
// publish, exit 1, naming FILE:LINE of that event. The summary counts exactly the lines
// whose events were appended, with a row each: those before it and those after it in its
// chunk. The next chunk is not sent.
func TestPublishFileStopsAtARefusedEvent(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.StartWith(t, redistest.Options{Users: []string{"publisher on >pw ~*c-1* ~*c-3* ~order:__* ~__seqctl__:* &* +@all"}})
	rdb := srv.Client(t)
	cfg := cmdtest.WriteDomain(t, "publish")
	const lines = 300 // two chunks
	key := func(i int) string {
		if i == 2 {
			return "c-2"
		}
		return fmt.Sprintf("c-%d", 1+2*(i%2)) // c-1, c-3
	}
	file := orderLines(t, lines, key)
	res := cmdtest.RunCLI(t, false, "publish", "--config", cfg, "--redis-url", srv.UserURL("publisher", "pw"), "--event", "OrderPlaced", "--data", "@"+file)
	if res.Code != cmdutil.ExitFailure || !strings.Contains(res.Stderr, file+":2: publish stopped: ") || !strings.Contains(res.Stderr, "lacks a permission") {
		t.Errorf("exit %d, stderr %q; want exit 1 and %s:2 refused", res.Code, res.Stderr, file)
	}
	appended := chunkEvents - 1
	if w := fmt.Sprintf("published %d of %d events, 0 failed", appended, chunkEvents); !strings.Contains(res.Stderr, w) {
		t.Errorf("stderr lacks %q:\n%s", w, res.Stderr)
	}
	var want []string
	for i := 1; i <= chunkEvents; i++ {
		if i != 2 {
			want = append(want, strconv.Itoa(i))
		}
	}
	var got []string
	for _, row := range strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n") {
		n, _, _ := strings.Cut(row, "\t")
		got = append(got, n)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows' lines (-want +got):\n%s", diff)
	}
	ctx := context.Background()
	if n := rdb.XLen(ctx, "order:c-1").Val() + rdb.XLen(ctx, "order:c-3").Val(); n != int64(appended) {
		t.Errorf("%d entries, want %d", n, appended)
	}
}

// loadingReply is a LOADING reply, as go-redis returns one.
type loadingReply struct{}

func (loadingReply) Error() string { return "LOADING Redis is loading the dataset in memory" }
func (loadingReply) RedisError()   {}

// TestPublishRedisUnavailable checks which failures publish retries: what
// engine.Transient calls transient, and before anything was published, of the network
// failures only a refused connection.
func TestPublishRedisUnavailable(t *testing.T) {
	refused := fmt.Errorf("%w: %w", engine.ErrRedisUnavailable, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	reset := fmt.Errorf("%w: %w", engine.ErrRedisUnavailable, io.EOF)
	loading := fmt.Errorf("%w: %w", engine.ErrRedisUnavailable, loadingReply{})
	for _, tt := range []struct {
		name          string
		err           error
		before, after bool
	}{
		{"refused", refused, true, true},
		{"closed", reset, false, true},
		{"LOADING, translated", loading, true, true},
		{"LOADING", loadingReply{}, true, true},
		{"out of memory", fmt.Errorf("%w: full", engine.ErrRedisOutOfMemory), false, false},
		{"another error", errors.New("engine: unknown event type"), false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := redisUnavailable(tt.err, false); got != tt.before {
				t.Errorf("before anything was published: redisUnavailable(%v) = %v, want %v", tt.err, got, tt.before)
			}
			if got := redisUnavailable(tt.err, true); got != tt.after {
				t.Errorf("after: redisUnavailable(%v) = %v, want %v", tt.err, got, tt.after)
			}
		})
	}
}
