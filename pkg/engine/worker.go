package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
	inc      *incarnation // the session life the lease was taken in
	owner    string
	token    string
	gen      int64
	consumer string // the same string as token

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
	takeover  bool      // the lease is new to this worker: its first drain corrects a previous owner's read-ahead
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
		leaseKey: lease, haltKey: e.keys.HaltKey(u.name, u.sub.group),
		liveKey: e.liveKey(owner, lease), // on Redis Cluster the lease's own string
		owner:   owner, token: owner + ":" + strconv.FormatInt(gen, 10), gen: gen,
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
	w.pending, w.unacked = nil, nil // both empty: the last read found nothing, and acked all
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
		case len(w.pending) > 0:
			ent := w.pending[0]
			if w.pending = w.pending[1:]; len(w.pending) == 0 {
				w.pending = nil // let the read's entries go once handled
			}
			err = w.handle(ent)
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
			var unstarted []any
			for _, ent := range w.pending {
				unstarted = append(unstarted, ent.lane+1, ent.msg.ID, ent.deliveries-1)
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
	args := make([]any, 0, 2+3*len(w.pending))
	args = append(args, w.sub.group, w.consumer)
	for _, ent := range w.pending {
		args = append(args, ent.lane+1, ent.msg.ID, ent.deliveries)
	}
	w.pending = nil
	e, lanes := w.e, w.lanes
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := scriptGiveBack.Run(ctx, e.rdb, lanes, args...).Err(); err != nil {
			e.log.Debug("could not give unstarted entries back; the next owner corrects them", "unit", lanes[0], "err", translateRedisErr(err))
		}
	}()
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
	r, err := w.drain("")
	if err != nil {
		return err
	}
	switch r.code {
	case drainHalted:
		w.halted.Store(true) // halted before this owner took over
		w.wait(haltWait())
	case drainEmpty:
		if !w.trimmed {
			w.trim() // after a takeover: drop the previous owners' consumers
		}
		w.idle.Store(true)
		if w.toSleep.Swap(false) {
			w.goDormant()
		}
		if !w.e.bell.watch(w, mark, r.lastIDs) {
			return nil // a lane rang since the read: read again
		}
		d, reapDue := w.untilReap(r.lastIDs), true
		if p := w.e.bell.fallback(); p > 0 && (d <= 0 || p < d) {
			d, reapDue = p, false // the doorbell cannot ring: read again after p
		}
		return w.park(d, reapDue)
	case drainEntries:
		w.idle.Store(false)
		w.halted.Store(false)
		w.toSleep.Store(false)
		w.reapAt = time.Time{}
		w.pending = r.entries
	}
	return nil
}

// untilReap returns how long the partition must stay idle before a reap is tried (0: no
// reaping, for an unpartitioned category stream).
func (w *worker) untilReap(lastIDs []streamID) time.Duration {
	if !w.sub.partitioned {
		return 0
	}
	if w.reapAt.IsZero() {
		var last int64
		for _, id := range lastIDs {
			last = max(last, int64(id.ms))
		}
		if last == 0 {
			w.reapAt = time.Now().Add(w.e.cfg.Timing.ReapIdle)
		} else {
			w.reapAt = time.UnixMilli(last).Add(w.e.cfg.Timing.ReapIdle)
		}
	}
	return max(time.Until(w.reapAt), time.Millisecond)
}

// reap tries to retire the idle unit (reap.lua); on success the worker exits.
func (w *worker) reap() {
	if w.e.keys.cluster {
		defer w.e.reapStep("done", w.u.name)
	}
	n := len(w.lanes)
	k := w.e.keys
	keys := make([]string, 0, 3+3*n)
	keys = append(keys, w.leaseKey, w.liveKey, w.haltKey)
	keys = append(keys, w.lanes...)
	for _, c := range w.u.laneCats {
		if k.cluster {
			keys = append(keys, k.IndexedMarkKey(k.PartitionStream(c, w.u.key)))
		} else {
			keys = append(keys, k.PartitionIndex(c))
		}
	}
	for _, c := range w.u.laneCats {
		if k.cluster {
			keys = append(keys, w.leaseKey)
		} else {
			keys = append(keys, k.GroupRegistry(c))
		}
	}
	if k.cluster {
		keys = append(keys, k.GenerationKey(w.u.name, w.sub.group), w.leaseKey)
	} else {
		keys = append(keys, w.leaseKey, k.ControlStream())
	}
	keys = append(keys, w.u.guards...)
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	args := make([]any, 0, 5+n)
	args = append(args, w.token, w.e.cfg.Timing.ReapIdle.Milliseconds(), n, w.u.key, "")
	for _, c := range w.u.laneCats {
		args = append(args, c)
	}
	var vers map[string]string
	regs, err := w.e.registryArgs(ctx, w.u.laneCats)
	if err == nil && k.cluster {
		args[4] = "cluster"
		args = append(args, regs...)
		vers, err = w.e.indexVersions(ctx, w.u.laneCats, w.u.key)
		if err == nil && !w.e.reapStep("read-index", w.u.name) {
			w.reapAt = time.Now().Add(w.e.cfg.Timing.ReapIdle)
			return
		}
	}
	var res []any
	if err == nil {
		res, err = scriptReap.Run(ctx, w.e.rdb, keys, args...).Slice()
	}
	if err != nil {
		w.reapAt = time.Now().Add(w.e.cfg.Timing.PollInterval * 4)
		w.e.logs.warn("reap:"+errorCause(translateRedisErr(err)), "reap failed; tried again later", "group", w.sub.group, "unit", w.u.name, "err", translateRedisErr(err))
		return
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		w.reaped = true
		if k.cluster && w.e.reapStep("reaped", w.u.name) {
			w.e.unindex(ctx, vers, w.u.key)
		}
		w.e.log.Info("cold partition reaped", "group", w.sub.group, "unit", w.u.name)
	case -9:
		// A publisher stopped between its append and the index write: index the
		// partition on its behalf, then try again.
		lane, _ := res[1].(string)
		for i, l := range w.lanes {
			if l == lane {
				if err := indexPartition(ctx, w.e.rdb, k, w.u.laneCats[i], w.u.key, l, "reaper", nil); err != nil {
					w.e.log.Warn("cannot index a partition whose publisher stopped early", "unit", w.u.name, "err", err)
				}
			}
		}
		w.reapAt = time.Now().Add(w.e.cfg.Timing.PollInterval)
	case 0:
		s, _ := res[1].(string)
		ms, _ := strconv.ParseInt(s, 10, 64)
		w.reapAt = time.Now().Add(time.Duration(ms) * time.Millisecond)
	case -1:
		w.cancel()
	default:
		reason, _ := res[1].(string)
		w.e.log.Debug("partition not reapable yet", "group", w.sub.group, "unit", w.u.name, "reason", reason)
		w.reapAt = time.Now().Add(w.e.cfg.Timing.ReapIdle)
	}
}

// trim drops the acknowledged prefix of the lanes and old consumers (trim.lua).
func (w *worker) trim() {
	n := len(w.lanes)
	keys := make([]string, 0, 2+2*n)
	keys = append(keys, w.leaseKey, w.liveKey)
	keys = append(keys, w.lanes...)
	for _, c := range w.u.laneCats {
		if w.e.keys.cluster {
			keys = append(keys, w.leaseKey)
		} else {
			keys = append(keys, w.e.keys.GroupRegistry(c))
		}
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	args := []any{w.token, w.sub.group, w.consumer, n, ""}
	regs, err := w.e.registryArgs(ctx, w.u.laneCats)
	var res []any
	if err == nil {
		if w.e.keys.cluster {
			args[4] = "cluster"
			args = append(args, regs...)
		}
		res, err = scriptTrim.Run(ctx, w.e.rdb, keys, args...).Slice()
	}
	w.sinceTrim = 0
	if err != nil {
		w.e.logs.warn("trim:"+errorCause(translateRedisErr(err)), "trim failed; tried again later", "group", w.sub.group, "unit", w.u.name, "err", translateRedisErr(err))
		return
	}
	if code, _ := res[0].(int64); code == -1 {
		w.cancel()
		return
	}
	w.trimmed = true
}

// step retries the head held in w.retry.
func (w *worker) step(head *entry) error {
	r, err := w.drain(strconv.Itoa(head.lane+1) + "|" + head.msg.ID)
	if err != nil {
		return err
	}
	switch r.code {
	case drainHalted:
		w.wait(haltWait())
	case drainResolved:
		w.retry = nil // an operator skipped it or moved it to the DLQ
		w.halted.Store(false)
	case drainEntries:
		w.retry = nil
		w.halted.Store(false)
		return w.handle(r.entries[0])
	case drainEmpty:
		w.retry = nil
	}
	return nil
}

// handle runs the handler for one entry, then acks it or schedules its retry / halt.
func (w *worker) handle(ent entry) error {
	w.ungate() // what follows may wait for a handler slot, acknowledgements or the handler
	// Start only when Redis confirmed enough earlier acknowledgements (max_unacked), and
	// only within the local lease deadline and while the lease's incarnation lives: an
	// owner that was frozen never starts another event after it wakes (past the deadline
	// the incarnation is over and its context cancelled).
	if err := w.awaitAcks(w.e.cfg.MaxUnacked - 1); err != nil {
		w.pending = append([]entry{ent}, w.pending...)
		return err
	}
	if w.dormant.Load() {
		if err := w.rearm(); err != nil {
			w.pending = append([]entry{ent}, w.pending...)
			return err
		}
	}
	if !w.inc.valid() || w.ctx.Err() != nil || w.e.stopping() {
		w.pending = append([]entry{ent}, w.pending...)
		return nil
	}
	ev, err := EventFromMessage(ent.msg)
	if err == nil {
		d := Delivery{
			Handler: w.sub.group, Category: w.u.laneCats[ent.lane], Key: w.u.key, Stream: w.lanes[ent.lane],
			EntryID: ent.msg.ID, Generation: w.gen, Attempt: ent.deliveries,
		}
		// Back-pressure: wait in line for a handler slot (slots.go). The wait is not an
		// attempt; when it ends without a slot, or the lease lapsed or the engine began
		// stopping meanwhile, the entry goes back unstarted.
		release, ok := w.waitSlot()
		if !ok || !w.inc.valid() || w.ctx.Err() != nil || w.e.stopping() {
			release()
			w.pending = append([]entry{ent}, w.pending...)
			return nil
		}
		started := time.Now()
		err = w.call(WithDelivery(w.ctx, d), ev)
		release()
		info := AttemptInfo{Group: w.sub.group, Category: d.Category, Attempt: ent.deliveries, Duration: time.Since(started), Err: err}
		if ent.deliveries == 1 && !ev.PublishedAt.IsZero() {
			info.Latency = max(started.Sub(ev.PublishedAt), 0)
		}
		info.Retry = err != nil && w.ctx.Err() == nil && ent.deliveries < w.sub.maxRetries
		w.e.cfg.Observer.Attempt(info)
	}
	if err == nil {
		// The ack waits for the next drain call (which acks and reads in one round trip)
		// unless the next event cannot start before it is confirmed: awaitAcks then
		// hands it to the instance's acker, whose flush carries many partitions' acks.
		w.unacked = append(w.unacked, ackItem{lane: ent.lane, id: ent.msg.ID})
		if w.sinceTrim++; w.sinceTrim >= trimEvery && len(w.pending) == 0 {
			// Between batches. Entries whose ack is still in flight are pending, and the
			// trim keeps everything from the oldest pending entry on.
			w.trim()
		}
		return nil
	}
	if w.ctx.Err() != nil {
		return nil // lease lost or hard stop: the next owner retries
	}
	if ent.deliveries >= w.sub.maxRetries {
		return w.halt(ent, err)
	}
	w.e.log.Info("handler failed; will retry", "group", w.sub.group, "stream", w.lanes[ent.lane], "entry", ent.msg.ID, "attempt", ent.deliveries, "err", err)
	w.retry = &ent
	w.wait(w.sub.retryDelay)
	return nil
}

// call runs the handler, turning a panic into an error.
func (w *worker) call(ctx context.Context, ev Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return w.sub.fn(ctx, ev)
}

// halt writes the durable halt record and parks the head until an operator resolves it.
func (w *worker) halt(ent entry, cause error) error {
	msg := clip(cause.Error(), 4096)
	args := []any{w.token,
		"entry", ent.msg.ID, "lane", strconv.Itoa(ent.lane), "stream", w.lanes[ent.lane],
		"attempts", strconv.Itoa(ent.deliveries), "error", msg,
		"owner", w.owner, "generation", strconv.FormatInt(w.gen, 10),
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	code, err := scriptHalt.Run(ctx, w.e.rdb, []string{w.leaseKey, w.liveKey, w.haltKey}, args...).Int64()
	if err != nil {
		w.retry = &ent
		return translateRedisErr(err)
	}
	if err := codeErr(code); err != nil {
		return err
	}
	w.halted.Store(true)
	w.e.cfg.Observer.Halted(w.sub.group, w.u.laneCats[ent.lane])
	w.e.log.Error("partition halted on a poison head: resolve it with seqctl head skip|dlq|retry",
		"group", w.sub.group, "stream", w.lanes[ent.lane], "entry", ent.msg.ID, "attempts", ent.deliveries, "err", msg)
	w.retry = &ent
	return nil
}

// drain result codes.
const (
	drainEmpty    = 0
	drainEntries  = 1
	drainNative   = 2 // the transaction's own read of the first lane holds the entries
	drainResolved = 3
	drainHalted   = -2
)

type drainResult struct {
	code    int64
	lastIDs []streamID // drainEmpty: the last entry id of each lane ("0-0" for none)
	entries []entry
}

// drain calls drain.lua: ack w.unacked, then read (expect: "" or "{lane}|{id}").
//
// While a partition is busy (its last read filled a batch of new entries of the first
// lane), the read of the first lane's new entries is a plain XREADGROUP, followed by the
// script in one MULTI/EXEC transaction: atomic with the fence check, and without the
// conversion of every entry into Lua and back, which costs Redis more than the rest of
// the call. The script then tells whether that read may be used: only when the fence
// holds, no halt record exists and the lane's pending entries are exactly what the read
// took, so its entries are the ones after everything already handled. When it may not
// (fenced, halted, an older entry pending), the script gives the read's entries their
// delivery count back; they stay pending and later calls claim them in order.
func (w *worker) drain(expect string) (drainResult, error) {
	// A dormant lease without guards gets its expiry back in the read itself; one with
	// guards is re-armed by rearm before an event starts.
	rearm := w.dormant.Load() && len(w.u.guards) == 0
	px := "0"
	if rearm {
		px = strconv.FormatInt(w.e.cfg.Timing.LeaseTTL.Milliseconds(), 10)
	}
	native := w.busyAfter != "" && expect == "" && !rearm && !w.e.noTx.Load()
	after := ""
	if native {
		after = w.busyAfter
	}
	w.busyAfter = ""
	keys := make([]string, 0, 3+len(w.lanes))
	keys = append(keys, w.leaseKey, w.liveKey, w.haltKey)
	keys = append(keys, w.lanes...)
	takeover := ""
	if w.takeover {
		takeover = strconv.Itoa(max(w.e.cfg.MaxUnacked, 1))
	}
	args := []any{w.token, w.sub.group, w.consumer, w.e.cfg.BatchSize, expect, px, after, w.owed, takeover}
	for _, ids := range w.unackedByLane() {
		args = append(args, len(ids))
		for _, id := range ids {
			args = append(args, id)
		}
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	var res []any
	var read *redis.XStreamSliceCmd
	var err error
	if native {
		res, read, err = w.drainNative(ctx, keys, args)
	} else {
		res, err = scriptDrain.Run(ctx, w.e.rdb, keys, args...).Slice()
	}
	if err != nil {
		return drainResult{}, translateRedisErr(err)
	}
	w.unacked, w.sent = w.unacked[:0], 0 // the script acknowledged them all, fenced
	w.owed = ""                          // and gave back what a lost read took, fenced or not
	w.takeover = false                   // and corrected a previous owner's read-ahead
	code, _ := res[0].(int64)
	if rearm && code == drainEntries {
		w.dormant.Store(false)
	}
	if err := codeErr(code); err != nil && code != drainHalted {
		return drainResult{}, err
	}
	r := drainResult{code: code}
	switch code {
	case drainEmpty:
		r.lastIDs = make([]streamID, 0, len(res)-1)
		for _, v := range res[1:] {
			s, _ := v.(string)
			r.lastIDs = append(r.lastIDs, parseStreamID(s))
		}
	case drainNative:
		streams, err := read.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return drainResult{}, translateRedisErr(err)
		}
		if len(streams) == 0 || len(streams[0].Messages) == 0 {
			return drainResult{}, errors.New("engine: the drain script accepted an empty native read")
		}
		msgs := streams[0].Messages
		r.code, r.entries = drainEntries, make([]entry, 0, len(msgs))
		for _, m := range msgs {
			r.entries = append(r.entries, entry{lane: 0, msg: m, deliveries: 1})
		}
		if len(msgs) >= w.e.cfg.BatchSize {
			w.busyAfter = msgs[len(msgs)-1].ID
		}
	case drainEntries:
		lane, _ := res[1].(int64)
		deliveries, _ := res[2].(int64)
		msgs, err := parseMessages(res[3])
		if err != nil {
			return drainResult{}, err
		}
		r.entries = make([]entry, 0, len(msgs))
		for i, m := range msgs {
			d := 1
			if i == 0 {
				d = int(deliveries)
			}
			r.entries = append(r.entries, entry{lane: int(lane) - 1, msg: m, deliveries: d})
		}
		if lane == 1 && deliveries == 1 && len(msgs) >= w.e.cfg.BatchSize {
			w.busyAfter = msgs[len(msgs)-1].ID
		}
	}
	return r, nil
}

// drainNative runs the first lane's XREADGROUP and then drain.lua (args[6]: the last id
// the worker read before) in one transaction. The read runs first, whatever the script
// then finds; its reply may be used only when the script answers drainNative, and with
// any other answer the script has given the read's entries their delivery count back.
// When the script did not run (NOSCRIPT after the script cache was emptied, MULTI
// refused) or the transaction's reply was lost (a connection error), the script is sent
// again alone, without the read, and gives back what the read may have taken (args[7]).
func (w *worker) drainNative(ctx context.Context, keys []string, args []any) ([]any, *redis.XStreamSliceCmd, error) {
	pipe := w.e.rdb.TxPipeline()
	read := pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: w.sub.group, Consumer: w.consumer, Streams: []string{w.lanes[0], ">"},
		Count: int64(w.e.cfg.BatchSize), Block: -1,
	})
	script := pipe.EvalSha(ctx, scriptDrain.Hash(), keys, args...)
	_, err := pipe.Exec(ctx)
	after := args[6]
	if missing, _ := MissingPermission(err); missing != "" {
		w.e.transactionsRefused(err) // nothing ran
	} else if connErr(err) != nil || isNoScript(script.Err()) {
		w.owed, _ = after.(string) // the read may have run without the script
		args[7] = after
	} else {
		res, err := script.Slice()
		return res, read, err
	}
	// Sent again alone, with the acknowledgements again, which is harmless; after
	// NOSCRIPT, Run sends its source with EVAL, which caches it again. What the read
	// took is given back first, and claimed in order.
	args[6] = ""
	res, err := scriptDrain.Run(ctx, w.e.rdb, keys, args...).Slice()
	return res, nil, err
}

// probeTransactions runs an empty-handed transaction at start: a Redis user that may not
// run MULTI or EXEC turns the native read off (transactionsRefused) before any partition
// is read.
func (e *Engine) probeTransactions(ctx context.Context) {
	_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Exists(ctx, e.keys.InstancesKey())
		return nil
	})
	if missing, _ := MissingPermission(err); missing != "" {
		e.transactionsRefused(err)
	}
}

// transactionsRefused turns the native read of busy partitions off for good: the Redis
// user may not run MULTI/EXEC, so every read goes through the drain script alone.
func (e *Engine) transactionsRefused(err error) {
	if e.noTx.CompareAndSwap(false, true) {
		e.log.Warn("the Redis user may not run MULTI/EXEC: busy partitions are read by the drain script alone, which costs Redis about twice as much per event; grant +multi +exec as "+SecurityDoc+" shows",
			"err", translateRedisErr(err))
	}
}

// parseMessages decodes a Lua-returned list of stream entries ({id, {f, v, ...}}).
func parseMessages(v any) ([]redis.XMessage, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("engine: unexpected entries reply %T", v)
	}
	out := make([]redis.XMessage, 0, len(list))
	for _, it := range list {
		pair, ok := it.([]any)
		if !ok || len(pair) < 1 {
			continue
		}
		id, _ := pair[0].(string)
		var kv []any
		if len(pair) > 1 {
			kv, _ = pair[1].([]any)
		}
		vals := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			vals[k] = kv[i+1]
		}
		out = append(out, redis.XMessage{ID: id, Values: vals})
	}
	return out, nil
}

// acked is called by the acker with the outcome of a flush that carried this worker's
// acknowledgements.
func (w *worker) acked(r ackResult) {
	w.ackMu.Lock()
	w.ackIn = append(w.ackIn, r.ids...)
	w.ackFenced = w.ackFenced || r.fenced
	note := w.ackNote
	w.ackMu.Unlock()
	if note != nil {
		select {
		case note <- struct{}{}:
		default:
		}
	}
}

// ackWait returns the channel acked signals, made on first use, or nil when
// acknowledgements or the fence came since the last applyAcks (apply them first).
func (w *worker) ackWait() <-chan struct{} {
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	if len(w.ackIn) > 0 || w.ackFenced {
		return nil
	}
	if w.ackNote == nil {
		w.ackNote = make(chan struct{}, 1)
	}
	return w.ackNote
}

// applyAcks removes the confirmed acknowledgements from w.unacked. It reports whether the
// acker found the lease gone.
func (w *worker) applyAcks() (fenced bool) {
	w.ackMu.Lock()
	in, fenced := w.ackIn, w.ackFenced
	w.ackIn = nil
	w.ackMu.Unlock()
	if len(in) > 0 {
		done := make(map[ackItem]bool, len(in))
		for _, it := range in {
			done[it] = true
		}
		kept, sent := w.unacked[:0], int(w.sent)
		for i, it := range w.unacked {
			switch {
			case !done[it]:
				kept = append(kept, it)
			case i < int(w.sent):
				sent--
			}
		}
		w.unacked, w.sent = kept, int32(sent)
	}
	return fenced
}

// awaitAcks waits until at most limit handled events of the partition lack a confirmed
// acknowledgement (max_unacked - 1 before an event starts): with max_unacked = 1 an
// event starts only after Redis confirmed the previous one's ack, so a failure of any
// kind re-runs at most the event in flight. It returns ErrFenced when the lease is gone,
// and nil when the worker must stop (its context ended).
func (w *worker) awaitAcks(limit int) error {
	for {
		if w.applyAcks() {
			return ErrFenced
		}
		if len(w.unacked) <= limit || w.ctx.Err() != nil {
			return nil
		}
		if int(w.sent) < len(w.unacked) {
			w.e.acker.submit(w, w.unacked[w.sent:]...)
			w.sent = int32(len(w.unacked))
		}
		note := w.ackWait()
		if note == nil {
			continue
		}
		select {
		case <-note:
		case <-w.ctx.Done():
		}
	}
}

func (w *worker) ack(ctx context.Context, lane int, ids []string) error {
	args := make([]any, 0, 2+len(ids))
	args = append(args, w.token, w.sub.group)
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := scriptAck.Run(ctx, w.e.rdb, []string{w.leaseKey, w.liveKey, w.lanes[lane]}, args...).Int64()
	if err != nil {
		return translateRedisErr(err)
	}
	return codeErr(n)
}

// flushAcks synchronously acks every handled entry whose ack Redis has not confirmed.
func (w *worker) flushAcks(ctx context.Context) error {
	w.applyAcks()
	for lane, ids := range w.unackedByLane() {
		if len(ids) == 0 {
			continue
		}
		if err := w.ack(ctx, lane, ids); err != nil {
			return err
		}
	}
	w.unacked, w.sent = w.unacked[:0], 0
	return nil
}

// unackedByLane returns the ids of w.unacked per lane, in handling order.
func (w *worker) unackedByLane() [][]string {
	out := make([][]string, len(w.lanes))
	for _, it := range w.unacked {
		out[it.lane] = append(out[it.lane], it.id)
	}
	return out
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
