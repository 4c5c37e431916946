// Package testkit holds the helpers the tests of every package share: waiting for a
// condition, a buffer that concurrent writers (a logger, a child process) can share
// with the test that reads it, and the goroutine leak check of a package's TestMain. It
// imports nothing of seqctl, so the engine's own tests can use it too.
package testkit

import (
	"bytes"
	"sync"
	"testing"
	"time"

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
