package engine

import (
	"container/list"
	"sort"
	"sync"
	"time"
)

// Handler slots: back-pressure on handler calls.
//
// Every owned partition has a worker, and without a bound every worker with an event
// starts its handler at once: 10,000 partitions of an exec handler fork 10,000 processes,
// the machine's run queue becomes the real handler time, and healthy events fail at their
// timeout. A worker therefore takes a slot right before it calls the handler and gives it
// back right after. Slots are bounded per handler (EngineConfig.HandlerLimits) and, across
// all handlers, per instance (EngineConfig.MaxConcurrentHandlers).
//
// Waiting for a slot is not an attempt: the entry was read once and stays pending with its
// delivery count while the worker waits, the handler's timeout has not started, and the
// lease is kept by the heartbeat as for any busy partition. A wait ends early when the
// lease is lost, the engine stops or fair share hands the partition over; the entry is
// then put back unstarted (a release gives its delivery back).
//
// Fairness: a waiter is passed over only when its own handler is at its limit, so a
// handler at its limit never holds up another handler's partitions. Within one handler,
// the partitions wait in one line per value of the handler's limit key (one line for a
// handler without one) and the lines take turns, round-robin: a value with many busy
// partitions (a tenant with a backlog on a thousand keys) cannot take every slot while
// another value's partition waits. Within a line, and across handlers, the partition
// that waited longest is served first.

// slots is the instance's handler-slot semaphore. Safe for concurrent use.
type slots struct {
	mu     sync.Mutex
	limit  int                   // instance cap, 0: none; immutable
	inUse  int                   // guarded by mu
	seq    uint64                // arrival counter; guarded by mu
	groups map[string]*slotGroup // immutable map; the groups' fields are guarded by mu
}

// slotGroup is one handler's share of the slots.
type slotGroup struct {
	name  string
	limit int // 0: bounded by the instance cap only; immutable
	inUse int // guarded by slots.mu
	// lines are the waiters per limit value ("" for a handler without a limit key), each
	// in arrival order; turn lists the values that have waiters, the next to serve first.
	// waiting counts them all. Guarded by slots.mu.
	lines   map[string]*list.List // of *slotTicket
	turn    []string
	waiting int
}

// slotTicket is one worker's place in a line or its granted slot.
type slotTicket struct {
	g       *slotGroup
	value   string // the limit value whose line it waits in
	seq     uint64
	ready   chan struct{} // closed when granted
	elem    *list.Element // in its line while waiting; guarded by slots.mu
	granted bool          // guarded by slots.mu
	done    bool          // released or cancelled; guarded by slots.mu
}

// front returns the waiter the group serves next, nil when none waits.
func (g *slotGroup) front() *slotTicket {
	if len(g.turn) == 0 {
		return nil
	}
	return g.lines[g.turn[0]].Front().Value.(*slotTicket)
}

// push puts t at the end of its value's line.
func (g *slotGroup) push(t *slotTicket) {
	line := g.lines[t.value]
	if line == nil {
		line = list.New()
		g.lines[t.value] = line
	}
	if line.Len() == 0 {
		g.turn = append(g.turn, t.value)
	}
	t.elem = line.PushBack(t)
	g.waiting++
}

// remove takes t out of its line; served says it was the front of the turn (the line's
// turn then passes to the next value).
func (g *slotGroup) remove(t *slotTicket, served bool) {
	line := g.lines[t.value]
	line.Remove(t.elem)
	t.elem = nil
	g.waiting--
	empty := line.Len() == 0
	if empty {
		delete(g.lines, t.value)
	}
	if !empty && !served {
		return // a waiter left its line: the line keeps its place in the turn
	}
	for i, v := range g.turn {
		if v != t.value {
			continue
		}
		g.turn = append(g.turn[:i], g.turn[i+1:]...)
		if !empty {
			g.turn = append(g.turn, t.value) // served: its turn comes round again
		}
		break
	}
}

// newSlots builds the semaphore: instance is the instance cap (<= 0: none), limits the
// per-handler limits (a missing or non-positive entry: none) for the given handlers.
func newSlots(instance int, limits map[string]int, groups []string) *slots {
	s := &slots{limit: max(instance, 0), groups: map[string]*slotGroup{}}
	for _, g := range groups {
		if _, ok := s.groups[g]; !ok {
			s.groups[g] = &slotGroup{name: g, limit: max(limits[g], 0), lines: map[string]*list.List{}}
		}
	}
	return s
}

func (s *slots) group(name string) *slotGroup {
	g := s.groups[name] // the map is built once, for every subscription of the engine
	if g == nil {
		panic("engine: handler slots: unknown handler " + name)
	}
	return g
}

// roomLocked reports whether g may start one more handler. s.mu is held.
func (s *slots) roomLocked(g *slotGroup) bool {
	return (s.limit == 0 || s.inUse < s.limit) && (g.limit == 0 || g.inUse < g.limit)
}

// enqueue asks for a slot for handler group, in the line of the limit value (""
// without a limit key). The ticket's ready channel is closed once the slot is granted (at
// once when there is room). Every ticket must end with exactly one call of s.done.
func (s *slots) enqueue(group, value string) *slotTicket {
	g := s.group(group)
	t := &slotTicket{g: g, value: value, ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	t.seq = s.seq
	// After every change no waiter that could start is left waiting (dispatchLocked), so
	// room now means that nobody ahead of this arrival could use it.
	if s.roomLocked(g) {
		s.grantLocked(t)
		return t
	}
	g.push(t)
	return t
}

func (s *slots) grantLocked(t *slotTicket) {
	t.granted = true
	s.inUse++
	t.g.inUse++
	close(t.ready)
}

// done gives the ticket's slot back, or leaves the queue when it was not granted yet.
// It is idempotent.
func (s *slots) done(t *slotTicket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	if !t.granted {
		t.g.remove(t, false)
		return
	}
	s.inUse--
	t.g.inUse--
	s.dispatchLocked()
}

// dispatchLocked grants slots while there is room: across handlers to the earliest of
// the waiters each handler below its limit would serve next (the front of the line whose
// turn it is). s.mu is held.
func (s *slots) dispatchLocked() {
	for s.limit == 0 || s.inUse < s.limit {
		var next *slotTicket
		for _, g := range s.groups {
			if g.limit > 0 && g.inUse >= g.limit {
				continue
			}
			if t := g.front(); t != nil && (next == nil || t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			return
		}
		next.g.remove(next, true)
		s.grantLocked(next)
	}
}

// SlotStats is a snapshot of the handler slots of an instance or of one handler.
type SlotStats struct {
	// InUse is how many handler calls run now.
	InUse int
	// Limit is the cap, 0 when unbounded.
	Limit int
	// Waiting is how many partitions wait for a slot: each has an event read and ready
	// to start, and its handler's timeout has not started.
	Waiting int
}

// HandlerSlotStats is the slot use of one handler.
type HandlerSlotStats struct {
	Handler string
	SlotStats
}

// stats returns the instance's totals and each handler's, sorted by handler name.
func (s *slots) stats() (SlotStats, []HandlerSlotStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := SlotStats{InUse: s.inUse}
	per := make([]HandlerSlotStats, 0, len(s.groups))
	unbounded := false
	for _, g := range s.groups {
		per = append(per, HandlerSlotStats{Handler: g.name, SlotStats: SlotStats{InUse: g.inUse, Limit: g.limit, Waiting: g.waiting}})
		total.Waiting += g.waiting
		total.Limit += g.limit
		if g.limit == 0 {
			unbounded = true
		}
	}
	// The instance can run at most the sum of its handlers' limits, and at most its cap.
	switch {
	case s.limit > 0 && (unbounded || s.limit < total.Limit):
		total.Limit = s.limit
	case unbounded:
		total.Limit = 0
	}
	sort.Slice(per, func(i, j int) bool { return per[i].Handler < per[j].Handler })
	return total, per
}

// waitSlot takes a handler slot for the worker's next call, waiting in the line of its
// limit value ("" without a limit key) when the handler or the instance is at its limit. It returns the function that gives the slot
// back (call it exactly once, also when ok is false) and ok = false when the wait ended
// because the lease was lost, the engine is stopping, fair share handed the partition
// over or an operator paused it: the caller then puts its entry back without starting it.
func (w *worker) waitSlot(value string) (release func(), ok bool) {
	s := w.e.slots
	t := s.enqueue(w.sub.group, value)
	release = func() { s.done(t) }
	start := time.Now()
	for {
		select {
		case <-t.ready:
			if o, isSO := w.e.cfg.Observer.(SlotObserver); isSO {
				o.SlotWait(w.sub.group, time.Since(start))
			}
			return release, true
		case <-w.ctx.Done():
			return release, false
		case <-w.e.stopped:
			return release, false
		case <-w.wake:
			// Fair share pokes the worker when it hands the partition over, and the
			// doorbell when an operator paused it; a poke for new entries changes nothing
			// here: keep the place in line.
			if w.handoff.Load() || w.pauseNoted.Load() {
				return release, false
			}
		}
	}
}

// SlotObserver is an optional extension of Observer: when EngineConfig.Observer also
// implements it, the engine reports how long each handler call waited for a slot.
type SlotObserver interface {
	// SlotWait is called when a partition gets a handler slot, with how long it waited
	// (0 or nearly so when a slot was free).
	SlotWait(group string, wait time.Duration)
}
