package engine

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// unit is one leasable piece of work: a partition of a category for one consumer group.
type unit struct {
	sub   *subscription
	key   string   // partition key, "" for an unpartitioned category
	name  string   // lease unit: the primary stream
	lanes []string // primary lane first
}

func (u unit) id() string { return u.sub.group + "\x00" + u.name }

func (e *Engine) unitFor(s *subscription, key string) unit {
	u := unit{sub: s, key: key}
	if !s.partitioned {
		u.name = CategoryStream(s.category)
		u.lanes = []string{u.name}
		return u
	}
	u.name = PartitionStream(s.category, key)
	u.lanes = []string{u.name}
	if e.dom.LanesEnabled {
		u.lanes = append(u.lanes, LaneStream(s.category, key, e.dom.backfillSuffix()))
	}
	return u
}

// discoveryLoop runs a discovery pass every DiscoveryInterval, and at once when the
// control stream announces a new partition or a released lease.
func (e *Engine) discoveryLoop() {
	defer e.bg.Done()
	t := time.NewTicker(e.cfg.DiscoveryInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stopped:
			return
		case <-e.hardCtx.Done():
			return
		case <-t.C:
		case <-e.discoverNow:
		}
		if err := e.discover(); err != nil && e.hardCtx.Err() == nil && !e.stopping() {
			e.log.Warn("discovery pass failed", "err", err)
		}
	}
}

// discover reads the partition index of every subscribed category and tries to acquire
// each unit that is not owned here and whose last known owner is not alive. Acquire
// attempts are pipelined; a live owner's units cost nothing but the liveness check of
// that owner (one EXISTS per distinct owner).
func (e *Engine) discover() error {
	owner, sctx := e.sess.current()
	if sctx.Err() != nil {
		return nil // session being renewed
	}
	ctx, cancel := context.WithTimeout(e.hardCtx, e.cfg.Timing.LeaseTTL)
	defer cancel()

	pipe := e.rdb.Pipeline()
	members := make([]*redis.StringSliceCmd, len(e.subs))
	for i, s := range e.subs {
		if s.partitioned {
			members[i] = pipe.SMembers(ctx, PartitionIndex(s.category))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return translateRedisErr(err)
	}
	var all []unit
	for i, s := range e.subs {
		if !s.partitioned {
			all = append(all, e.unitFor(s, ""))
			continue
		}
		for _, k := range members[i].Val() {
			if ValidateKey(k, e.dom.backfillSuffix()) != nil {
				continue // not a key the publisher writes; never route to it
			}
			all = append(all, e.unitFor(s, k))
		}
	}

	e.mu.Lock()
	var cands []unit
	foreign := map[string]bool{}
	for _, u := range all {
		if _, mine := e.workers[u.id()]; mine {
			continue
		}
		cands = append(cands, u)
		if lv, ok := e.knownOwner[u.id()]; ok {
			if o := ownerOf(lv); o != "" && o != owner {
				foreign[o] = true
			}
		}
	}
	e.mu.Unlock()
	if len(cands) == 0 {
		return nil
	}

	// Liveness of the known foreign owners: one EXISTS each.
	alive := map[string]bool{}
	if len(foreign) > 0 {
		pipe = e.rdb.Pipeline()
		checks := map[string]*redis.IntCmd{}
		for o := range foreign {
			checks[o] = pipe.Exists(ctx, SessionKey(o))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return translateRedisErr(err)
		}
		for o, c := range checks {
			alive[o] = c.Val() == 1
		}
	}
	e.mu.Lock()
	try := cands[:0]
	for _, u := range cands {
		if lv, ok := e.knownOwner[u.id()]; ok && alive[ownerOf(lv)] {
			continue
		}
		try = append(try, u)
	}
	e.mu.Unlock()
	if len(try) == 0 || e.stopping() {
		return nil
	}

	pipe = e.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(try))
	for i, u := range try {
		keys := []string{LeaseKey(u.name, u.sub.group), GenerationKey(u.sub.group), SessionKey(owner)}
		cmds[i] = scriptAcquire.EvalSha(ctx, pipe, keys, owner, sessionPrefix)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isScriptErrOnly(cmds) {
		return translateRedisErr(err)
	}
	for i, u := range try {
		res, err := cmds[i].Slice()
		if err != nil || len(res) == 0 {
			continue
		}
		code, _ := res[0].(int64)
		switch code {
		case 1, 2:
			gen, _ := res[1].(int64)
			e.startWorker(u, owner, gen, sctx)
		case 0:
			lv, _ := res[1].(string)
			e.mu.Lock()
			e.knownOwner[u.id()] = lv
			e.mu.Unlock()
		case -3:
			go e.sess.lost(owner)
			return nil
		}
	}
	return nil
}

// isScriptErrOnly reports whether every failed command failed with a script error (a
// Redis reply), as opposed to a connection failure.
func isScriptErrOnly(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			var re redis.Error
			if !errors.As(err, &re) {
				return false
			}
		}
	}
	return true
}

// ownerOf returns the owner part of a lease value "{owner}:{generation}".
func ownerOf(lease string) string {
	i := strings.LastIndexByte(lease, ':')
	if i < 0 {
		return ""
	}
	return lease[:i]
}
