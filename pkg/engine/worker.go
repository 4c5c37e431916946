package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// entry is one stream entry handed to a worker.
type entry struct {
	lane       int // 0-based lane index
	msg        redis.XMessage
	deliveries int // the entry's delivery count after this delivery
}

// worker drains one owned unit serially. Its loop is the only goroutine touching its
// state, except poke (any goroutine) and the ack sender.
type worker struct {
	e        *Engine
	sub      *subscription
	u        unit
	lanes    []string
	leaseKey string
	liveKey  string // what the fenced scripts check for liveness: the session key, or the lease itself on Redis Cluster
	haltKey  string
	pauseKey string
	inc      *incarnation // the session life the lease was taken in
	owner    string
	token    string
	gen      int64
	consumer string // the same string as token
	// failedRun is the span of the last failed run of the entry failedID, which its
	// retry links to.
	failedRun trace.SpanContext
	failedID  string
	spanNames []string // per lane, see spanName
	// headMS is the append time (Unix ms, from the entry id) of the oldest entry the
	// worker has taken and not handled yet, 0 when none; headLane is its lane. Read by
	// Engine.Stats for the lag.
	headMS   atomic.Int64
	headLane atomic.Int32

	ctx    context.Context // cancelled when the lease is lost or handlers must stop
	cancel context.CancelFunc
	wake   chan struct{} // capacity 1
	done   chan struct{}

	// Acknowledgements confirmed by the acker, not yet applied by the worker goroutine.
	ackMu     sync.Mutex
	ackIn     []ackItem     // guarded by ackMu
	ackNote   chan struct{} // capacity 1: ackIn or ackFenced changed; made when awaitAcks first waits; guarded by ackMu
	ackFenced bool          // the acker found the lease gone; guarded by ackMu

	handoff atomic.Bool // set by fair share: finish the in-flight event, release, exit
	idle    atomic.Bool // the partition was empty at the last read
	halted  atomic.Bool // parked on a halt record
	paused  atomic.Bool // waiting on an operator's pause record
	// pauseNoted is set by an operator's pause notice: the entries read ahead are given
	// back before the next one starts, and the next read finds the pause.
	pauseNoted atomic.Bool
	// On Redis Cluster the lease of a partition idle for a lease TTL goes dormant (see
	// goDormant): it loses its expiry, the heartbeat stops renewing it, and the worker
	// re-arms it before it starts an event again.
	dormant atomic.Bool
	toSleep atomic.Bool // the heartbeat asked the parked worker to make its lease dormant

	// An idle worker parks instead of blocking a goroutine (see park): parked says its
	// goroutine has ended and a poke, its timer or the end of its lease starts it again.
	parked    atomic.Bool
	parkMu    sync.Mutex
	parkTimer *time.Timer  // fires when a reap is due; guarded by parkMu
	parkStop  func() bool  // stops the context.AfterFunc; guarded by parkMu
	parkReaps bool         // the timer is the reap's; guarded by parkMu
	parkedAt  atomic.Int64 // when it last parked (UnixNano)

	// Owned by the worker goroutine (the fields are ordered so that the struct has no
	// padding to speak of: thousands of workers are kept).
	gated   bool    // the goroutine holds a token of the doorbell's run gate (runGate)
	trimmed bool    // trimmed (and old consumers cleaned) since the lease was taken
	reaped  bool    // the unit was reaped: its lease is gone
	pending []entry // read but not started
	// busyAfter is set while the partition is busy: the last read filled a batch of new
	// entries of the first lane, the last of which has this id; the next read is native
	// (drain). owed is set when a native read's reply was lost: entries after this id may
	// be pending under the worker's consumer without having reached a handler, and the
	// next drain gives them their delivery count back.
	busyAfter string
	owed      string
	// fill is set when the last read caught up with the unit (it found nothing, or took
	// everything) and the handler waits to fill its batches (batch_wait): the next read
	// waits that long first.
	fill     bool
	takeover bool // the lease is new to this worker: its first drain corrects a previous owner's read-ahead
	// readMark is set while w.pending holds everything the unit had to read when it was
	// read (drain.lua's "all"): the lanes' ring counts before that read. Once those
	// entries are handled the worker goes idle without reading again (settle), unless a
	// lane rang since; readLast is the last entry id of that read (of the first lane).
	readMark  []uint64
	readLast  keyspace.StreamID
	unacked   []ackItem // handled, acknowledgement not confirmed by Redis yet (the next drain acks them too)
	sent      int32     // unacked[:sent] were given to the acker; the rest wait for the next drain
	sinceTrim int32     // events handled since the last trim
	retry     *entry    // head waiting for another attempt or an operator
	// reapAt is when to try reaping next; zero: from the last entry's time, or from now
	// when the lanes hold none.
	reapAt time.Time
}

// trimEvery is how many handled events separate two trims of a busy partition. The
// stream then holds at most about this many acknowledged entries.
const trimEvery = 256

func (e *Engine) startWorker(u unit, in *incarnation, gen int64) {
	owner := in.owner
	ctx, cancel := context.WithCancel(in.ctx)
	lease := e.keys.LeaseKey(u.name, u.sub.group)
	w := &worker{
		inc: in,
		e:   e, sub: u.sub, u: u, lanes: u.lanes,
		leaseKey: lease, haltKey: e.keys.HaltKey(u.name, u.sub.group), pauseKey: e.keys.PauseKey(u.name, u.sub.group),
		liveKey: e.liveKey(owner, lease), // on Redis Cluster the lease's own string
		owner:   owner, token: keyspace.Lease{Owner: owner, Generation: gen}.String(), gen: gen,
		ctx: ctx, cancel: cancel,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		takeover: true,
	}
	w.consumer = w.token // the consumer's name is the lease value: one string for both
	id := u.id()
	e.mu.Lock()
	if _, dup := e.workers[id]; dup || e.stopping() {
		e.mu.Unlock()
		cancel()
		return
	}
	e.workers[id] = w
	for _, l := range w.lanes {
		k := id // the lane that names the unit (a partition's primary lane): its id is that lane's key
		if l != u.name {
			k = laneKey(w.sub.group, l)
		}
		e.byLane[k] = w
	}
	delete(e.knownOwner, id)
	e.wg.Add(1)
	e.mu.Unlock()
	e.cfg.Observer.LeaseAcquired(w.sub.group)
	e.log.Debug("lease acquired", "group", w.sub.group, "unit", u.name, "generation", gen)
	e.bell.runs.run(w, w.run)
}

// poke wakes the worker if it waits.
func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
	if w.parked.Load() {
		w.resume(false)
	}
}

// errParked ends a worker goroutine whose partition is idle: the worker stays (its
// lease, its place in the doorbell), and resume starts a goroutine again.
var errParked = errors.New("engine: worker parked")

// park ends the idle worker's goroutine until a ring or notice pokes it, d passes (d > 0;
// reapDue: a reap is then tried), its lease ends or the engine stops. An idle partition
// then costs no goroutine, only its state, without what its last reads left behind.
// Called by the worker goroutine, which must return at once without touching the worker
// again.
func (w *worker) park(d time.Duration, reapDue bool) error {
	w.pending = nil // empty: the last read found nothing, or everything read was handled
	if len(w.unacked) == 0 {
		w.unacked = nil // acknowledged all; else they are with the acker (settle)
	}
	w.ackMu.Lock()
	w.ackNote = nil
	w.ackMu.Unlock()
	w.ungate()
	w.parkMu.Lock()
	w.parkedAt.Store(time.Now().UnixNano())
	w.parked.Store(true)
	w.parkReaps = reapDue
	if d > 0 {
		w.parkTimer = time.AfterFunc(d, func() { w.resume(true) })
	}
	w.parkStop = context.AfterFunc(w.ctx, func() { w.resume(false) })
	// A poke that came before parked was visible left its wake-up in w.wake. It is taken
	// under parkMu: no resume can run meanwhile, so this park is still the worker's, and
	// the wake-up taken is one meant for it, never one a later park of the worker (started
	// by a resume once parkMu is released) must see.
	woke := false
	select {
	case <-w.wake:
		woke = true
	case <-w.e.stopped:
		woke = true
	default:
	}
	w.parkMu.Unlock()
	if f := w.e.parkHook.Load(); f != nil {
		(*f)(w)
	}
	if woke {
		w.resume(false)
	}
	return errParked
}

// resume starts the parked worker's goroutine again, once; timedOut says its timer
// fired.
func (w *worker) resume(timedOut bool) {
	w.parkMu.Lock()
	if !w.parked.Load() {
		w.parkMu.Unlock()
		return
	}
	w.parked.Store(false)
	// The goroutine started now reads after every poke made until here: a wake-up a poke
	// left in w.wake is served by it, and would only make its next park read once more
	// for nothing.
	select {
	case <-w.wake:
	default:
	}
	if w.parkTimer != nil {
		w.parkTimer.Stop()
		w.parkTimer = nil
	}
	w.parkStop()
	reap := timedOut && w.parkReaps
	w.parkMu.Unlock()
	w.e.bell.runs.run(w, func() {
		w.e.bell.unwatch(w)
		if reap && w.ctx.Err() == nil && !w.e.stopping() {
			w.reap()
		}
		w.run()
	})
}

func (w *worker) run() {
	parked := false // parked, or queued at the run gate: the worker is not this goroutine's any more
	defer func() {
		if !parked {
			w.exit()
		}
	}()
	for !w.e.stopping() && w.ctx.Err() == nil && !w.handoff.Load() && !w.reaped {
		if (w.retry != nil || len(w.pending) == 0) && !w.gated && !w.e.bell.runs.take(w, nil) {
			parked = true // a read waits for a token of the run gate, without this goroutine
			return
		}
		var err error
		switch {
		case w.retry != nil:
			err = w.step(w.retry)
		case len(w.pending) > 0 && w.pauseNoted.Swap(false):
			w.giveBackNow() // the next read finds the pause, or reads them again
		case len(w.pending) > 0:
			ent := w.pending[0]
			if w.pending = w.pending[1:]; len(w.pending) == 0 {
				w.pending = nil // let the read's entries go once handled
			}
			err = w.handle(ent)
		case w.readMark != nil:
			err = w.settle() // the last read took everything: idle, unless a lane rang
		case w.fill:
			w.fill = false
			w.fillWait()
		default:
			err = w.fetch()
		}
		if err == errParked {
			parked = true
			return
		}
		if err != nil {
			if errors.Is(err, ErrFenced) || errors.Is(err, ErrSessionLost) {
				w.e.cfg.Observer.LeaseLost(w.sub.group, "fenced")
				w.e.log.Warn("lease lost: stopping this partition", "group", w.sub.group, "unit", w.u.name, "generation", w.gen, "err", err)
				w.cancel()
				return
			}
			if w.ctx.Err() != nil {
				return
			}
			w.e.logs.warn("read:"+errorCause(err), "partition read failed; retrying", "group", w.sub.group, "unit", w.u.name, "err", err)
			w.wait(w.e.cfg.Timing.PollInterval)
		}
	}
}

// exit acknowledges what was handled, releases the lease when stopping gracefully, and
// unregisters the worker.
func (w *worker) exit() {
	w.e.acker.forget(w)
	w.e.bell.forget(w)
	released := false
	if w.ctx.Err() == nil && !w.reaped {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := w.flushAcks(ctx); err == nil {
			unstarted := make([]scripts.Unstarted, 0, len(w.pending))
			for _, ent := range w.pending {
				unstarted = append(unstarted, scripts.Unstarted{Lane: ent.lane, ID: ent.msg.ID, Deliveries: ent.deliveries - 1})
			}
			released = w.e.releaseLease(ctx, w.u, w.token, w.consumer, unstarted...) == nil
		}
		cancel()
	}
	if !released {
		w.giveBack()
	}
	w.ungate()
	w.cancel()
	w.e.mu.Lock()
	if w.e.workers[w.u.id()] == w {
		delete(w.e.workers, w.u.id())
	}
	for _, l := range w.lanes {
		if w.e.byLane[laneKey(w.sub.group, l)] == w {
			delete(w.e.byLane, laneKey(w.sub.group, l))
		}
	}
	w.e.mu.Unlock()
	close(w.done)
	w.e.wg.Done()
}

// giveBack gives the entries the worker read but never started their delivery count
// back (giveback.lua) when it stops without releasing its lease, so that their next run
// counts as attempt 1. It needs no lease, so it works after the lease was lost, and it
// runs apart: a Redis that does not answer does not delay the worker's exit (the next
// owner's first read corrects what it leaves, see drain.lua).
func (w *worker) giveBack() {
	if len(w.pending) == 0 || w.e.killed.Load() {
		return
	}
	c := w.giveBackCall()
	e := w.e
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := c.Run(ctx, e.rdb); err != nil {
			e.log.Debug("could not give unstarted entries back; the next owner corrects them", "unit", c.Lanes[0], "err", translateRedisErr(err))
		}
	}()
}

// giveBackCall takes the entries read and never started out of w.pending, into the call
// that gives them their delivery count back.
func (w *worker) giveBackCall() scripts.GiveBack {
	w.readMark = nil // what is given back must be read again
	c := scripts.GiveBack{Lanes: w.lanes, Group: w.sub.group, Consumer: w.consumer}
	for _, ent := range w.pending {
		c.Entries = append(c.Entries, scripts.Unstarted{Lane: ent.lane, ID: ent.msg.ID, Deliveries: ent.deliveries})
	}
	w.pending = nil
	return c
}

// giveBackNow gives the entries read ahead their delivery count back before an operator's
// pause: none of them starts, and after the resume the next read claims them again, in
// order, as first attempts. When Redis does not answer, they stay pending under the
// worker's consumer and are read again all the same (each then counts one attempt more).
func (w *worker) giveBackNow() {
	c := w.giveBackCall()
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	if _, err := c.Run(ctx, w.e.rdb); err != nil {
		w.e.log.Debug("could not give the read-ahead back before a pause", "unit", w.u.name, "err", translateRedisErr(err))
	}
}

// pauseWait returns how long a paused worker waits before it reads its pause record
// again, unless a notice wakes it: about haltRecheck, in case the operator's resume
// notice was missed, or until just after a pause with an end (ttl >= 0) expires.
func pauseWait(ttl time.Duration) time.Duration {
	d := haltWait()
	if ttl >= 0 && ttl < d {
		d = ttl + 5*time.Millisecond // just after the record expired
	}
	return d
}

// wait blocks until poked, d passes (d <= 0: no timer), or the worker must stop. It
// reports whether the timer fired.
func (w *worker) wait(d time.Duration) (timedOut bool) {
	w.ungate()
	var tc <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-w.wake:
	case <-tc:
		return true
	case <-w.ctx.Done():
	case <-w.e.stopped:
	}
	return false
}

// haltRecheck is how often, on average, a halted worker re-reads its halt record in case
// an operator's notice was missed. It is normally woken by the notice (the resolve
// script writes to the owner's wake stream, which the doorbell reads), so a halted
// partition costs nothing while it waits: 1,000 halted partitions re-check about 3 times
// a second in all. The period is spread by +/-20% so re-checks do not come in waves.
const haltRecheck = 5 * time.Minute

// haltWait returns the next re-check period of a halted worker.
func haltWait() time.Duration {
	return haltRecheck*4/5 + rand.N(haltRecheck*2/5)
}

// fetch reads the next batch (fenced, acking what was handled).
func (w *worker) fetch() error {
	mark := w.e.bell.mark(w) // the lanes' ring counts before the read
	r, err := w.drain(nil)
	if err != nil {
		return err
	}
	w.paused.Store(r.code == scripts.DrainPaused)
	switch r.code {
	case scripts.DrainHalted:
		w.halted.Store(true) // halted before this owner took over
		w.wait(haltWait())
	case scripts.DrainPaused:
		// Parked, without a goroutine, as an idle partition: a resume notice or the
		// record's end starts it again (a ring does not: it is not watched). On Redis
		// Cluster its lease goes dormant as an idle one's does (the heartbeat asks).
		if w.toSleep.Swap(false) {
			w.goDormant()
		}
		return w.park(pauseWait(r.pauseTTL), false)
	case scripts.DrainEmpty:
		w.fill = w.sub.batchWait > 0
		return w.goIdle(mark, r.lastIDs)
	case scripts.DrainEntries:
		w.fill = w.sub.batchWait > 0 && r.all
		w.idle.Store(false)
		w.halted.Store(false)
		w.toSleep.Store(false)
		w.reapAt = time.Time{}
		w.pending = r.entries
		if r.all {
			w.readMark, w.readLast = mark, keyspace.ParseStreamID(r.entries[len(r.entries)-1].msg.ID)
		}
	}
	return nil
}

// fillWait waits batch_wait before a read that follows one that caught up, so that the
// events published meanwhile fill a batch. It waits without a run-gate token, and ends
// early only when the lease or the engine does.
func (w *worker) fillWait() {
	w.ungate()
	t := time.NewTimer(w.sub.batchWait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.ctx.Done():
	case <-w.e.stopped:
	}
}

// goIdle parks the worker of a partition that holds nothing to read: lastIDs are its
// lanes' last entry ids, and mark their ring counts before the read that found it so; a
// lane that rang since makes it read again instead.
func (w *worker) goIdle(mark []uint64, lastIDs []keyspace.StreamID) error {
	if !w.trimmed {
		w.trim() // after a takeover: drop the previous owners' consumers
	}
	w.idle.Store(true)
	if w.toSleep.Swap(false) {
		w.goDormant()
	}
	if !w.e.bell.watch(w, mark, lastIDs) {
		return nil // a lane rang since the read: read again
	}
	d, reapDue := w.untilReap(lastIDs), true
	if p := w.e.bell.fallback(); p > 0 && (d <= 0 || p < d) {
		d, reapDue = p, false // the doorbell cannot ring: read again after p
	}
	return w.park(d, reapDue)
}

// settle goes idle after handling the entries of a read that took everything the unit
// held (drain.lua's "all"), without the read that would find nothing: the handled
// entries' acknowledgements go to the acker, which confirms them in the background (no
// event starts before they are confirmed: the next read acknowledges them first), and
// the worker parks unless a lane rang since that read.
func (w *worker) settle() error {
	mark := w.readMark
	w.readMark = nil
	if int(w.sent) < len(w.unacked) {
		w.e.acker.submit(w, w.unacked[w.sent:]...)
		w.sent = int32(len(w.unacked))
	}
	lastIDs := make([]keyspace.StreamID, len(w.lanes))
	lastIDs[0] = w.readLast
	return w.goIdle(mark, lastIDs)
}

// step retries the head held in w.retry.
func (w *worker) step(head *entry) error {
	r, err := w.drain(head)
	if err != nil {
		return err
	}
	w.paused.Store(r.code == scripts.DrainPaused)
	switch r.code {
	case scripts.DrainHalted:
		w.wait(haltWait())
	case scripts.DrainPaused:
		w.wait(pauseWait(r.pauseTTL)) // then the head is retried, unless paused still
	case scripts.DrainResolved:
		w.retry = nil // an operator skipped it or moved it to the DLQ
		w.halted.Store(false)
	case scripts.DrainEntries:
		w.retry = nil
		w.halted.Store(false)
		return w.handle(r.entries[0])
	case scripts.DrainEmpty:
		w.retry = nil
	}
	return nil
}

// handle runs the handler for ent and, for a BatchFunc, the entries after it that join
// its run (see runOf), then acks them or schedules the retry / halt.
func (w *worker) handle(ent entry) error {
	w.setHead(ent)
	w.ungate() // what follows may wait for a handler slot, acknowledgements or the handler
	// Start only when Redis confirmed enough earlier acknowledgements (max_unacked), and
	// only within the local lease deadline and while the lease's incarnation lives: an
	// owner that was frozen never starts another event after it wakes (past the deadline
	// the incarnation is over and its context cancelled).
	if err := w.awaitAcks(w.e.cfg.MaxUnacked - 1); err != nil {
		w.unshift(ent)
		return err
	}
	if w.pauseNoted.Load() {
		// An operator paused the partition while the entry waited for acknowledgements:
		// it goes back with the rest of the read-ahead (see run).
		w.unshift(ent)
		return nil
	}
	if w.dormant.Load() {
		if err := w.rearm(); err != nil {
			w.unshift(ent)
			return err
		}
	}
	if !w.inc.valid() || w.ctx.Err() != nil || w.e.stopping() {
		w.unshift(ent)
		return nil
	}
	r, err := w.runOf(ent)
	if err == nil {
		var back bool
		if back, err = w.runHandler(&r, ent.deliveries); back {
			w.unshift(r.entries()...)
			return err
		}
	}
	if err == nil {
		w.handled(&r)
		return nil
	}
	if ownerGone, werr := w.ownerGone(err); ownerGone {
		return werr
	}
	if ent.deliveries >= w.sub.maxRetries {
		if r.size() > 1 {
			return w.split(&r, ent.deliveries, err)
		}
		return w.halt(ent, err)
	}
	w.e.log.Info("handler failed; will retry", "group", w.sub.group, "stream", w.lanes[ent.lane], "entry", ent.msg.ID,
		"attempt", ent.deliveries, "events", r.size(), "err", err)
	w.unshift(r.entries()[1:]...) // the run is retried whole: its head is claimed again (step)
	w.retry = &ent
	w.wait(w.sub.retryDelay)
	return nil
}

// ownerGone tells whether a failed attempt's err says this worker no longer owns the
// partition rather than that the event failed: the lease was lost or the engine hard
// stopped (the next owner retries; werr nil), or the handler's sink saw a newer owner's
// effects (an inbox refused this generation; werr says so). The entry then stays pending
// for the owner that holds the partition now, counted as run.
func (w *worker) ownerGone(err error) (gone bool, werr error) {
	if w.ctx.Err() != nil {
		return true, nil
	}
	if errors.Is(err, ErrFenced) {
		return true, fmt.Errorf("the handler's sink refused generation %d: %w", w.gen, err)
	}
	return false, nil
}

// unshift puts entries taken from w.pending back at its front, unstarted.
func (w *worker) unshift(ents ...entry) {
	if len(ents) > 0 {
		w.pending = append(append(make([]entry, 0, len(ents)+len(w.pending)), ents...), w.pending...)
	}
}

// handled records a run's entries as handled: their acknowledgement waits for the next
// drain call (which acks and reads in one round trip) unless the next event cannot start
// before it is confirmed: awaitAcks then hands them to the instance's acker, whose flush
// carries many partitions' acks.
func (w *worker) handled(r *run) {
	n := r.size()
	for i := range n {
		ent := r.at(i)
		w.unacked = append(w.unacked, ackItem{lane: ent.lane, id: ent.msg.ID})
	}
	if len(w.pending) == 0 {
		w.headMS.Store(0) // caught up; otherwise the next handle records its entry
	}
	if w.sinceTrim += int32(n); w.sinceTrim >= trimEvery && len(w.pending) == 0 {
		// Between batches. Entries whose ack is still in flight are pending, and the
		// trim keeps everything from the oldest pending entry on.
		w.trim()
	}
}

// run is what one handler call takes: one entry, or for a BatchFunc a run of
// consecutive entries, with their events and, under a limit key, their limit value. A
// HandlerFunc's run keeps its one entry and event in head and ev only (no slice to
// allocate per event).
type run struct {
	head  entry
	ev    Event   // head's event
	ents  []entry // a BatchFunc's run: its entries, head first; nil for a HandlerFunc's
	evs   []Event // their events
	value string
}

// size is the number of events in the run.
func (r *run) size() int {
	if r.ents == nil {
		return 1
	}
	return len(r.ents)
}

// at returns the run's i-th entry.
func (r *run) at(i int) entry {
	if r.ents == nil {
		return r.head
	}
	return r.ents[i]
}

// entries returns the run's entries, head first.
func (r *run) entries() []entry {
	if r.ents == nil {
		return []entry{r.head}
	}
	return r.ents
}

// runOf returns the run that head starts: head alone, or for a BatchFunc head and the
// entries after it in w.pending (taken out of it) up to batch_max, as long as they are of
// head's lane, hold an event and, under a limit key, the same limit value (a run holds
// one permit), and unless head is past its retries (an operator's retry of a halt: one
// more try, alone). err is head's: its entry holds no event, or no valid limit value; it
// is the attempt's error.
func (w *worker) runOf(head entry) (r run, err error) {
	r.head = head
	if r.ev, err = EventFromMessage(head.msg); err != nil {
		return r, err
	}
	limited := w.sub.limit.Active()
	if limited {
		if r.value, err = limitValue(r.ev, w.sub.limit, w.e.dom.backfillSuffix()); err != nil {
			return r, err
		}
	}
	if w.sub.batchFn == nil {
		return r, nil
	}
	r.ents, r.evs = []entry{head}, []Event{r.ev}
	if head.deliveries > w.sub.maxRetries {
		return r, nil // a head past its retries (a retried halt): one more try, alone
	}
	for len(r.ents) < w.sub.batchMax && len(w.pending) > 0 && w.pending[0].lane == head.lane {
		next := w.pending[0]
		ev, err := EventFromMessage(next.msg)
		if err != nil {
			break // it fails alone, in a run of its own
		}
		if limited {
			if v, err := limitValue(ev, w.sub.limit, w.e.dom.backfillSuffix()); err != nil || v != r.value {
				break
			}
		}
		r.ents, r.evs = append(r.ents, next), append(r.evs, ev)
		if w.pending = w.pending[1:]; len(w.pending) == 0 {
			w.pending = nil
		}
	}
	return r, nil
}

// split runs the events of a run that failed its last attempt one at a time, in order,
// each in a call of its own counted as that attempt: the events before the first that
// fails are handled (once: the run was all or nothing), and that one halts the
// partition, the entries after it going back unstarted. When every event passes alone,
// the run is handled.
func (w *worker) split(r *run, attempt int, cause error) error {
	w.e.log.Info("a batch failed its last attempt; running its events one at a time to find the failing one",
		"group", w.sub.group, "stream", w.lanes[r.ents[0].lane], "entry", r.ents[0].msg.ID, "events", len(r.ents), "err", cause)
	for i := range r.ents {
		one := r.ents[i]
		one.deliveries = attempt
		w.setHead(one)
		alone := run{head: one, ev: r.evs[i], ents: r.ents[i : i+1], evs: r.evs[i : i+1], value: r.value}
		back, err := w.runHandler(&alone, attempt)
		if back {
			w.unshift(r.ents[i:]...)
			return err
		}
		if err == nil {
			w.handled(&alone)
			continue
		}
		if ownerGone, werr := w.ownerGone(err); ownerGone {
			return werr
		}
		w.unshift(r.ents[i+1:]...)
		// The events before it are acknowledged before the halt names it, so that
		// resolving the halt carries on right after it. If Redis does not take them now,
		// the next read does (every read acknowledges first).
		ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
		ferr := w.flushAcks(ctx)
		cancel()
		if errors.Is(ferr, ErrFenced) {
			return ferr
		}
		return w.halt(one, err)
	}
	return nil
}

// runHandler runs the handler for r's events, under a permit of its limit key when the
// handler has one, and a handler slot; attempt is the run's (its head's delivery count).
// back reports that the entries go back unstarted: a wait for a permit or a slot ended
// because the lease lapsed, the engine began stopping, fair share handed the partition
// over or an operator paused it (err nil), or Redis failed while a permit was taken
// (err says why). Otherwise err is the attempt's: the handler's.
func (w *worker) runHandler(r *run, attempt int) (back bool, err error) {
	head := r.head
	d := Delivery{
		Handler: w.sub.group, Category: w.u.laneCats[head.lane], Key: w.u.key, Stream: w.lanes[head.lane],
		EntryID: head.msg.ID, Generation: w.gen, Attempt: attempt,
	}
	if w.sub.batchFn != nil {
		d.Entries = make([]string, len(r.ents))
		for i, ent := range r.ents {
			d.Entries[i] = ent.msg.ID
		}
	}
	// Back-pressure: wait in line for a handler slot (slots.go), in the line of the limit
	// value, and under a limit key for a permit with it (limits.go). The wait is not an
	// attempt; when it ends without a slot, or the lease lapsed, the engine began stopping
	// or an operator paused the partition meanwhile, the entry goes back unstarted.
	var release func()
	if w.sub.limit.Active() {
		p, rel, ok, err := w.e.limits.take(w, r.value)
		if err != nil || !ok {
			return true, err
		}
		release = rel
		defer w.e.limits.give(p) // nil (no cap for the value) wakes nothing
		if p != nil {
			d.Limit = &LimitPermit{Value: r.value, Slot: p.hold.Slot, Generation: p.hold.Generation}
		}
	} else {
		rel, ok := w.waitSlot(r.value)
		if release = rel; !ok {
			release()
			return true, nil
		}
	}
	if w.pauseNoted.Load() || !w.inc.valid() || w.ctx.Err() != nil || w.e.stopping() {
		release()
		return true, nil
	}
	started := time.Now()
	var hctx context.Context
	var span trace.Span
	if r.size() == 1 {
		hctx, span = w.e.handlerContext(w.ctx, w.spanName(head.lane), r.ev, d, w.failedRunOf(head.msg.ID))
	} else {
		hctx, span = w.e.batchContext(w.ctx, w.spanName(head.lane), r.evs, d, w.failedRunOf(head.msg.ID))
	}
	err = w.call(WithDelivery(hctx, d), r)
	release()
	w.failedRun, w.failedID = endSpan(span, err), head.msg.ID
	info := AttemptInfo{Group: w.sub.group, Category: d.Category, Attempt: attempt, Events: r.size(), Duration: time.Since(started), Err: err}
	if attempt == 1 && !r.ev.PublishedAt.IsZero() {
		info.Latency = max(started.Sub(r.ev.PublishedAt), 0)
	}
	info.Retry = err != nil && w.ctx.Err() == nil && attempt < w.sub.maxRetries
	w.e.cfg.Observer.Attempt(info)
	return false, err
}

// setHead records ent as the oldest entry taken and not handled yet.
func (w *worker) setHead(ent entry) {
	w.headLane.Store(int32(ent.lane))
	w.headMS.Store(int64(keyspace.ParseStreamID(ent.msg.ID).MS))
}

// call runs the handler for r's events, turning a panic into an error.
func (w *worker) call(ctx context.Context, r *run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	if w.sub.batchFn != nil {
		return w.sub.batchFn(ctx, r.evs)
	}
	return w.sub.fn(ctx, r.ev)
}

// halt writes the durable halt record and parks the head until an operator resolves it.
func (w *worker) halt(ent entry, cause error) error {
	msg := clip(cause.Error(), 4096)
	rec := keyspace.Halt{EntryID: ent.msg.ID, Lane: ent.lane, Stream: w.lanes[ent.lane],
		Attempts: ent.deliveries, Error: msg, Owner: w.owner, Generation: w.gen}
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	if err := indexState(ctx, w.e.rdb, w.e.keys, keyspace.IndexHalted, w.u.laneCats, w.u.key, w.sub.group, w.sub.pm); err != nil {
		w.retry = &ent
		return translateRedisErr(err)
	}
	fenced, err := scripts.Halt{Lease: w.leaseKey, Live: w.liveKey, Record: w.haltKey, Token: w.token,
		Stream: w.lanes[ent.lane], Group: w.sub.group, Consumer: w.consumer, Entry: ent.msg.ID, Attempts: ent.deliveries,
		Fields: rec.Fields()}.Run(ctx, w.e.rdb)
	if err != nil {
		w.retry = &ent
		return translateRedisErr(err)
	}
	if fenced {
		return ErrFenced
	}
	w.halted.Store(true)
	w.e.cfg.Observer.Halted(w.sub.group, w.u.laneCats[ent.lane])
	w.e.log.Error("partition halted on a poison head: resolve it with seqctl head skip|dlq|retry",
		"group", w.sub.group, "stream", w.lanes[ent.lane], "entry", ent.msg.ID, "attempts", ent.deliveries, "err", msg)
	w.retry = &ent
	return nil
}

// clip shortens s to at most n bytes keeping its head and its tail (an error's cause is
// usually at one end or the other), cut on UTF-8 boundaries.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const gap = " [...] "
	head, tail := (n-len(gap))/2, (n-len(gap))-(n-len(gap))/2
	h := strings.ToValidUTF8(s[:head], "")
	t := strings.ToValidUTF8(s[len(s)-tail:], "")
	return h + gap + t
}
