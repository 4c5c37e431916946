package root

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
)

// printsNoData are the commands whose output is not data, so -o does not apply to them;
// every other command is in the table of TestStructuredOutputEveryCommand.
var printsNoData = map[string]string{
	"run":            "a worker: it logs",
	"dev":            "the demo: a dashboard or summary lines",
	"top":            "a dashboard",
	"relay":          "a worker: it logs",
	"exporter":       "a server: it logs and serves /metrics",
	"completion":     "a shell script",
	"outbox migrate": "one sentence",
}

// outputAdmin is a fake admin that answers every operator command with sample data.
func outputAdmin() *cmdtest.FakeAdmin {
	fa := &cmdtest.FakeAdmin{
		Partitions:   cmdtest.SamplePartitions(),
		Inspection:   cmdtest.SampleInspection(),
		HeadAnswer:   cmdtest.SampleHead(),
		DLQEntries:   cmdtest.SampleDLQ(),
		DLQSummaries: cmdtest.SampleDLQs(),
		Audit:        cmdtest.SampleAudit(),
		GroupList:    cmdtest.SampleGroups(),
		Plan:         &admin.ReplayPlan{Entry: cmdtest.SampleDLQ()[0], Stream: "order:client-1"},
		ReplayResult: &admin.ReplayResult{DLQID: "1738318000000-0", DLQStream: "order:client-1:dlq", EventID: cmdtest.SampleEnvelope().ID,
			Stream: "order:client-1", EntryID: "1738318100000-0", Removed: true, Outcome: admin.OutcomeOK},
	}
	la := cmdtest.LimitsAdmin()
	fa.LimitsByHandler, fa.LimitList = la.LimitsByHandler, la.LimitList
	return fa
}

// Every command that prints data prints what -o asks for: -o yaml is YAML and -o json is
// JSON, each an object or a list, and both hold the same data.
func TestStructuredOutputEveryCommand(t *testing.T) {
	// outbox status reads an SQLite outbox; publish writes to a Redis.
	config := cmdtest.WriteConfig(t, cmdtest.DomainText(t, "ops")+"\n[outbox]\ndsn = \"sqlite://"+filepath.Join(t.TempDir(), "outbox.db")+"\"\n")
	if r := cmdtest.RunOps(t, outputAdmin(), cmdtest.InPipe, "", "outbox", "migrate", "--config", config); r.Code != 0 {
		t.Fatalf("outbox migrate: exit %d\n%s", r.Code, r.Stderr)
	}
	srv := redistest.Start(t)
	// inbox migrate and prune work on the inbox of a SQL sink in an SQLite file.
	sinkConfig := cmdtest.WriteDomain(t, "sqlsink", "STATEMENT", "SELECT $1")
	t.Setenv("SEQCTL_TEST_ORDERS_DB", "sqlite://"+filepath.Join(t.TempDir(), "orders.db"))

	tests := []struct {
		cmd  string
		args []string
		// volatile: the two runs print different values (ids, times), so only the
		// shape of the data is compared.
		volatile bool
	}{
		{cmd: "partitions list"},
		{cmd: "partitions inspect", args: []string{"order:client-1"}},
		{cmd: "partitions pause", args: []string{"order:client-2", "--handler", "OrderProjector", "--reason", "OPS-42", "--yes"}},
		{cmd: "partitions resume", args: []string{"order:client-2", "--handler", "OrderProjector", "--yes"}},
		{cmd: "head show", args: []string{"order:client-1", "--handler", "OrderProjector"}},
		{cmd: "head skip", args: []string{"order:client-1", "--handler", "OrderProjector", "--expect-id", cmdtest.PoisonID, "--yes"}},
		{cmd: "head dlq", args: []string{"order:client-1", "--handler", "OrderProjector", "--expect-id", cmdtest.PoisonID, "--dry-run"}},
		{cmd: "head retry", args: []string{"order:client-1", "--handler", "OrderProjector", "--expect-id", cmdtest.PoisonID, "--yes"}},
		{cmd: "dlq list"},
		{cmd: "dlq list", args: []string{"order:client-1"}},
		{cmd: "dlq replay", args: []string{"order:client-1", "--id", "1738318000000-0", "--yes"}},
		{cmd: "dlq purge", args: []string{"order:client-1", "--yes"}},
		{cmd: "groups list"},
		{cmd: "groups remove", args: []string{"Mailer", "--category", "order", "--expect-read", "83", "--yes"}},
		{cmd: "groups remove", args: []string{"Mailer", "--category", "order", "--dry-run"}},
		{cmd: "audit"},
		{cmd: "limits list", args: []string{"--waiting"}},
		{cmd: "limits get", args: []string{"acme"}},
		{cmd: "limits set", args: []string{"acme", "--concurrency", "4", "--reason", "import", "--yes"}},
		{cmd: "limits set", args: []string{"acme", "--off", "--reason", "import", "--dry-run"}},
		{cmd: "limits clear", args: []string{"acme", "--yes"}},
		{cmd: "outbox status", args: []string{"--config", config}},
		{cmd: "inbox migrate", args: []string{"--config", sinkConfig}},
		{cmd: "inbox prune", args: []string{"--config", sinkConfig, "--redis-url", srv.URL}},
		{cmd: "publish", args: []string{"--config", config, "--redis-url", srv.URL, "--event", "OrderPlaced", "--data", `{"client_id":"c-1","seq":1}`}, volatile: true},
		{cmd: "validate", args: []string{"--config", config}},
		{cmd: "verify run", args: []string{"--redis-url", srv.URL, "--keys", "5", "--events", "2"}, volatile: true},
		{cmd: "version"},
	}

	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.cmd] = true
		args := append(strings.Fields(tt.cmd), tt.args...)
		t.Run(tt.cmd, func(t *testing.T) {
			data := map[string]any{}
			for _, format := range []string{"json", "yaml"} {
				r := cmdtest.RunOps(t, outputAdmin(), cmdtest.InPipe, "", append(slices.Clip(args), "-o", format)...)
				if r.Code != 0 {
					t.Fatalf("-o %s: exit %d\nstdout:\n%s\nstderr:\n%s", format, r.Code, r.Stdout, r.Stderr)
				}
				var v any
				var err error
				if format == "json" {
					err = json.Unmarshal([]byte(r.Stdout), &v)
				} else {
					err = yaml.Unmarshal([]byte(r.Stdout), &v)
				}
				if err != nil {
					t.Fatalf("-o %s does not print %s: %v\n%s", format, format, err, r.Stdout)
				}
				switch v.(type) {
				case map[string]any, []any:
				default:
					t.Fatalf("-o %s prints %T, not an object or a list:\n%s", format, v, r.Stdout)
				}
				if tt.volatile {
					v = dataShape(v)
				}
				data[format] = v
			}
			if diff := cmp.Diff(data["json"], data["yaml"]); diff != "" {
				t.Errorf("-o json and -o yaml hold different data (-json +yaml):\n%s", diff)
			}
		})
	}

	// Every command is in the table, or prints no data.
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden {
				continue
			}
			if sub.HasSubCommands() {
				walk(sub)
				continue
			}
			name := strings.TrimPrefix(sub.CommandPath(), "seqctl ")
			if _, ok := printsNoData[name]; !ok && !covered[name] {
				t.Errorf("%s is neither in the table nor in printsNoData: check its -o json and -o yaml here", name)
			}
		}
	}
	walk(newCmdRoot(cmdtest.NewFactory()))
}

// dataShape replaces every value by its kind, keeping the keys and list lengths.
func dataShape(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = dataShape(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = dataShape(e)
		}
		return out
	case nil:
		return "null"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	}
	return "?"
}
