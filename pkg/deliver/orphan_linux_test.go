//go:build linux

package deliver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
)

// orphanHelper is the helper process: it delivers one event to a handler that records its
// pid and sleeps, and never returns (the test kills it).
func orphanHelper(dir string) {
	fn, err := Exec(ExecConfig{Argv: []string{"sh", "-c", "echo $$ > " + filepath.Join(dir, "pid") + "; exec sleep 60"}, Timeout: time.Minute})
	if err != nil {
		os.Exit(2)
	}
	_ = fn(context.Background(), engine.Event{ID: "e1", Type: "T", Category: "c", Data: []byte(`{}`)})
	select {}
}

// When seqctl dies (SIGKILL), the exec handler it was running dies with it: an orphaned
// handler would go on applying an event while the next owner handles the same key.
func TestExecHandlerDiesWithItsOwner(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SEQCTL_DELIVER_ORPHAN_DIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pid")
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid == 0 {
		_ = cmd.Process.Kill()
		t.Fatal("the handler never started")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return // gone
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("handler process %d outlived its owner by 5 s", pid)
}
