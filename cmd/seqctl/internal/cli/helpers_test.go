package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// testBuild is the build info every test factory carries.
var testBuild = BuildInfo{Version: "v1.2.3", Commit: "abc1234", Date: "2025-01-31T10:00:00Z"}

// result is what one seqctl invocation produced.
type result struct {
	Stdout string
	Stderr string
	Code   int
}

// runCLI runs seqctl in process with buffers for its streams; tty sets whether stdout is
// a terminal (colour stays off).
func runCLI(t testing.TB, tty bool, args ...string) result {
	t.Helper()
	ios, _, out, errOut := NewTestIOStreams()
	ios.IsTerminal = tty
	code := run(context.Background(), &Factory{IOStreams: ios, Build: testBuild}, args)
	return result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

// parseCmd runs argv through a root command holding only cmd, the way Main would, and
// returns the error (the command's runF captures the options).
func parseCmd(t testing.TB, cmd *cobra.Command, argv ...string) error {
	t.Helper()
	root := newRootCommand()
	root.AddCommand(cmd)
	root.SetArgs(append([]string{cmd.Name()}, argv...))
	var sink bytes.Buffer
	root.SetOut(&sink)
	root.SetErr(&sink)
	return root.Execute()
}

// repoRoot changes the working directory to the repository root for the test, so paths
// in golden files read as a user at the root would type them.
func repoRoot(t *testing.T) {
	t.Helper()
	t.Chdir(filepath.Join("..", "..", "..", ".."))
	if _, err := os.Stat("go.mod"); err != nil {
		t.Fatalf("not at the repository root: %v", err)
	}
}

// golden compares got with the golden file at path, or rewrites it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/... -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (run go test ./cmd/... -update to accept):\n--- want\n%s--- got\n%s", path, want, got)
	}
}

// writeConfig writes a domain.toml into a temporary directory and returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "domain.toml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
