package engine

import "sync"

// wakeBurst is the most worker goroutines of an instance that run at once from their
// start or wake-up to their first wait (see runGate).
const wakeBurst = 64

// runGate bounds the worker goroutines that run at once from their start, or their
// wake-up from park, up to the point where they wait for something other than Redis (a
// handler slot, an acknowledgement, a ring, a timer) or exit: the part that reads Redis.
//
// An instance that takes thousands of leases at once, or whose doorbell wakes every idle
// worker after a connection failure, would otherwise start as many goroutines, nearly all
// of them blocked in the Redis client waiting for a connection, each on a stack of several
// KB; the Go runtime keeps that memory long after they park. Through the gate the others
// wait as a queued function instead. The reads go no slower: the client's connection pool
// serves only so many at a time anyway.
//
// A goroutine started through the gate holds a token (worker.gated) until worker.ungate,
// which starts the next queued one with it.
type runGate struct {
	mu    sync.Mutex
	free  int        // tokens left; guarded by mu
	queue []gatedRun // waiting for a token, in order; guarded by mu
}

type gatedRun struct {
	w *worker
	f func()
}

// run starts f, which runs w, on a goroutine of its own, now or once a token is free. A
// worker whose lease ended, or of an engine that stops, starts at once and without a
// token: it only exits.
func (g *runGate) run(w *worker, f func()) {
	if w.ctx.Err() != nil || w.e.stopping() {
		go f()
		return
	}
	g.mu.Lock()
	if g.free == 0 {
		g.queue = append(g.queue, gatedRun{w, f})
		g.mu.Unlock()
		return
	}
	g.free--
	g.mu.Unlock()
	w.gated = true
	go f()
}

// done gives a token back: the next queued function starts with it.
func (g *runGate) done() {
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.free++
		g.mu.Unlock()
		return
	}
	next := g.queue[0]
	g.queue[0] = gatedRun{}
	g.queue = g.queue[1:]
	if len(g.queue) == 0 {
		g.queue = nil // let the backing array go
	}
	g.mu.Unlock()
	next.w.gated = true
	go next.f()
}

// ungate gives the worker's token back, if its goroutine holds one. Called by the
// worker's goroutine before it waits, parks or ends.
func (w *worker) ungate() {
	if w.gated {
		w.gated = false
		w.e.bell.runs.done()
	}
}
