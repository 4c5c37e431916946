package engine

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/ctxwait"
	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// acker sends the fenced acknowledgements of the instance's workers, batched: one
// ackmany.lua call per flush carries the acks of all partitions submitted since the last
// flush, so a strict instance (max_unacked = 1, every event waits for its ack) pays a
// round trip per flush, not per event. A worker submits only the acks it must see
// confirmed before its next event may start; the others ride on its next drain call,
// which acknowledges and reads in one round trip. A flush that fails for a reason other
// than the fence is retried with the acks that arrived meanwhile, until Redis answers or
// the worker's lease ends; each worker hears about its acks through worker.acked.
//
// The loop shape is the engine's background-loop shape: start, one goroutine, one tick
// (flush) function; it stops with the engine's hard context.
type acker struct {
	e *Engine

	mu      sync.Mutex
	pending map[*worker][]ackItem // guarded by mu
	kick    chan struct{}         // capacity 1
}

// ackItem is one handled entry whose acknowledgement Redis has not confirmed yet.
type ackItem struct {
	lane int
	id   string
}

// ackResult tells a worker which of its entries are acknowledged, or that it is fenced.
type ackResult struct {
	ids    []ackItem
	fenced bool
}

func newAcker(e *Engine) *acker {
	return &acker{e: e, pending: map[*worker][]ackItem{}, kick: make(chan struct{}, 1)}
}

// submit queues handled entries' acks; it never blocks.
func (a *acker) submit(w *worker, its ...ackItem) {
	a.mu.Lock()
	a.pending[w] = append(a.pending[w], its...)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// forget drops a worker's queued acks (it exits; exit flushes what it still holds).
func (a *acker) forget(w *worker) {
	a.mu.Lock()
	delete(a.pending, w)
	a.mu.Unlock()
}

func (a *acker) loop() {
	defer a.e.bg.Done()
	backoff := 10 * time.Millisecond
	for {
		select {
		case <-a.e.hardCtx.Done():
			return
		case <-a.kick:
		}
		for a.flush() {
			// Redis did not answer: retry what is queued after a pause.
			if !ctxwait.Sleep(a.e.hardCtx, backoff) {
				return
			}
			backoff = min(backoff*2, 500*time.Millisecond)
		}
		backoff = 10 * time.Millisecond
	}
}

// flush sends every queued ack, one call per session owner (normally one). It reports
// whether a call failed without an answer (the acks stay queued for a retry).
func (a *acker) flush() (retry bool) {
	if f := a.e.ackHook.Load(); f != nil {
		(*f)()
	}
	a.mu.Lock()
	batch := a.pending
	a.pending = map[*worker][]ackItem{}
	a.mu.Unlock()
	live := make([]*worker, 0, len(batch))
	for w := range batch {
		if w.ctx.Err() != nil {
			continue // its lease is over: the next owner re-runs what was not acked
		}
		live = append(live, w)
	}
	if a.e.keys.IsCluster() {
		var failed []*worker
		live, failed = a.sendByNode(live, batch)
		if len(failed) > 0 {
			a.mu.Lock()
			for _, w := range failed {
				a.pending[w] = append(batch[w], a.pending[w]...)
			}
			a.mu.Unlock()
			retry = true
		}
	}
	byOwner := map[string][]*worker{}
	for _, w := range live {
		// One call per session owner; on Redis Cluster one per owner and slot tag, since
		// a script touches one slot there.
		g := w.owner
		if a.e.keys.IsCluster() {
			g += "\x00" + keyspace.SlotTag(w.leaseKey)
		}
		byOwner[g] = append(byOwner[g], w)
	}
	groups := make([][]*worker, 0, len(byOwner))
	for _, ws := range byOwner {
		groups = append(groups, ws)
	}
	for i, err := range a.send(groups, batch) {
		if err == nil {
			continue
		}
		ws := groups[i]
		a.e.logs.warn("ack:"+errorCause(err), "acknowledgements not confirmed yet; retrying", "partitions", len(ws), "err", err)
		a.mu.Lock()
		for _, w := range ws {
			a.pending[w] = append(batch[w], a.pending[w]...)
		}
		a.mu.Unlock()
		retry = true
	}
	return retry
}

type ackPair struct {
	w       *worker
	laneIdx int
	items   []ackItem
}

// sendByNode acknowledges, on Redis Cluster, the workers' entries with one acknode.lua
// call per node (all in one pipeline). It returns the workers whose lanes the node did not
// serve (a slot moved: the caller acknowledges them with ackmany.lua), and those whose
// call got no answer (to retry).
func (a *acker) sendByNode(ws []*worker, batch map[*worker][]ackItem) (notLocal, failed []*worker) {
	cc, ok := a.e.rdb.(*redis.ClusterClient)
	if !ok || len(ws) == 0 {
		return ws, nil
	}
	ctx, cancel := context.WithTimeout(a.e.hardCtx, a.e.cfg.Timing.LeaseTTL/2)
	defer cancel()
	type nodeCall struct {
		pairs []ackPair
		call  scripts.AckNode
	}
	byNode := map[string]*nodeCall{}
	var calls []*nodeCall
	for _, w := range ws {
		addr, _ := masterAddr(ctx, cc, w.leaseKey) // "" when unknown: a call whose -2s go to ackmany.lua
		c := byNode[addr]
		if c == nil {
			c = &nodeCall{}
			byNode[addr] = c
			calls = append(calls, c)
		}
		for _, p := range ackPairsOf(w, batch[w]) {
			c.pairs = append(c.pairs, p)
			c.call.Lanes = append(c.call.Lanes, p.lane())
		}
	}
	cmds, err := runPipelined(ctx, a.e.rdb, len(calls), func(pipe redis.Pipeliner, i int) *redis.Cmd {
		return calls[i].call.EvalSha(ctx, pipe)
	})
	again := map[*worker]bool{}
	for i, c := range calls {
		var res []int64
		if err == nil {
			res, _ = scripts.ParseAckNode(cmds[i])
		}
		if len(res) != len(c.pairs) {
			cause := err
			if cause == nil {
				cause = cmds[i].Err()
			}
			a.e.logs.warn("ack:"+errorCause(translateRedisErr(cause)), "acknowledgements not confirmed yet; retrying", "partitions", len(c.pairs), "err", translateRedisErr(cause))
			for _, p := range c.pairs {
				if !again[p.w] {
					again[p.w] = true
					failed = append(failed, p.w)
				}
			}
			continue
		}
		// A worker's lanes share a slot: all of them are local or none.
		for k, p := range c.pairs {
			switch {
			case res[k] == scripts.AckNotServed:
				if !again[p.w] {
					again[p.w] = true
					notLocal = append(notLocal, p.w)
				}
			case res[k] >= 0:
				p.w.acked(ackResult{ids: p.items})
			default:
				p.w.acked(ackResult{fenced: true})
			}
		}
	}
	return notLocal, failed
}

// ackCall is one ackmany.lua call: the workers of one session owner (and of one slot tag
// on Redis Cluster, where the first lease is then the liveness key, see liveKey).
type ackCall struct {
	pairs []ackPair
	call  scripts.AckMany
}

func newAckCall(ws []*worker, batch map[*worker][]ackItem) *ackCall {
	c := &ackCall{call: scripts.AckMany{Session: ws[0].liveKey}}
	for _, w := range ws {
		for _, p := range ackPairsOf(w, batch[w]) {
			c.pairs = append(c.pairs, p)
			c.call.Lanes = append(c.call.Lanes, p.lane())
		}
	}
	return c
}

// ackPairsOf groups a worker's acknowledgements by lane.
func ackPairsOf(w *worker, items []ackItem) []ackPair {
	byLane := map[int][]ackItem{}
	for _, it := range items {
		byLane[it.lane] = append(byLane[it.lane], it)
	}
	pairs := make([]ackPair, 0, len(byLane))
	for lane, its := range byLane {
		pairs = append(pairs, ackPair{w: w, laneIdx: lane, items: its})
	}
	return pairs
}

// lane returns the pair as a lane of the ack scripts.
func (p ackPair) lane() scripts.AckLane {
	ids := make([]string, len(p.items))
	for i, it := range p.items {
		ids[i] = it.id
	}
	return scripts.AckLane{Lease: p.w.leaseKey, Stream: p.w.lanes[p.laneIdx], Token: p.w.token, Group: p.w.sub.group, IDs: ids}
}

// send makes the ackmany.lua calls of the groups in one pipeline (one call per group:
// normally one on a single node; one per slot tag on Redis Cluster, where the client
// sends each node its part) and returns each group's error: nil when Redis answered.
func (a *acker) send(groups [][]*worker, batch map[*worker][]ackItem) []error {
	calls := make([]*ackCall, len(groups))
	for i, ws := range groups {
		calls[i] = newAckCall(ws, batch)
	}
	errs := make([]error, len(groups))
	ctx, cancel := context.WithTimeout(a.e.hardCtx, a.e.cfg.Timing.LeaseTTL/2)
	defer cancel()
	cmds, err := runPipelined(ctx, a.e.rdb, len(calls), func(pipe redis.Pipeliner, i int) *redis.Cmd {
		return calls[i].call.EvalSha(ctx, pipe)
	})
	for i, c := range calls {
		if err != nil {
			errs[i] = err
			continue
		}
		res, sessionGone, cerr := scripts.ParseAckMany(cmds[i])
		if cerr != nil {
			errs[i] = translateRedisErr(cerr)
			continue
		}
		c.apply(res, sessionGone)
	}
	return errs
}

// apply hands each worker the outcome of its acknowledgements.
func (c *ackCall) apply(res []int64, sessionGone bool) {
	if sessionGone {
		for _, p := range c.pairs {
			p.w.acked(ackResult{fenced: true})
		}
		return
	}
	for i, p := range c.pairs {
		if i < len(res) && res[i] >= 0 {
			p.w.acked(ackResult{ids: p.items})
		} else {
			p.w.acked(ackResult{fenced: true})
		}
	}
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

// ack acknowledges handled entries of one lane, fenced (ack.lua).
func (w *worker) ack(ctx context.Context, lane int, ids []string) error {
	_, fenced, err := scripts.Ack{Lease: w.leaseKey, Live: w.liveKey, Lane: w.lanes[lane],
		Token: w.token, Group: w.sub.group, IDs: ids}.Run(ctx, w.e.rdb)
	switch {
	case err != nil:
		return translateRedisErr(err)
	case fenced:
		return ErrFenced
	}
	return nil
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
