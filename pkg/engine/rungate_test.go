package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
)

// The run gate lets at most its tokens' worth of worker goroutines run at once, starts
// the queued ones as tokens come back, and lets a worker that only exits (its lease
// ended, or the engine stops) pass at once.
func TestRunGate(t *testing.T) {
	const tokens, runs = 3, 20
	e := &Engine{stopped: make(chan struct{})}
	e.bell = &doorbell{e: e, runs: runGate{free: tokens}}
	var running, most atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range runs {
		w := &worker{e: e, ctx: context.Background()}
		wg.Add(1)
		e.bell.runs.run(w, func() {
			defer wg.Done()
			if !w.gated {
				t.Errorf("run %d started without a token", i)
			}
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
			running.Add(-1)
			w.ungate()
			w.ungate() // a second call gives nothing back
		})
	}
	testkit.WaitFor(t, 5*time.Second, "the first runs started", func() bool { return running.Load() == tokens })

	// A worker whose lease ended passes the full gate.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := &worker{e: e, ctx: ctx}
	passed := make(chan bool)
	e.bell.runs.run(gone, func() { passed <- gone.gated })
	select {
	case gated := <-passed:
		if gated {
			t.Error("an exiting worker took a token")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an exiting worker waited at the full gate")
	}

	// A worker's goroutine that would read again at the full gate does not wait on it: its
	// read is queued, to go on on a goroutine of its own with a token.
	again := &worker{e: e, ctx: context.Background()}
	resumed := make(chan bool, 1)
	if e.bell.runs.take(again, func() { gated := again.gated; again.ungate(); resumed <- gated }) {
		t.Error("a read took a token at the full gate")
	}

	close(release)
	wg.Wait()
	select {
	case gated := <-resumed:
		if !gated {
			t.Error("a queued read went on without a token")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a queued read did not go on")
	}
	if got := most.Load(); got != tokens {
		t.Errorf("at most %d runs at once, want %d", got, tokens)
	}
	g := &e.bell.runs
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free != tokens || len(g.queue) != 0 {
		t.Errorf("after every run: %d tokens free, %d queued; want %d, 0", g.free, len(g.queue), tokens)
	}
}
