package root

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// TestDynamicCompletion runs cobra's hidden __complete command, as the shell scripts do.
func TestDynamicCompletion(t *testing.T) {
	fa := &cmdtest.FakeAdmin{
		StreamList:   []string{"order:client-1", "order:client-2", "payment:p-9"},
		HandlerNames: []string{"OrderProjector", "Mailer"},
		DLQEntries:   cmdtest.SampleDLQ(),
		InstanceList: []admin.Instance{
			{ID: "w1", Owner: "w1.3", Host: "h1", Live: true},
			{ID: "w2", Owner: "w2.1", Host: "h2"}, // its session expired
		},
		LimitsByHandler: map[string]engine.HandlerLimit{"OrderProjector": cmdtest.SampleLimit},
		LimitList:       cmdtest.LimitsAdmin().LimitList,
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"streams", []string{"head", "show", ""}, []string{"order:client-1", "order:client-2", "payment:p-9"}},
		{"streams by prefix", []string{"partitions", "inspect", "order:"}, []string{"order:client-1", "order:client-2"}},
		{"only one stream", []string{"dlq", "list", "order:client-1", ""}, nil},
		{"handlers", []string{"head", "skip", "order:client-1", "--handler", "O"}, []string{"OrderProjector"}},
		{"dlq ids", []string{"dlq", "replay", "order:client-1", "--id", ""}, []string{"1738318000000-0\tOrderPlaced: projector: total must be positive …"}},
		{"sort values", []string{"partitions", "list", "--sort", ""}, []string{"name", "backlog", "lag", "age", "dlq"}},
		{"state values", []string{"partitions", "list", "--state", ""}, []string{"running", "idle", "halted", "paused", "throttled", "unowned"}},
		{"handlers of every category", []string{"partitions", "list", "--handler", ""}, []string{"OrderProjector", "Mailer"}},
		{"categories", []string{"partitions", "list", "--category", ""}, []string{"order", "payment"}},
		{"categories by prefix", []string{"partitions", "list", "--category", "p"}, []string{"payment"}},
		{"owners: live instances and their sessions", []string{"partitions", "list", "--owner", "w"}, []string{"w1\tinstance on h1", "w1.3\tcurrent session of w1"}},
		{"audit stream", []string{"audit", "--stream", "pay"}, []string{"payment:p-9"}},
		{"handlers with a limit key", []string{"limits", "list", "--handler", ""}, []string{"OrderProjector\tlimit_by tenant"}},
		{"limit values with an override or waiting", []string{"limits", "clear", ""},
			[]string{"acme\toverride concurrency 8, 3 waiting", "globex\t5 waiting", "internal\toverride off, 0 waiting"}},
		{"one limit value", []string{"limits", "get", "acme", ""}, nil},
		{"outcomes", []string{"audit", "--outcome", "head"}, []string{"ok", "head_moved", "not_halted", "not_pending", "entry_gone", "not_found", "refused", "declined", "failed",
			"not_replicated", "not_registered", "declared", "live_lease", "read_moved", "halted", "not_paused", "stopped"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", append([]string{cobra.ShellCompRequestCmd}, tt.args...)...)
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			var got []string
			for _, l := range lines {
				if l != "" && !strings.HasPrefix(l, ":") {
					got = append(got, l)
				}
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("completions = %q, want %q (stdout %q)", got, tt.want, r.Stdout)
			}
			if !strings.Contains(r.Stdout, ":4") { // ShellCompDirectiveNoFileComp
				t.Errorf("directive is not NoFileComp: %q", r.Stdout)
			}
		})
	}
}

// TestEveryOperatorCommandHasAnExample walks the command tree and checks that --help of
// every command prints an example.
func TestEveryOperatorCommandHasAnExample(t *testing.T) {
	root := newCmdRoot(cmdtest.NewFactory())
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				walk(sub, append(append([]string(nil), path...), sub.Name()))
			}
		}
	}
	walk(root, nil)
	if len(paths) < 15 {
		t.Fatalf("only %d commands in the tree", len(paths))
	}
	for _, p := range paths {
		t.Run("seqctl "+strings.Join(p, " "), func(t *testing.T) {
			r := cmdtest.RunOps(t, &cmdtest.FakeAdmin{}, cmdtest.InPipe, "", append(p, "--help")...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "Examples:\n") || !strings.Contains(r.Stdout, "  $ seqctl") {
				t.Errorf("--help: exit %d, no example:\n%s", r.Code, r.Stdout)
			}
		})
	}
}

func TestGroupCommands(t *testing.T) {
	for _, g := range []string{"partitions", "head", "dlq", "limits"} {
		r := cmdtest.RunOps(t, &cmdtest.FakeAdmin{}, cmdtest.InPipe, "", g)
		if r.Code != 0 || !strings.Contains(r.Stdout, "Available Commands:") {
			t.Errorf("seqctl %s: exit %d, stdout %q", g, r.Code, r.Stdout)
		}
		r = cmdtest.RunOps(t, &cmdtest.FakeAdmin{}, cmdtest.InPipe, "", g, "frobnicate")
		if r.Code != cmdutil.ExitUsage || !strings.Contains(r.Stderr, `unknown command "frobnicate"`) {
			t.Errorf("seqctl %s frobnicate: exit %d, stderr %q", g, r.Code, r.Stderr)
		}
	}
}
