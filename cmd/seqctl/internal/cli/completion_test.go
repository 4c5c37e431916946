package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestCompletionParse(t *testing.T) {
	for _, tt := range []struct {
		argv    []string
		want    string
		wantErr string
	}{
		{argv: []string{"bash"}, want: "bash"},
		{argv: []string{"zsh"}, want: "zsh"},
		{argv: []string{"fish"}, want: "fish"},
		{argv: []string{"powershell"}, wantErr: `unsupported shell "powershell"`},
		{argv: nil, wantErr: "name one shell"},
	} {
		t.Run(strings.Join(tt.argv, " "), func(t *testing.T) {
			f := testFactory()
			var got *CompletionOptions
			err := parseOps(t, f, "", newCmdCompletion(f, func(o *CompletionOptions) error { got = o; return nil }), tt.argv...)
			if tt.wantErr != "" {
				var ue *UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want a *UsageError containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Shell != tt.want || got.Root == nil {
				t.Fatalf("options %+v, err %v", got, err)
			}
		})
	}
}

func TestCompletionRun(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash": "__start_seqctl",
		"zsh":  "#compdef seqctl",
		"fish": "complete -c seqctl",
	} {
		t.Run(shell, func(t *testing.T) {
			r := runOps(t, &fakeAdmin{}, inPipe, "", "completion", shell)
			if r.Code != 0 || !strings.Contains(r.Stdout, marker) {
				t.Errorf("exit %d; script lacks %q (stderr %q)", r.Code, marker, r.Stderr)
			}
		})
	}
}

// TestDynamicCompletion runs cobra's hidden __complete command, as the shell scripts do.
func TestDynamicCompletion(t *testing.T) {
	fa := &fakeAdmin{
		streams:  []string{"order:client-1", "order:client-2", "payment:p-9"},
		handlers: []string{"OrderProjector", "Mailer"},
		dlq:      sampleDLQ(),
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
		{"state values", []string{"partitions", "list", "--state", ""}, []string{"running", "idle", "halted", "unowned"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runOps(t, fa, inPipe, "", append([]string{cobra.ShellCompRequestCmd}, tt.args...)...)
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
	root := newCmdRoot(testFactory())
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
			r := runOps(t, &fakeAdmin{}, inPipe, "", append(p, "--help")...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "Examples:\n") || !strings.Contains(r.Stdout, "  $ seqctl") {
				t.Errorf("--help: exit %d, no example:\n%s", r.Code, r.Stdout)
			}
		})
	}
}

func TestGroupCommands(t *testing.T) {
	for _, g := range []string{"partitions", "head", "dlq"} {
		r := runOps(t, &fakeAdmin{}, inPipe, "", g)
		if r.Code != 0 || !strings.Contains(r.Stdout, "Available Commands:") {
			t.Errorf("seqctl %s: exit %d, stdout %q", g, r.Code, r.Stdout)
		}
		r = runOps(t, &fakeAdmin{}, inPipe, "", g, "frobnicate")
		if r.Code != ExitUsage || !strings.Contains(r.Stderr, `unknown command "frobnicate"`) {
			t.Errorf("seqctl %s frobnicate: exit %d, stderr %q", g, r.Code, r.Stderr)
		}
	}
}
