package cmdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/enginetest"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// The end-to-end tests run seqctl against a real Redis and a running engine of the
// domain testdata/domains/ops.toml: OrderPlaced in "order", partitioned by client_id,
// handled by Projector (2 attempts, 10 ms apart).

type OpsPayload struct {
	Client string `json:"client_id"`
	Seq    int    `json:"seq"`
	Poison bool   `json:"poison,omitempty"`
	Block  bool   `json:"block,omitempty"`
}

// OpsWorld is a real Redis, the domain.toml, and a running engine whose Projector
// refuses a poison payload, blocks on a "block" payload until the test ends, and
// records every handled seq in "t:log:{key}".
type OpsWorld struct {
	OpsEngine
	Srv    *redistest.Server
	Rdb    *redis.Client
	config string
}

func StartOpsWorld(t *testing.T) *OpsWorld {
	t.Helper()
	srv := redistest.Start(t)
	w := &OpsWorld{Srv: srv, Rdb: srv.Client(t), config: WriteDomain(t, "ops")}
	w.OpsEngine = StartOpsEngine(t, w.config, srv.Client(t), srv.Client(t), w.Rdb)
	return w
}

// OpsEngine is a domain and a broker to publish to it.
type OpsEngine struct {
	Dom    *engine.Domain
	Broker *engine.RedisBroker
}

// StartOpsEngine loads the domain at config and starts an engine on client (stopped at
// cleanup) whose Projector refuses a poison payload, holds a blocking one until cleanup
// or its context ends, and records every handled seq in "t:log:{key}" through sink. The
// broker publishes through pub.
func StartOpsEngine(t *testing.T, configPath string, client, sink, pub redis.UniversalClient) OpsEngine {
	t.Helper()
	_, dom := LoadDomain(t, configPath)
	release := make(chan struct{})
	dom.Handlers[0].Func = func(ctx context.Context, ev engine.Event) error {
		var p OpsPayload
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
	enginetest.Start(t, engine.EngineConfig{Domain: dom, Client: client, InstanceID: "w1"})
	t.Cleanup(func() { close(release) }) // before the engine's shutdown: cleanups run last first
	return OpsEngine{Dom: dom, Broker: engine.NewRedisBroker(pub)}
}

// Publish publishes an OrderPlaced event of p.
func (o OpsEngine) Publish(t *testing.T, p OpsPayload) engine.Published {
	t.Helper()
	data, _ := json.Marshal(p)
	pub, err := o.Broker.Publish(context.Background(), o.Dom, "OrderPlaced", data, engine.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// Log is what Projector handled of key, in order.
func (w *OpsWorld) Log(t *testing.T, key string) []string {
	t.Helper()
	return w.Rdb.LRange(context.Background(), "t:log:"+key, 0, -1).Val()
}

// CLI runs seqctl against the world's Redis; withConfig adds --config.
func (w *OpsWorld) CLI(t *testing.T, withConfig bool, args ...string) Result {
	t.Helper()
	config := ""
	if withConfig {
		config = w.config
	}
	return CLIAt(t, w.Srv.URL, config, args...)
}

// CLIAt runs seqctl against the Redis at url, with --config when config is not "".
func CLIAt(t *testing.T, url, config string, args ...string) Result {
	t.Helper()
	args = append(args, "--redis-url", url)
	if config != "" {
		args = append(args, "--config", config)
	}
	return RunCLI(t, false, args...)
}

// HaltA publishes order:A seq 0..4 with seq 2 poisoned and waits until seqctl lists
// the partition as halted; it returns the poison entry.
func (w *OpsWorld) HaltA(t *testing.T, withConfig bool) engine.Published {
	t.Helper()
	var poison engine.Published
	for seq := 0; seq < 5; seq++ {
		p := w.Publish(t, OpsPayload{Client: "A", Seq: seq, Poison: seq == 2})
		if seq == 2 {
			poison = p
		}
	}
	var rows []admin.Partition
	testkit.WaitFor(t, 20*time.Second, "partitions list --halted shows order:A", func() bool {
		r := w.CLI(t, withConfig, "partitions", "list", "--halted", "-o", "json")
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
	if diff := cmp.Diff([]string{"0", "1"}, w.Log(t, "A")); diff != "" {
		t.Fatalf("order:A before the halt (-want +got):\n%s", diff)
	}
	return poison
}

// AuditOf returns the operator actions recorded in the Redis at url in the last hour,
// as 'seqctl audit -o json' prints them.
func AuditOf(t *testing.T, url string) []admin.AuditEntry {
	t.Helper()
	r := CLIAt(t, url, "", "audit", "--since", "1h", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("audit: exit %d: %s", r.Code, r.Stderr)
	}
	var entries []admin.AuditEntry
	if err := json.Unmarshal([]byte(r.Stdout), &entries); err != nil {
		t.Fatal(err)
	}
	return entries
}

// Outcomes lists audit entries as "COMMAND OUTCOME" lines.
func Outcomes(entries []admin.AuditEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Command+" "+e.Outcome)
	}
	return out
}
