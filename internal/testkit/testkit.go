// Package testkit holds the helpers the tests of every package share: waiting for a
// condition, a buffer that concurrent writers (a logger, a child process) can share
// with the test that reads it, the goroutine leak check of a package's TestMain, and the
// Redis and peak RSS of the benchmarks at scale. It
// imports nothing of seqctl, so the engine's own tests can use it too.
package testkit

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// VerifyNoLeaks runs the tests of m and exits, failing if they leave goroutines behind
// (goleak.VerifyTestMain). It ignores what a test's child processes and connections
// leave for a moment after their end: a command's Wait, a blocked network read, the wait
// for a process to exit. extra adds what a package itself has to ignore.
func VerifyNoLeaks(m *testing.M, extra ...goleak.Option) {
	goleak.VerifyTestMain(m, append([]goleak.Option{
		goleak.IgnoreTopFunction("os/exec.(*Cmd).Wait"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("os.(*Process).blockUntilWaitable"),
	}, extra...)...)
}

// WaitFor polls cond every 10 ms until it holds; after timeout it fails the test, naming
// what it waited for.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Buffer is a bytes.Buffer safe for concurrent writers and readers. The zero value is
// ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ScaleClient connects to the Redis of $SEQCTL_SCALE_REDIS_URL, which
// scripts/bench-operator-scale.sh fills with partitions of category order (handler
// OrderProjector) for the benchmarks at scale; it skips the benchmark when unset. The
// client is closed with the benchmark.
func ScaleClient(tb testing.TB) *redis.Client {
	tb.Helper()
	url := os.Getenv("SEQCTL_SCALE_REDIS_URL")
	if url == "" {
		tb.Skip("SEQCTL_SCALE_REDIS_URL is not set: run scripts/bench-operator-scale.sh")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// PeakRSS is the peak resident set of this process (VmHWM of /proc/self/status), in
// bytes; 0 where /proc is not there.
func PeakRSS(tb testing.TB) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
