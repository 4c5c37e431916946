package completion

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
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
			f := cmdtest.NewFactory()
			var got *Options
			err := cmdtest.ParseOps(t, f, "", NewCmd(f, func(o *Options) error { got = o; return nil }), tt.argv...)
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
