package cmdtest

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// Golden compares got with the golden file at path, or rewrites it with -update.
func Golden(t *testing.T, path, got string) {
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

// RepoRoot changes the working directory to the repository root for the test, so paths
// in golden files read as a user at the root would type them.
func RepoRoot(t *testing.T) {
	t.Helper()
	t.Chdir(filepath.Join("..", "..", "..", ".."))
	if _, err := os.Stat("go.mod"); err != nil {
		t.Fatalf("not at the repository root: %v", err)
	}
}
