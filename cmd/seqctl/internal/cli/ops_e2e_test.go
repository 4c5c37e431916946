package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

// opsDomain is the domain.toml of the end-to-end tests: OrderPlaced in "order",
// partitioned by client_id, handled by Projector (2 attempts, 10 ms apart).
const opsDomain = `name = "shop"

[[events]]
name = "OrderPlaced"
category = "order"
fields = ["client_id", "seq", "poison", "block"]

[[handlers]]
name = "Projector"
part_of = "order"
handles = ["OrderPlaced"]
sequential_by = "client_id"
max_retries = 2
retry_delay = "10ms"
`

type opsPayload struct {
	Client string `json:"client_id"`
	Seq    int    `json:"seq"`
	Poison bool   `json:"poison,omitempty"`
	Block  bool   `json:"block,omitempty"`
}

// opsWorld is a real Redis, the domain.toml, and a running engine whose Projector
// refuses a poison payload, blocks on a "block" payload until the test ends, and
// records every handled seq in "t:log:{key}".
type opsWorld struct {
	opsEngine
	srv    *redistest.Server
	rdb    *redis.Client
	config string
}

func startOpsWorld(t *testing.T) *opsWorld {
	t.Helper()
	srv := redistest.Start(t)
	w := &opsWorld{srv: srv, rdb: srv.Client(t), config: writeConfig(t, opsDomain)}
	w.opsEngine = startOpsEngine(t, w.config, srv.Client(t), srv.Client(t), w.rdb)
	return w
}

// opsEngine is a running engine of opsDomain and a broker to publish to it.
type opsEngine struct {
	dom    *engine.Domain
	broker *engine.RedisBroker
}

// startOpsEngine loads the domain at config and starts an engine on client (stopped at
// cleanup) whose Projector refuses a poison payload, holds a blocking one until cleanup
// or its context ends, and records every handled seq in "t:log:{key}" through sink. The
// broker publishes through pub.
func startOpsEngine(t *testing.T, configPath string, client, sink, pub redis.UniversalClient) opsEngine {
	t.Helper()
	cfg, err := config.Load(configPath)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := cfg.InitDomain()
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	dom.Handlers[0].Func = func(ctx context.Context, ev engine.Event) error {
		var p opsPayload
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			return err
		}
		if p.Poison {
			return fmt.Errorf("poison payload %s/%d refused", p.Client, p.Seq)
		}
		if p.Block {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return sink.RPush(context.Background(), "t:log:"+p.Client, p.Seq).Err()
	}
	e, err := engine.New(engine.EngineConfig{
		Domain: dom, Client: client, InstanceID: "w1",
		Timing:            engine.LeaseTiming{LeaseTTL: 2 * time.Second, HeartbeatInterval: 400 * time.Millisecond, PollInterval: 50 * time.Millisecond},
		DiscoveryInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		_ = e.Shutdown(context.Background())
	})
	return opsEngine{dom: dom, broker: engine.NewRedisBroker(pub)}
}

func (o opsEngine) publish(t *testing.T, p opsPayload) engine.Published {
	t.Helper()
	data, _ := json.Marshal(p)
	pub, err := o.broker.Publish(context.Background(), o.dom, "OrderPlaced", data, engine.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func (w *opsWorld) log(t *testing.T, key string) []string {
	t.Helper()
	return w.rdb.LRange(context.Background(), "t:log:"+key, 0, -1).Val()
}

// cli runs seqctl against the world's Redis; withConfig adds --config.
func (w *opsWorld) cli(t *testing.T, withConfig bool, args ...string) result {
	t.Helper()
	args = append(args, "--redis-url", w.srv.URL)
	if withConfig {
		args = append(args, "--config", w.config)
	}
	return runCLI(t, false, args...)
}

// haltA publishes order:A seq 0..4 with seq 2 poisoned and waits until seqctl lists
// the partition as halted; it returns the poison entry.
func (w *opsWorld) haltA(t *testing.T, withConfig bool) engine.Published {
	t.Helper()
	var poison engine.Published
	for seq := 0; seq < 5; seq++ {
		p := w.publish(t, opsPayload{Client: "A", Seq: seq, Poison: seq == 2})
		if seq == 2 {
			poison = p
		}
	}
	var rows []admin.Partition
	waitUntil(t, 20*time.Second, "partitions list --halted shows order:A", func() bool {
		r := w.cli(t, withConfig, "partitions", "list", "--halted", "-o", "json")
		if r.Code != 0 {
			t.Fatalf("partitions list: exit %d: %s", r.Code, r.Stderr)
		}
		rows = nil
		if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
			t.Fatalf("partitions list -o json: %v\n%s", err, r.Stdout)
		}
		return len(rows) == 1
	})
	p := rows[0]
	if p.Stream != "order:A" || p.Handler != "Projector" || p.State != admin.StateHalted || p.HaltedEntryID != poison.EntryID ||
		!strings.HasPrefix(p.Owner, "w1.") || p.Generation <= 0 || p.LeaseRemainingMS <= 0 || p.HeadAgeMS < 0 {
		t.Fatalf("halted row = %+v, want order:A halted on %s, owned by w1", p, poison.EntryID)
	}
	if diff := cmp.Diff([]string{"0", "1"}, w.log(t, "A")); diff != "" {
		t.Fatalf("order:A before the halt (-want +got):\n%s", diff)
	}
	return poison
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", timeout, what)
}

func auditOf(t *testing.T, w *opsWorld) []admin.AuditEntry {
	t.Helper()
	r := w.cli(t, false, "audit", "--since", "1h", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("audit: exit %d: %s", r.Code, r.Stderr)
	}
	var entries []admin.AuditEntry
	if err := json.Unmarshal([]byte(r.Stdout), &entries); err != nil {
		t.Fatal(err)
	}
	return entries
}

// Acceptance 1: a poison event halts order:A; partitions list --halted -o json shows it
// with its halted_entry_id; head show prints the payload and the error; head skip with
// that id resumes the partition and later events are handled; audit lists the action.
func TestOperatorSkipEndToEnd(t *testing.T) {
	w := startOpsWorld(t)
	poison := w.haltA(t, true)

	r := w.cli(t, true, "head", "show", "order:A", "--handler", "Projector")
	checkResult(t, r, 0, "", []string{
		"id\t" + poison.EntryID, "status\thalted", "attempts\t2", "last_error\tpoison payload A/2 refused",
		`data	{"client_id":"A","seq":2,"poison":true}`,
	}, nil)
	r = w.cli(t, true, "head", "show", "order:A", "--handler", "Projector", "-o", "json")
	var h admin.Head
	if err := json.Unmarshal([]byte(r.Stdout), &h); err != nil || h.ID != poison.EntryID || h.Envelope.ID != poison.EventID {
		t.Fatalf("head show -o json: %v %+v", err, h)
	}

	r = w.cli(t, true, "head", "skip", "order:A", "--handler", "Projector", "--expect-id", poison.EntryID, "--yes", "--reason", "e2e")
	checkResult(t, r, 0, "", []string{"Skipped " + poison.EntryID + " on order:A for Projector"}, nil)
	waitUntil(t, 10*time.Second, "order:A resumed", func() bool { return len(w.log(t, "A")) == 4 })
	w.publish(t, opsPayload{Client: "A", Seq: 5})
	waitUntil(t, 10*time.Second, "a later event handled", func() bool { return len(w.log(t, "A")) == 5 })
	if diff := cmp.Diff([]string{"0", "1", "3", "4", "5"}, w.log(t, "A")); diff != "" {
		t.Errorf("order:A after the skip (-want +got):\n%s", diff)
	}
	r = w.cli(t, true, "partitions", "list", "--halted", "-o", "json")
	if strings.TrimSpace(r.Stdout) != "[]" {
		t.Errorf("still halted after the skip: %s", r.Stdout)
	}

	entries := auditOf(t, w)
	if len(entries) != 1 {
		t.Fatalf("audit = %+v, want the skip", entries)
	}
	e := entries[0]
	if e.Command != "head skip" || e.Stream != "order:A" || e.Handler != "Projector" || e.EntryID != poison.EntryID ||
		e.Outcome != admin.OutcomeOK || e.Reason != "e2e" || e.User == "" || e.Host == "" || e.Time.IsZero() {
		t.Errorf("audit entry = %+v", e)
	}
	r = w.cli(t, false, "audit")
	if !strings.Contains(r.Stdout, "head skip\torder:A\tProjector\t"+poison.EntryID+"\tok") {
		t.Errorf("audit rows lack the skip:\n%s", r.Stdout)
	}
}

// Acceptance 2: head dlq moves the head with its error to order:A:dlq, the partition
// resumes, dlq list shows it (and a replay puts it back at the tail). Without --config:
// categories and handlers come from Redis.
func TestOperatorDLQEndToEnd(t *testing.T) {
	w := startOpsWorld(t)
	poison := w.haltA(t, false)

	r := w.cli(t, false, "head", "dlq", "order:A", "--handler", "Projector", "--expect-id", poison.EntryID, "--yes", "--reason", "bad payload")
	checkResult(t, r, 0, "", []string{"to order:A:dlq with its error"}, nil)
	waitUntil(t, 10*time.Second, "order:A resumed", func() bool { return len(w.log(t, "A")) == 4 })

	msgs := w.rdb.XRange(context.Background(), engine.DLQStream("order", "A"), "-", "+").Val()
	if len(msgs) != 1 || msgs[0].Values["halt_error"] != "poison payload A/2 refused" || msgs[0].Values["original_id"] != poison.EntryID ||
		msgs[0].Values["reason"] != "bad payload" || msgs[0].Values["data"] != `{"client_id":"A","seq":2,"poison":true}` {
		t.Fatalf("order:A:dlq = %+v", msgs)
	}

	r = w.cli(t, false, "dlq", "list", "order:A", "-o", "json")
	var dlq []admin.DLQEntry
	if err := json.Unmarshal([]byte(r.Stdout), &dlq); err != nil || len(dlq) != 1 {
		t.Fatalf("dlq list -o json: %v\n%s", err, r.Stdout)
	}
	if d := dlq[0]; d.OriginalID != poison.EntryID || d.Error != "poison payload A/2 refused" || d.Attempts != 2 || d.Handler != "Projector" {
		t.Errorf("dlq entry = %+v", d)
	}
	r = w.cli(t, false, "dlq", "list", "order:A")
	if !strings.Contains(r.Stdout, poison.EntryID+"\tProjector\tOrderPlaced\t"+poison.EventID) {
		t.Errorf("dlq list rows:\n%s", r.Stdout)
	}

	// Replay: at the tail, removed from the DLQ; the handler still refuses it, so the
	// partition halts again, on the new entry.
	r = w.cli(t, false, "dlq", "replay", "order:A", "--id", dlq[0].ID, "--yes", "-o", "json")
	var rr admin.ReplayResult
	if err := json.Unmarshal([]byte(r.Stdout), &rr); err != nil || !rr.Removed || rr.EventID != poison.EventID {
		t.Fatalf("dlq replay: %v %+v (stderr %s)", err, rr, r.Stderr)
	}
	if n := w.rdb.XLen(context.Background(), engine.DLQStream("order", "A")).Val(); n != 0 {
		t.Errorf("the DLQ still has %d entries after the replay", n)
	}
	waitUntil(t, 10*time.Second, "halted on the replayed entry", func() bool {
		r := w.cli(t, false, "partitions", "list", "--halted", "-o", "json")
		return strings.Contains(r.Stdout, `"halted_entry_id": "`+rr.EntryID+`"`)
	})
	var outcomes []string
	for _, e := range auditOf(t, w) {
		outcomes = append(outcomes, e.Command+" "+e.Outcome)
	}
	if diff := cmp.Diff([]string{"head dlq ok", "dlq replay ok"}, outcomes); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
}

// Acceptance 3: a stale --expect-id exits 4 and changes nothing; a head that is not
// halted is refused without --force; no --yes without a terminal exits 2 and changes
// nothing. Each refusal is in the audit log.
func TestOperatorRefusalsEndToEnd(t *testing.T) {
	w := startOpsWorld(t)
	poison := w.haltA(t, true)
	haltOf := func() map[string]string {
		return w.rdb.HGetAll(context.Background(), engine.HaltKey("order:A", "Projector")).Val()
	}
	pending := func(stream string) int64 {
		p, err := w.rdb.XPending(context.Background(), stream, "Projector").Result()
		if err != nil {
			return -1 // no group yet
		}
		return p.Count
	}
	before := haltOf()
	pendingA := pending("order:A")

	r := w.cli(t, true, "head", "skip", "order:A", "--handler", "Projector", "--expect-id", "1-1", "--yes")
	checkResult(t, r, ExitConflict, "", nil, []string{"head moved: expected 1-1, the head is now " + poison.EntryID})

	r = w.cli(t, true, "head", "dlq", "order:A", "--handler", "Projector")
	checkResult(t, r, ExitUsage, "", nil, []string{"refusing to move to the DLQ " + poison.EntryID + " without confirmation", "pass --yes"})

	if diff := cmp.Diff(before, haltOf()); diff != "" {
		t.Errorf("the halt record changed (-before +after):\n%s", diff)
	}
	if n := pending("order:A"); n != pendingA {
		t.Errorf("pending entries changed: %d -> %d", pendingA, n)
	}
	if n := w.rdb.Exists(context.Background(), engine.DLQStream("order", "A")).Val(); n != 0 {
		t.Error("something was moved to the DLQ")
	}

	// A head in flight (the handler is still working on it) is not halted.
	blocked := w.publish(t, opsPayload{Client: "C", Seq: 0, Block: true})
	waitUntil(t, 10*time.Second, "order:C in flight", func() bool {
		return pending("order:C") == 1
	})
	r = w.cli(t, true, "head", "skip", "order:C", "--handler", "Projector", "--yes")
	checkResult(t, r, ExitFailure, "", nil, []string{"the head " + blocked.EntryID + " of order:C for Projector is pending, not halted; pass --force"})
	if n := pending("order:C"); n != 1 {
		t.Errorf("the refused skip acknowledged the in-flight entry")
	}
	r = w.cli(t, true, "head", "retry", "order:C", "--handler", "Projector", "--expect-id", blocked.EntryID, "--yes")
	checkResult(t, r, ExitFailure, "", nil, []string{"only a halted head can be retried"})

	var outcomes []string
	for _, e := range auditOf(t, w) {
		outcomes = append(outcomes, e.Command+" "+e.Outcome)
	}
	want := []string{"head skip head_moved", "head dlq refused", "head skip not_halted", "head retry not_halted"}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}

	// With --force the running head is skipped (the owner's handler is still running).
	r = w.cli(t, true, "head", "skip", "order:C", "--handler", "Projector", "--expect-id", blocked.EntryID, "--yes", "--force")
	checkResult(t, r, 0, "", []string{"Skipped " + blocked.EntryID}, nil)
}

// TestPartitionsList10kCLI measures 'seqctl partitions list' over 10,000 partitions,
// end to end (connect, list, render), on a private local redis-server, and logs the
// times (a measurement, not a timed assertion; the target is under 2 s).
// Run: go test ./cmd/seqctl/internal/cli -run TestPartitionsList10kCLI -v
func TestPartitionsList10kCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 partitions: skipped with -short")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rdb.Set(ctx, engine.SessionKey("i1.1"), "i1", time.Minute)
	rdb.SAdd(ctx, engine.GroupRegistry("order"), "Projector")
	for start := 0; start < 10000; start += 1000 {
		pipe := rdb.Pipeline()
		for i := start; i < start+1000; i++ {
			key := "client-" + strconv.Itoa(i)
			stream := engine.PartitionStream("order", key)
			for seq := 0; seq < 3; seq++ {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", fmt.Sprint(i, "-", seq), "type", "OrderPlaced", "data", "{}"}})
			}
			pipe.SAdd(ctx, engine.PartitionIndex("order"), key)
			pipe.XGroupCreate(ctx, stream, "Projector", "0")
			pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "Projector", Consumer: "i1.1:1", Streams: []string{stream, ">"}, Count: 2})
			pipe.Set(ctx, engine.LeaseKey(stream, "Projector"), "i1.1:"+strconv.Itoa(i+1), 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"partitions", "list", "-o", "json"},
		{"partitions", "list"},
		{"partitions", "list", "--halted"},
	} {
		start := time.Now()
		r := runCLI(t, false, append(args, "--redis-url", srv.URL)...)
		took := time.Since(start)
		if r.Code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.Code, r.Stderr)
		}
		t.Logf("seqctl %s over 10,000 partitions: %d lines in %v", strings.Join(args, " "), strings.Count(r.Stdout, "\n"), took)
	}
}

// The design card's own command: 'head skip STREAM --yes' with neither --handler nor
// --expect-id, against a live engine whose category has one handler, resumes the
// partition; a malformed --expect-id is a usage error (exit 2) that changes nothing.
func TestOperatorSkipInfersHandlerEndToEnd(t *testing.T) {
	w := startOpsWorld(t)
	poison := w.haltA(t, false)

	r := w.cli(t, false, "head", "skip", "order:A", "--expect-id", "garbage", "--yes")
	checkResult(t, r, ExitUsage, "", nil, []string{`invalid value "garbage" for --expect-id`})
	if got := w.log(t, "A"); len(got) != 2 {
		t.Fatalf("a malformed --expect-id changed something: %v", got)
	}

	r = w.cli(t, false, "head", "skip", "order:A", "--yes")
	checkResult(t, r, 0, "", []string{"Skipped " + poison.EntryID + " on order:A for Projector"}, []string{"Current head of order:A for Projector"})
	waitUntil(t, 10*time.Second, "order:A resumed", func() bool { return len(w.log(t, "A")) == 4 })
	if diff := cmp.Diff([]string{"0", "1", "3", "4"}, w.log(t, "A")); diff != "" {
		t.Errorf("order:A after the skip (-want +got):\n%s", diff)
	}
}
