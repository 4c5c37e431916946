package engine

import "sync"

// wakeBurst is the most worker goroutines of an instance that read Redis at once (see
// runGate).
const wakeBurst = 64

// runGate bounds the worker goroutines that read Redis at once: a worker's goroutine
// holds one of its tokens from its start, its wake-up from park or its next read, until
// it waits for something other than Redis (a handler slot, an acknowledgement, its
// handler, a ring, a timer) or exits.
//
// An instance that takes thousands of leases at once, or whose doorbell wakes every idle
// worker after a connection failure, would otherwise start as many goroutines, nearly all
// of them blocked in the Redis client waiting for a connection, each on a stack of several
// KB; the Go runtime keeps that memory long after they park. Through the gate the others
// wait as a queued function instead, without a goroutine. The reads go no slower: the
// client's connection pool serves only so many at a time anyway. The queue is served in
// order, so a worker that handled its event and reads again goes behind the first reads
// queued before it, as it did in the client's pool: after a takeover every partition's
// first events start before the instance's other reads.
type runGate struct {
	mu    sync.Mutex
	free  int        // tokens left; guarded by mu
	queue []gatedRun // waiting for a token, in order; guarded by mu
}

type gatedRun struct {
	w *worker
	f func()
}

// run starts f, which runs w, on a goroutine of its own, now or once a token is free.
func (g *runGate) run(w *worker, f func()) {
	if g.take(w, f) {
		go f()
	}
}

// take gives w's goroutine (to be) a token, or none when w only exits (its lease ended,
// or the engine stops), and reports true; or it queues f (nil: w.run), which goes on with
// w, to start on a goroutine of its own once a token is free, and reports false.
func (g *runGate) take(w *worker, f func()) bool {
	if w.ctx.Err() != nil || w.e.stopping() {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free == 0 {
		if f == nil {
			f = w.run
		}
		g.queue = append(g.queue, gatedRun{w, f})
		return false
	}
	g.free--
	w.gated = true
	return true
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
	next.w.gated = true
	g.mu.Unlock()
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
