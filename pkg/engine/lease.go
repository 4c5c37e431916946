package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The life of an ownership lease, one file.
//
// A lease key (keyspace.Keys.LeaseKey) holds "{owner}:{generation}" (keyspace.Lease): the
// owner is the instance's session owner, the generation a counter that only grows, the
// fencing token every fenced script compares.
//
//   - Taken by a discovery pass: acquire runs acquire.lua for each unit the pass tries,
//     pipelined, and starts a worker for each lease taken, after leasesReplicated when
//     [broker] min_replicas asks for it.
//   - Renewed: on one node a lease is valid only while its owner's session key exists, so
//     the session's heartbeat (session.beat) renews every lease of the instance with one
//     PEXPIRE. On Redis Cluster no script may read a key in another slot: each lease
//     carries its own PX expiry, the fenced scripts take the lease itself as the liveness
//     key (liveKey), and the same heartbeat calls renewLeases, one renew.lua call per
//     node and batch.
//   - Made dormant (Redis Cluster): a partition idle for a lease TTL loses its expiry
//     (goDormant), so 10,000 idle partitions cost no renewal; it lives while the session
//     does, and the next event re-arms it (rearm, or drain.lua itself).
//   - Released at a graceful stop or a hand-over (releaseLease, release.lua), with the
//     entries read and never started handed back.
//   - Lost: a fenced script answers that the lease is not the caller's any more; the
//     worker stops touching the partition at once.

// acquireTally is what the acquire calls of one discovery pass did.
type acquireTally struct {
	taken, lost, failed int
	err                 error // the last error of a failed call
	dropped             bool  // a unit's key left the view (reaped)
}

// acquire runs acquire.lua for the units of try (one page of a discovery pass, pipelined:
// on one node up to acquireBatch units a call, on Redis Cluster one) and starts a worker
// for each lease taken, adding to t what happened. dead names owners whose session was
// found gone (given on Redis Cluster only, see acquire.lua). It returns false when the
// pass must stop: the session is gone, or the leases taken were not replicated (see
// leasesReplicated).
func (e *Engine) acquire(ctx context.Context, in *incarnation, try []unit, passStart uint64, dead []string, t *acquireTally) (bool, error) {
	owner := in.owner
	seq := e.view.noticeSeq() // a -4 drops a key only when no notice re-announced it after this
	per := acquireBatch
	if e.keys.IsCluster() {
		per = 1 // the keys of one call must share a slot
	}
	calls := (len(try) + per - 1) / per
	cmds, err := runPipelined(ctx, e.rdb, calls, func(pipe redis.Pipeliner, i int) *redis.Cmd {
		c := scripts.AcquireMany{Owner: owner, SessionPrefix: e.keys.SessionPrefix(), LeasePX: e.leasePX(), DeadOwners: dead}
		for _, u := range try[i*per : min((i+1)*per, len(try))] {
			lease := e.keys.LeaseKey(u.name, u.sub.group)
			c.Units = append(c.Units, scripts.AcquireUnit{
				Lease: lease, Generation: e.keys.GenerationKey(u.name, u.sub.group), Live: e.liveKey(owner, lease),
				Guards: u.guards, Lanes: u.lanes,
			})
		}
		return c.EvalSha(ctx, pipe)
	})
	if err != nil {
		return false, err
	}
	replies := make([]scripts.AcquireReply, len(try))
	errs := make([]error, len(try))
	for i, cmd := range cmds {
		from, to := i*per, min((i+1)*per, len(try))
		rs, err := scripts.ParseAcquireMany(cmd)
		if err == nil && len(rs) != to-from {
			err = fmt.Errorf("%w from acquire.lua: %d replies for %d units", scripts.ErrReply, len(rs), to-from)
		}
		for j := from; j < to; j++ {
			if err != nil {
				errs[j] = err
			} else {
				replies[j] = rs[j-from]
			}
		}
	}
	if !e.leasesReplicated(ctx, owner, try, replies) {
		return false, nil
	}
	for i, u := range try {
		if err := errs[i]; err != nil {
			if !errors.Is(err, redis.Nil) {
				t.err = translateRedisErr(err)
				t.failed++
			}
			continue
		}
		switch r := replies[i]; r.Code {
		case scripts.Acquired, scripts.Readopted:
			e.startWorker(u, in, r.Generation)
			t.taken++
		case scripts.HeldByOther:
			e.cacheOwner(u.id(), r.Holder, passStart)
			t.lost++
		case scripts.SessionGone:
			e.sess.lose(in, "the session key is gone (seen when taking a lease): Redis restarted or lost data, or this process stalled past the lease TTL")
			return false, nil
		case scripts.NoLane:
			// Reaped since the view learnt of it: nothing to own until a publish
			// re-creates it (and announces it on the control stream).
			t.dropped = e.view.drop(u, seq) || t.dropped
		}
	}
	return true, nil
}

// acquireBatch is the most units one acquire.lua call takes on a single node. A unit in
// a call of its own cost Redis 19 to 44 µs (`SLOWLOG`, a fresh unit of two lanes), one of
// 100 units 0.54 to 0.84 ms: about 6 µs a unit, and under a millisecond that Redis serves
// nothing else.
const acquireBatch = 100

// acquired ends a pass's acquire calls: the health of lease taking, and a pass at once
// when another instance took some of the units meanwhile (room is the room below the
// share the pass started with).
func (e *Engine) acquired(t *acquireTally, room int) {
	if t.dropped {
		e.forgetGoneUnits()
	}
	if t.err != nil {
		e.health.set(healthLeases, "lease taking fails: "+t.err.Error())
		e.logs.warn("acquire:"+errorCause(t.err), "cannot take leases", "failed", t.failed, "err", t.err)
	} else {
		e.health.clear(healthLeases)
	}
	if t.lost > 0 && t.taken < room && e.view.raceKicks < maxRaceKicks {
		// Another instance took some of these meanwhile (passes of instances started
		// together overlap): their owners are cached now, so run again for the rest of
		// the share rather than a discovery interval later. Bounded per incarnation: an
		// instance kept short of its share by the slack must not spin.
		e.view.raceKicks++
		e.kickDiscovery()
	}
}

// maxDeadOwners bounds how many owners found gone a pass names to acquire.lua.
const maxDeadOwners = 64

// deadOwners returns the owners of alive found gone (at most maxDeadOwners): on Redis
// Cluster acquire.lua takes their dormant leases. A later pass names the rest.
func deadOwners(alive map[string]bool) []string {
	var out []string
	for o, ok := range alive {
		if !ok && len(out) < maxDeadOwners {
			out = append(out, o)
		}
	}
	return out
}

// ownerOf returns the owner of a lease value ("" for a value that is not one).
func ownerOf(lease string) string {
	l, _ := keyspace.ParseLease(lease)
	return l.Owner
}

// leasesReplicated is called by a discovery pass after its acquire scripts ran (replies[i]
// is the reply for units[i]) and before it starts a worker for any unit it took. With
// MinReplicas = 0, or when the pass took nothing, it returns true at once. Otherwise it
// waits for the replicas; when they fall short (or the wait fails) it gives every lease
// the pass took back, fenced, logs once for the pass, and returns false: the caller
// starts none of them.
//
// Why give them back rather than keep them unworked: a kept lease blocks the partition for
// as long as this instance lives, and nothing here would look at it again; a released one
// is free at once, so the next pass (here or elsewhere) takes it under a new generation
// and waits again. While the replicas stay short every pass repeats that, at most one per
// timeout per instance, with one log line each; the partitions wait, which is what
// min_replicas asks for. Workers already running keep running: their lease grants were
// replicated when they started.
func (e *Engine) leasesReplicated(ctx context.Context, owner string, units []unit, replies []scripts.AcquireReply) bool {
	if e.cfg.MinReplicas <= 0 {
		return true
	}
	type taken struct {
		u   unit
		gen int64
	}
	var got []taken
	for i, u := range units {
		if c := replies[i].Code; c == scripts.Acquired || c == scripts.Readopted {
			got = append(got, taken{u, replies[i].Generation})
		}
	}
	if len(got) == 0 {
		return true
	}
	err := WaitReplicas(ctx, e.rdb, "lease grant", e.cfg.MinReplicas, e.cfg.replicaTimeout())
	if err == nil {
		return true
	}
	released := 0
	for _, t := range got {
		token := keyspace.Lease{Owner: owner, Generation: t.gen}.String()
		if e.releaseLease(ctx, t.u, token, owner) == nil {
			released++
		}
	}
	e.health.set(healthLeases, "leases not replicated: "+err.Error())
	e.logs.warn("replicas", "leases taken but not replicated: gave them back without starting them; the next discovery pass tries again",
		"leases", len(got), "released", released, "min_replicas", e.cfg.MinReplicas, "err", err)
	return false
}

// liveKey returns the key the fenced scripts check for the owner's liveness: its session
// key on a single node, the unit's lease (given) on Redis Cluster.
func (e *Engine) liveKey(owner, lease string) string {
	if e.keys.IsCluster() {
		return lease
	}
	return e.keys.SessionKey(owner)
}

// leasePX is the lease TTL acquire.lua gives a lease it takes in ms on Redis Cluster, 0 on one node.
func (e *Engine) leasePX() int64 {
	if e.keys.IsCluster() {
		return e.cfg.Timing.LeaseTTL.Milliseconds()
	}
	return 0
}

// releaseLease gives a unit's lease back (release.lua), handing back the unstarted
// entries, and announces the release on the control stream (in the script on one node,
// after it on Redis Cluster). ErrFenced: the lease was not the caller's any more.
func (e *Engine) releaseLease(ctx context.Context, u unit, token, consumer string, unstarted ...scripts.Unstarted) error {
	k := e.keys
	lease := k.LeaseKey(u.name, u.sub.group)
	c := scripts.Release{Lease: lease, Control: k.ControlStream(), Lanes: u.lanes, Guards: u.guards,
		Token: token, Group: u.sub.group, Unit: u.name, Consumer: consumer, Announce: true, Unstarted: unstarted}
	if k.IsCluster() {
		c.Control, c.Announce = lease, false
	}
	released, err := c.Run(ctx, e.rdb)
	switch {
	case err != nil:
		return translateRedisErr(err)
	case !released:
		return ErrFenced
	}
	if k.IsCluster() {
		_ = announce(ctx, e.rdb, k, keyspace.Notice{Op: keyspace.NoticeReleased, Group: u.sub.group, Unit: u.name})
	}
	return nil
}

// renewBatch is the most leases one renew.lua call renews.
const renewBatch = 512

// renewLeases renews, on Redis Cluster, every lease the instance's workers hold: one
// renew.lua call per node, each lease renewed only while it holds the worker's token. A
// lease found lost ends its worker at once. It reports whether every lease got an answer
// (the caller extends the local lease deadline only then).
func (e *Engine) renewLeases(ctx context.Context, in *incarnation) bool {
	rdb := e.sess.rdb // the session's own connections, as its renewal
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return true
	}
	all, sleepy := e.leasesToRenew(in)
	defer func() {
		for _, w := range sleepy {
			if w.ctx.Err() == nil && !w.toSleep.Swap(true) {
				w.poke()
			}
		}
	}()
	byNode := map[string][]heldLease{}
	for _, h := range all {
		addr, _ := masterAddr(ctx, cc, h.key) // "" when unknown: renewed with the others of ""
		byNode[addr] = append(byNode[addr], h)
	}
	// One call per renewBatch leases of a node, all in one pipeline: a call over every
	// lease of a node would hold that master for milliseconds at 10,000 partitions.
	answered, moved := e.renewChunks(ctx, rdb, chunkGroups(byNode, renewBatch))
	if len(moved) > 0 {
		answered = e.renewMoved(ctx, rdb, moved) && answered
	}
	return answered
}

// heldLease is a lease or guard key a worker holds.
type heldLease struct {
	w   *worker
	key string
}

// leasesToRenew returns the lease and guard keys of incarnation in's workers that carry
// an expiry, and the workers idle for a lease TTL: renewed this time, then asked to go
// dormant. The ask comes after the renewal's reply, so the renewal never lands after the
// dormancy it precedes.
func (e *Engine) leasesToRenew(in *incarnation) (all []heldLease, sleepy []*worker) {
	idleFor := time.Now().Add(-e.dormantAfter()).UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.workers {
		if w.inc != in || w.dormant.Load() {
			continue // a dormant lease has no expiry
		}
		if w.parked.Load() && (w.idle.Load() || w.paused.Load()) && w.parkedAt.Load() < idleFor {
			sleepy = append(sleepy, w)
		}
		all = append(all, heldLease{w, w.leaseKey})
		for _, g := range w.u.guards {
			all = append(all, heldLease{w, g})
		}
	}
	return all, sleepy
}

// renewCall queues one renew.lua call over leases of one node.
func (e *Engine) renewCall(ctx context.Context, pipe redis.Pipeliner, hs []heldLease) *redis.Cmd {
	c := scripts.Renew{TTLMS: e.cfg.Timing.LeaseTTL.Milliseconds(), Leases: make([]scripts.HeldLease, 0, len(hs))}
	for _, h := range hs {
		c.Leases = append(c.Leases, scripts.HeldLease{Key: h.key, Token: h.w.token})
	}
	return c.EvalSha(ctx, pipe)
}

// renewChunks renews each chunk (the leases of one node) in one pipeline. A lease found
// lost ends its worker; it returns whether every chunk was answered, and the leases whose
// slot moved.
func (e *Engine) renewChunks(ctx context.Context, rdb redis.UniversalClient, chunks [][]heldLease) (answered bool, moved []heldLease) {
	answered = true
	cmds, err := runPipelined(ctx, rdb, len(chunks), func(pipe redis.Pipeliner, i int) *redis.Cmd { return e.renewCall(ctx, pipe, chunks[i]) })
	for i, hs := range chunks {
		var res []int64
		if err == nil {
			res, _ = scripts.ParseRenew(cmds[i])
		}
		if len(res) != len(hs) {
			answered = false
			cause := err
			if cause == nil {
				cause = cmds[i].Err()
			}
			e.logs.warn("renew:"+errorCause(translateRedisErr(cause)), "lease renewal failed; the leases stay until the local deadline", "leases", len(hs), "err", translateRedisErr(cause))
			continue
		}
		for k, h := range hs {
			switch res[k] {
			case scripts.RenewLost:
				h.w.cancel() // the lease is not ours any more: stop touching the partition
			case scripts.RenewMoved:
				moved = append(moved, h) // its slot moved: renew it where it is now
			}
		}
	}
	return answered, moved
}

// renewMoved renews each lease whose slot moved where it is served now, one call each;
// it reports whether every one was renewed or found lost.
func (e *Engine) renewMoved(ctx context.Context, rdb redis.UniversalClient, moved []heldLease) (answered bool) {
	answered = true
	cmds, err := runPipelined(ctx, rdb, len(moved), func(pipe redis.Pipeliner, i int) *redis.Cmd { return e.renewCall(ctx, pipe, moved[i:i+1]) })
	for i, h := range moved {
		var res []int64
		if err == nil {
			res, _ = scripts.ParseRenew(cmds[i])
		}
		switch {
		case len(res) != 1 || res[0] == scripts.RenewMoved:
			answered = false
		case res[0] == scripts.RenewLost:
			h.w.cancel()
		}
	}
	return answered
}

// dormantAfter is how long a partition stays idle on Redis Cluster before its lease goes
// dormant: one lease TTL.
func (e *Engine) dormantAfter() time.Duration { return e.cfg.Timing.LeaseTTL }

// errLeaseMoved says a lease's slot was not served where renew.lua ran (a slot moving).
var errLeaseMoved = errors.New("engine: the lease's slot is moving; tried again")

// setLeaseExpiry runs renew.lua over the worker's lease and guards (one slot): ttl 0
// makes them dormant, a TTL re-arms them. ErrFenced: the lease is not the worker's.
func (w *worker) setLeaseExpiry(ctx context.Context, ttl time.Duration) error {
	c := scripts.Renew{TTLMS: ttl.Milliseconds(), Leases: []scripts.HeldLease{{Key: w.leaseKey, Token: w.token}}}
	for _, g := range w.u.guards {
		c.Leases = append(c.Leases, scripts.HeldLease{Key: g, Token: w.token})
	}
	res, err := c.Run(ctx, w.e.rdb)
	if err != nil {
		return translateRedisErr(err)
	}
	for _, r := range res {
		switch r {
		case scripts.RenewLost:
			return ErrFenced
		case scripts.RenewMoved:
			return errLeaseMoved
		}
	}
	return nil
}

// goDormant makes the idle worker's lease dormant, on Redis Cluster: without an expiry it
// lives while the instance's session does (acquire.lua takes it only from an owner whose
// session is gone), so 10,000 idle partitions cost no renewal at all. The worker is marked
// dormant before the call, so no later heartbeat renews it; when the call is refused
// because the lease's slot moved, the lease kept its expiry and the heartbeat renews it
// again; when it gets no answer, the lease stays dormant (see below). A renewal already
// in flight that lands after the call gives the lease its expiry back: it then ends a
// lease TTL later, the worker's re-arm finds it gone, and discovery takes the partition
// again.
func (w *worker) goDormant() {
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL/2)
	defer cancel()
	w.dormant.Store(true)
	switch err := w.setLeaseExpiry(ctx, 0); {
	case err == nil:
	case errors.Is(err, ErrFenced):
		w.dormant.Store(false)
		w.cancel()
	case errors.Is(err, errLeaseMoved):
		w.dormant.Store(false) // not applied: the lease's slot is served elsewhere now
	default:
		// No answer (a timeout, a lost reply): the lease may have lost its expiry. It
		// stays dormant, so the next event re-arms it first (an idempotent, fenced
		// PEXPIRE); meanwhile the heartbeat does not renew it, so a lease that kept its
		// expiry lapses without an event running, and the re-arm then finds it gone.
	}
}

// rearm gives a dormant lease its expiry back before the worker starts an event: from
// then on the lease is live until it expires, whatever another instance reads of this
// one's session, and the heartbeat renews it. It fails with ErrFenced when another
// instance took the partition meanwhile (it found this instance's session gone).
func (w *worker) rearm() error {
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL/2)
	defer cancel()
	if err := w.setLeaseExpiry(ctx, w.e.cfg.Timing.LeaseTTL); err != nil {
		return err
	}
	w.dormant.Store(false)
	return nil
}
