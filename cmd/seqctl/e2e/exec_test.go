package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
)

// readExecLog parses the exec handler's log ("KEY SEQ" lines) per key, in order.
func readExecLog(t *testing.T, dir string) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, line := range completeLines(t, filepath.Join(dir, "log")) {
		k, s, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("bad log line %q", line)
		}
		out[k] = append(out[k], n)
	}
	return out
}

// lockScript is the substitution that makes exec.domain.toml deliver to lock.sh, the
// exec handler that takes a per-key lock and logs what it ran.
func lockScript(t *testing.T) map[string]string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(fixtures, "lock.sh"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"SCRIPT": script}
}

func lineCount(m map[string][]int) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

// TestRunExecTwoInstancesOrderAndCrash: two 'seqctl run' processes deliver to an exec
// handler that takes a per-key lock. Per key, the order of first occurrences is the
// publish order and no two events overlap; different keys do overlap; SIGKILL of one
// process mid-stream loses nothing.
func TestRunExecTwoInstancesOrderAndCrash(t *testing.T) {
	subst := lockScript(t)
	t.Run("node", func(t *testing.T) { execOrderAndCrash(t, newFixture(t, "exec.domain.toml", subst)) })
	// seqctl run and seqctl publish with --cluster, on a 3-master Redis Cluster.
	t.Run("cluster", func(t *testing.T) { execOrderAndCrash(t, newClusterFixture(t, "exec.domain.toml", subst)) })
}

func execOrderAndCrash(t *testing.T, f *fixture) {
	const perKey = 24
	keys := keyNames("k", 8)

	a, b := f.runTwo(nil)

	f.publish(steps(keys, 1, perKey/2))
	// Kill b while it is delivering: once both have handled something.
	testkit.WaitFor(t, 20*time.Second, "both instances to deliver", func() bool {
		return lineCount(readExecLog(t, f.dir)) >= len(keys)*3 && len(f.ownersOf(keys)) == 2
	})
	b.signal(syscall.SIGKILL)
	b.wait(5 * time.Second)
	f.publish(steps(keys, perKey/2+1, perKey))

	testkit.WaitFor(t, 40*time.Second, "every event to be delivered", func() bool {
		return complete(readExecLog(t, f.dir), keys, perKey)
	})
	log := readExecLog(t, f.dir)
	checkOrder(t, log, keys, perKey)
	if v, _ := os.ReadFile(filepath.Join(f.dir, "violations")); len(v) > 0 {
		t.Errorf("two events of one key overlapped:\n%s", v)
	}
	if o, _ := os.ReadFile(filepath.Join(f.dir, "overlap")); len(o) == 0 {
		t.Error("no two keys were ever delivered at the same time: partitions did not run in parallel")
	}
	t.Logf("%d deliveries for %d events (%d redelivered after the kill)", lineCount(log), len(keys)*perKey, lineCount(log)-len(keys)*perKey)

	a.stop(syscall.SIGTERM, 10*time.Second)
}

// ownersOf returns the set of instances owning the keys' partitions.
func (f *fixture) ownersOf(keys []string) map[string]bool {
	out := map[string]bool{}
	for _, o := range f.leaseOwners(f.streamsOf(keys)) {
		if o != "" {
			out[o] = true
		}
	}
	return out
}

// TestRunSecondSignalForcesExit checks that a second SIGTERM ends the process at once
// with status 1 and kills the running exec command's process group.
func TestRunSecondSignalForcesExit(t *testing.T) {
	f := newFixture(t, "exec.domain.toml", lockScript(t))
	a := f.run("a", []string{"SEQTEST_SLEEP=30"}, "--shutdown-timeout", "60s")
	a.waitReady(10 * time.Second)
	f.publish([]step{{"k0", 1}})
	testkit.WaitFor(t, 10*time.Second, "the handler to hold the lock", func() bool {
		_, err := os.Stat(filepath.Join(f.dir, "locks", "k0"))
		return err == nil
	})
	a.signal(syscall.SIGTERM)
	a.waitLog("shutting down gracefully", 5*time.Second)
	start := time.Now()
	a.signal(syscall.SIGTERM)
	if code := a.wait(5 * time.Second); code != 1 {
		t.Errorf("exit code %d after the second signal, want 1", code)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("forced exit took %v", d)
	}
	a.waitLog(`"killed_commands":1`, time.Second)
	// The killed handler never logged its step.
	if log := readExecLog(t, f.dir); len(log) != 0 {
		t.Errorf("log = %v, want nothing", log)
	}
}
