package engine

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// untilReap returns how long the partition must stay idle before a reap is tried (0: no
// reaping, for an unpartitioned category stream).
func (w *worker) untilReap(lastIDs []keyspace.StreamID) time.Duration {
	if !w.sub.partitioned {
		return 0
	}
	if w.reapAt.IsZero() {
		var last int64
		for _, id := range lastIDs {
			last = max(last, int64(id.MS))
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
	k := w.e.keys
	if w.applyAcks(); len(w.unacked) > 0 {
		// Acknowledgements the acker has not confirmed yet (it retries them while Redis
		// does not answer): a unit with pending entries is not reapable.
		w.reapAt = time.Now().Add(w.e.cfg.Timing.PollInterval * 4)
		return
	}
	if k.IsCluster() {
		defer w.e.reapStep("done", w.u.name)
	}
	c := scripts.Reap{
		Lease: w.leaseKey, Live: w.liveKey, Halt: w.haltKey, Lanes: w.lanes,
		Generation: k.GenerationKey(w.u.name, w.sub.group), Control: k.ControlStream(), Guards: w.u.guards,
		Token: w.token, IdleMS: w.e.cfg.Timing.ReapIdle.Milliseconds(), Key: w.u.key, Categories: w.u.laneCats,
		Cluster: k.IsCluster(),
	}
	c.PMPause[0], c.PMPause[1] = k.PMPauseForm(w.u.key)
	for _, cat := range w.u.laneCats {
		c.PausePrefixes = append(c.PausePrefixes, k.PausePrefix(k.PartitionStream(cat, w.u.key)))
		if c.Cluster {
			c.Indexes = append(c.Indexes, k.IndexedMarkKey(k.PartitionStream(cat, w.u.key)))
		} else {
			c.Indexes = append(c.Indexes, k.PartitionIndex(cat))
			c.Registries = append(c.Registries, k.GroupRegistry(cat))
		}
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	var vers map[string]string
	var err error
	c.RegistryNames, err = w.e.registryNames(ctx, w.u.laneCats)
	if err == nil && c.Cluster {
		vers, err = w.e.indexVersions(ctx, w.u.laneCats, w.u.key)
		if err == nil && !w.e.reapStep("read-index", w.u.name) {
			w.reapAt = time.Now().Add(w.e.cfg.Timing.ReapIdle)
			return
		}
	}
	var res scripts.ReapReply
	if err == nil {
		res, err = c.Run(ctx, w.e.rdb)
	}
	if err != nil {
		w.reapAt = time.Now().Add(w.e.cfg.Timing.PollInterval * 4)
		w.e.logs.warn("reap:"+errorCause(translateRedisErr(err)), "reap failed; tried again later", "group", w.sub.group, "unit", w.u.name, "err", translateRedisErr(err))
		return
	}
	switch res.Code {
	case scripts.Reaped:
		w.reaped = true
		if c.Cluster && w.e.reapStep("reaped", w.u.name) {
			w.e.unindex(ctx, vers, w.u.key)
		}
		w.e.log.Info("cold partition reaped", "group", w.sub.group, "unit", w.u.name)
	case scripts.ReapUnindexed:
		// A publisher stopped between its append and the index write: index the
		// partition on its behalf, then try again.
		for i, l := range w.lanes {
			if l == res.Lane {
				if err := indexPartition(ctx, w.e.rdb, k, w.u.laneCats[i], w.u.key, l, "reaper", nil); err != nil {
					w.e.log.Warn("cannot index a partition whose publisher stopped early", "unit", w.u.name, "err", err)
				}
			}
		}
		w.reapAt = time.Now().Add(w.e.cfg.Timing.PollInterval)
	case scripts.ReapNotIdle:
		w.reapAt = time.Now().Add(time.Duration(res.WaitMS) * time.Millisecond)
	case scripts.ReapFenced:
		w.cancel()
	default:
		w.e.log.Debug("partition not reapable yet", "group", w.sub.group, "unit", w.u.name, "reason", res.Reason)
		w.reapAt = time.Now().Add(w.e.cfg.Timing.ReapIdle)
	}
}

// trim drops the acknowledged prefix of the lanes and old consumers (trim.lua).
func (w *worker) trim() {
	c := scripts.Trim{Lease: w.leaseKey, Live: w.liveKey, Lanes: w.lanes, Token: w.token,
		Group: w.sub.group, Consumer: w.consumer, Cluster: w.e.keys.IsCluster()}
	if !c.Cluster {
		for _, cat := range w.u.laneCats {
			c.Registries = append(c.Registries, w.e.keys.GroupRegistry(cat))
		}
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	var fenced bool
	var err error
	if c.Cluster {
		c.RegistryNames, err = w.e.registryNames(ctx, w.u.laneCats)
	}
	if err == nil {
		_, _, fenced, err = c.Run(ctx, w.e.rdb)
	}
	w.sinceTrim = 0
	if err != nil {
		w.e.logs.warn("trim:"+errorCause(translateRedisErr(err)), "trim failed; tried again later", "group", w.sub.group, "unit", w.u.name, "err", translateRedisErr(err))
		return
	}
	if fenced {
		w.cancel()
		return
	}
	w.trimmed = true
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

// registryNames reads the group registry of each lane's category: for reap.lua, which
// takes the pause keys of every registered group through KEYS (on one node it checks the
// read against the registry), and for trim.lua on Redis Cluster, where no script can read
// a registry.
func (e *Engine) registryNames(ctx context.Context, cats []string) ([][]string, error) {
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
	out := make([][]string, 0, len(cats))
	for _, c := range cats {
		out = append(out, cmds[c].Val())
	}
	return out, nil
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
		removed, err := scripts.Unindex{Index: e.keys.PartitionIndex(c), Key: key, Value: v}.Run(ctx, e.rdb)
		if err != nil {
			e.logs.warn("unindex", "reaped partition left in the index; it costs nothing but a failed lease attempt", "category", c, "key", key, "err", translateRedisErr(err))
			continue
		}
		if removed {
			_ = announce(ctx, e.rdb, e.keys, keyspace.Notice{Op: keyspace.NoticeReaped, Category: c, Key: key})
		}
	}
}
