package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
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
			f := cmdtest.TestFactory()
			var got *CompletionOptions
			err := cmdtest.ParseOps(t, f, "", newCmdCompletion(f, func(o *CompletionOptions) error { got = o; return nil }), tt.argv...)
			if tt.wantErr != "" {
				var ue *cmdutil.UsageError
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
			r := cmdtest.RunOps(t, &cmdtest.FakeAdmin{}, cmdtest.InPipe, "", "completion", shell)
			if r.Code != 0 || !strings.Contains(r.Stdout, marker) {
				t.Errorf("exit %d; script lacks %q (stderr %q)", r.Code, marker, r.Stderr)
			}
		})
	}
}

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

// The bash script works in a shell without the bash-completion package: subcommands,
// and a stream whose colon bash splits the word at.
func TestBashCompletionWithoutBashCompletionPackage(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on the PATH")
	}
	r := cmdtest.RunOps(t, &cmdtest.FakeAdmin{}, cmdtest.InPipe, "", "completion", "bash")
	script := filepath.Join(t.TempDir(), "seqctl.bash")
	if err := os.WriteFile(script, []byte(r.Stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	// seqctl is a shell function standing in for the binary's __complete answers.
	driver := `
source "$1" || exit 1
declare -F _init_completion >/dev/null && { echo "bash-completion is loaded"; exit 1; }
seqctl() {
    case "$*" in
    "__complete par") printf 'partitions\n:4\n' ;;
    "__complete head show order:cl") printf 'order:client-1\norder:client-2\n:4\n' ;;
    *) printf ':4\n' ;;
    esac
}
complete_line() {
    COMP_LINE=$1; COMP_POINT=${#COMP_LINE}
    read -ra COMP_WORDS <<<"$2"; COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    __start_seqctl seqctl
    echo "${COMPREPLY[*]}"
}
complete_line "seqctl par" "seqctl par"
complete_line "seqctl head show order:cl" "seqctl head show order : cl"
`
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", driver, "driver", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr // compopt complains outside a real completion; that is all
	out, err := cmd.Output()
	if err != nil || strings.Contains(stderr.String(), "command not found") {
		t.Fatalf("bash: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"partitions", "client-1 client-2"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("completions = %q, want %q", got, want)
	}
}

// TestEveryOperatorCommandHasAnExample walks the command tree and checks that --help of
// every command prints an example.
func TestEveryOperatorCommandHasAnExample(t *testing.T) {
	root := newCmdRoot(cmdtest.TestFactory())
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
