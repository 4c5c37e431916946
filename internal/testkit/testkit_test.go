package testkit

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The package's own tests run under the leak check it offers.
func TestMain(m *testing.M) { VerifyNoLeaks(m) }

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	WaitFor(t, time.Second, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("polled %d times, want 3", n)
	}
}

// recorder catches the failure WaitFor reports instead of failing this test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestWaitForNamesWhatItWaitedFor(t *testing.T) {
	r := &recorder{TB: t}
	WaitFor(r, 30*time.Millisecond, "a condition that never holds", func() bool { return r.failed != "" })
	if !strings.Contains(r.failed, "waiting for a condition that never holds") {
		t.Errorf("failure %q does not name what it waited for", r.failed)
	}
}

func TestBufferTakesConcurrentWriters(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				fmt.Fprint(&b, "x")
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 800 {
		t.Errorf("%d bytes, want 800", n)
	}
}
