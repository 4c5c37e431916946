package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster support of the engine. On a single node one session key per instance
// carries every lease, and the fenced scripts read it; on Redis Cluster no script may read
// a key in another slot, so each lease carries its own PX expiry (the lease TTL), the
// scripts take the lease itself as the liveness key, the heartbeat renews the leases of
// each node in one call (renew.lua), and what a single-node script writes in other slots
// (the category index, the control and wake streams) is written by the caller after the
// script, in the order docs/concepts.md states.

// liveKey returns the key the fenced scripts check for the owner's liveness: its session
// key on a single node, the unit's lease (given) on Redis Cluster.
func (e *Engine) liveKey(owner, lease string) string {
	if e.keys.cluster {
		return lease
	}
	return e.keys.SessionKey(owner)
}

// masterAddr returns the address of the master that serves key's slot on Redis Cluster,
// the key that decides where a call over several slots of one node runs.
func masterAddr(ctx context.Context, cc *redis.ClusterClient, key string) (string, error) {
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	return node.Options().Addr, nil
}

// leasePX is acquire.lua's ARGV[4]: the lease TTL in ms on Redis Cluster, 0 on one node.
func (e *Engine) leasePX() int64 {
	if e.keys.cluster {
		return e.cfg.Timing.LeaseTTL.Milliseconds()
	}
	return 0
}

// releaseLease gives a unit's lease back (release.lua), handing back the unstarted
// entries given as (lane index, entry id, delivery count) triples, and announces the
// release on the control stream (in the script on one node, after it on Redis Cluster).
func (e *Engine) releaseLease(ctx context.Context, u unit, token, consumer string, unstarted ...any) error {
	k := e.keys
	lease := k.LeaseKey(u.name, u.sub.group)
	ctrl, announce := k.ControlStream(), "1"
	if k.cluster {
		ctrl, announce = lease, "0"
	}
	keys := append(append([]string{lease, ctrl}, u.lanes...), u.guards...)
	args := append([]any{token, u.sub.group, u.name, consumer, len(u.guards), announce}, unstarted...)
	n, err := scriptRelease.Run(ctx, e.rdb, keys, args...).Int64()
	if err != nil {
		return translateRedisErr(err)
	}
	if n == 1 && k.cluster {
		_ = e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.ControlStream(), MaxLen: 1000, Approx: true,
			Values: []any{"op", "released", "group", u.sub.group, "unit", u.name}}).Err()
	}
	return codeErr(n)
}

// reapStep runs the test hook between the steps of a reap of unit on Redis Cluster
// ("read-index", "reaped", and "done" at the end of every attempt); false stops the reap
// there, as a crash would.
func (e *Engine) reapStep(step, unit string) bool {
	if f := e.reapHook.Load(); f != nil {
		return (*f)(step, unit)
	}
	return true
}

// registryArgs reads, on Redis Cluster, the group registry of each lane's category and
// returns the ARGV tail reap.lua and trim.lua take there: for each lane, m then m names.
// On one node the scripts read the registries themselves: nil.
func (e *Engine) registryArgs(ctx context.Context, cats []string) ([]any, error) {
	if !e.keys.cluster {
		return nil, nil
	}
	pipe := e.rdb.Pipeline()
	cmds := map[string]*redis.StringSliceCmd{}
	for _, c := range cats {
		if cmds[c] == nil {
			cmds[c] = pipe.SMembers(ctx, e.keys.GroupRegistry(c))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, translateRedisErr(err)
	}
	var args []any
	for _, c := range cats {
		names := cmds[c].Val()
		args = append(args, len(names))
		for _, n := range names {
			args = append(args, n)
		}
	}
	return args, nil
}

// indexVersions reads, on Redis Cluster, the index value of a partition key in each
// category, before a reap: unindex.lua removes the key only if it is unchanged.
func (e *Engine) indexVersions(ctx context.Context, cats []string, key string) (map[string]string, error) {
	pipe := e.rdb.Pipeline()
	cmds := map[string]*redis.StringCmd{}
	for _, c := range cats {
		if cmds[c] == nil {
			cmds[c] = pipe.HGet(ctx, e.keys.PartitionIndex(c), key)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, translateRedisErr(err)
	}
	out := map[string]string{}
	for c, cmd := range cmds {
		out[c] = cmd.Val()
	}
	return out, nil
}

// unindex removes a reaped partition key from each category's index when the value is
// still the one read before the reap (unindex.lua), and announces each removal on the
// control stream (op=reaped), so that every instance drops the key from its view. A
// failure leaves the key indexed: discovery finds no lane to lease (acquire.lua returns
// -4) and drops it from its view, and the next reap of the key, if it comes back,
// removes it.
func (e *Engine) unindex(ctx context.Context, vers map[string]string, key string) {
	for c, v := range vers {
		if v == "" {
			continue
		}
		n, err := scriptUnindex.Run(ctx, e.rdb, []string{e.keys.PartitionIndex(c)}, key, v).Int64()
		if err != nil {
			e.logs.warn("unindex", "reaped partition left in the index; it costs nothing but a failed lease attempt", "category", c, "key", key, "err", translateRedisErr(err))
			continue
		}
		if n == 1 {
			_ = e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.ControlStream(), MaxLen: 1000, Approx: true,
				Values: []any{"op", "reaped", "category", c, "key", key}}).Err()
		}
	}
}

// chunkGroups cuts each group into chunks of at most n, for one call per chunk (of the
// keys of one node).
func chunkGroups[T any](groups map[string][]T, n int) [][]T {
	var out [][]T
	for _, g := range groups {
		for len(g) > 0 {
			k := min(len(g), n)
			out = append(out, g[:k])
			g = g[k:]
		}
	}
	return out
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
	type held struct {
		w   *worker
		key string
	}
	var all []held
	var sleepy []*worker
	idleFor := time.Now().Add(-e.dormantAfter()).UnixNano()
	e.mu.Lock()
	for _, w := range e.workers {
		if w.inc != in || w.dormant.Load() {
			continue // a dormant lease has no expiry
		}
		if w.parked.Load() && w.idle.Load() && w.parkedAt.Load() < idleFor {
			// Idle for a lease TTL: renewed this time, then asked to go dormant. The ask
			// comes after the renewal's reply, so the renewal never lands after the
			// dormancy it precedes.
			sleepy = append(sleepy, w)
		}
		all = append(all, held{w, w.leaseKey})
		for _, g := range w.u.guards {
			all = append(all, held{w, g})
		}
	}
	e.mu.Unlock()
	defer func() {
		for _, w := range sleepy {
			if w.ctx.Err() == nil && !w.toSleep.Swap(true) {
				w.poke()
			}
		}
	}()
	byNode := map[string][]held{}
	for _, h := range all {
		addr, _ := masterAddr(ctx, cc, h.key) // "" when unknown: renewed with the others of ""
		byNode[addr] = append(byNode[addr], h)
	}
	// One call per renewBatch leases of a node, all in one pipeline: a call over every
	// lease of a node would hold that master for milliseconds at 10,000 partitions.
	chunks := chunkGroups(byNode, renewBatch)
	ttl := strconv.FormatInt(e.cfg.Timing.LeaseTTL.Milliseconds(), 10)
	call := func(pipe redis.Pipeliner, hs []held) *redis.Cmd {
		args := []any{ttl}
		for _, h := range hs {
			args = append(args, h.key, h.w.token)
		}
		return scriptRenew.EvalSha(ctx, pipe, []string{hs[0].key}, args...)
	}
	answered := true
	var moved []held
	cmds, err := runPipelined(ctx, rdb, len(chunks), func(pipe redis.Pipeliner, i int) *redis.Cmd { return call(pipe, chunks[i]) })
	for i, hs := range chunks {
		var res []int64
		if err == nil {
			res, _ = cmds[i].Int64Slice()
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
			case 0:
				h.w.cancel() // the lease is not ours any more: stop touching the partition
			case -1:
				moved = append(moved, h) // its slot moved: renew it where it is now
			}
		}
	}
	if len(moved) > 0 {
		cmds, err := runPipelined(ctx, rdb, len(moved), func(pipe redis.Pipeliner, i int) *redis.Cmd { return call(pipe, moved[i:i+1]) })
		for i, h := range moved {
			var res []int64
			if err == nil {
				res, _ = cmds[i].Int64Slice()
			}
			switch {
			case len(res) != 1 || res[0] == -1:
				answered = false
			case res[0] == 0:
				h.w.cancel()
			}
		}
	}
	return answered
}

// IndexMembers queues the read of a category's indexed partition keys: SMEMBERS of the
// set on one node, HKEYS of the hash on Redis Cluster (see Keys.PartitionIndex).
func (k Keys) IndexMembers(ctx context.Context, c redis.Cmdable, category string) *redis.StringSliceCmd {
	if k.cluster {
		return c.HKeys(ctx, k.PartitionIndex(category))
	}
	return c.SMembers(ctx, k.PartitionIndex(category))
}

// IndexSize queues the read of the number of members of a category's index: SCARD, or
// HLEN on Redis Cluster (where it is a hash).
func (k Keys) IndexSize(ctx context.Context, c redis.Cmdable, category string) *redis.IntCmd {
	if k.cluster {
		return c.HLen(ctx, k.PartitionIndex(category))
	}
	return c.SCard(ctx, k.PartitionIndex(category))
}

// dormantAfter is how long a partition stays idle on Redis Cluster before its lease goes
// dormant: one lease TTL.
func (e *Engine) dormantAfter() time.Duration { return e.cfg.Timing.LeaseTTL }

// errLeaseMoved says a lease's slot was not served where renew.lua ran (a slot moving).
var errLeaseMoved = errors.New("engine: the lease's slot is moving; tried again")

// setLeaseExpiry runs renew.lua over the worker's lease and guards (one slot): ttlMS "0"
// makes them dormant, a TTL re-arms them. ErrFenced: the lease is not the worker's.
func (w *worker) setLeaseExpiry(ctx context.Context, ttlMS string) error {
	args := []any{ttlMS, w.leaseKey, w.token}
	for _, g := range w.u.guards {
		args = append(args, g, w.token)
	}
	res, err := scriptRenew.Run(ctx, w.e.rdb, []string{w.leaseKey}, args...).Int64Slice()
	if err != nil {
		return translateRedisErr(err)
	}
	for _, r := range res {
		switch r {
		case 0:
			return ErrFenced
		case -1:
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
	switch err := w.setLeaseExpiry(ctx, "0"); {
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
	if err := w.setLeaseExpiry(ctx, strconv.FormatInt(w.e.cfg.Timing.LeaseTTL.Milliseconds(), 10)); err != nil {
		return err
	}
	w.dormant.Store(false)
	return nil
}
