package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Which other instances live, as discovery needs it: the owners whose leases it must
// leave alone, and how many instances share the partitions. It is read from Redis only
// when what was read before may have changed, so that a settled instance costs a pass
// nothing but the size check of the indexes.
//
//   - A session key read with PTTL p when the read was sent at t exists until t + p at
//     least: it is renewed, or it expires then (a crashed instance), or its instance
//     deletes it when it stops, after giving its leases back (each release is a notice
//     that makes the unit a candidate at once). So an owner seen alive is read again only
//     once its session may have expired; one seen dead stays dead (a new incarnation has
//     a new owner name).
//   - The instance registry is read again when an instance announced itself (it opens
//     a session), when a lease was given back (an instance stopping or handing over),
//     when a registered instance's session was found gone, and every registryEvery
//     passes in case a notice was lost.
//
// Both are forgotten when Redis may have lost them: when this instance opens a session
// (its previous one was lost: a restart without persistence, a failover) and after a
// pass that failed.
type liveCache struct {
	mu sync.Mutex
	// until: owner -> the time until which its session lives at least; the zero time for
	// an owner found without a session. Guarded by mu.
	until map[string]time.Time
	// registry is the last read of the instance registry (field -> entry), nil when a
	// read is due; passes counts the passes since. Guarded by mu.
	registry map[string]string
	passes   int
}

// registryEvery is how many discovery passes may use one read of the instance registry
// when no notice asked for another (10 s at the default 2 s interval): how late an
// instance that joined without its notice reaching this one is counted.
const registryEvery = 5

// liveCacheLimit bounds the remembered owners; past it they are forgotten and read again.
const liveCacheLimit = 10_000

// forget drops what the cache knows.
func (c *liveCache) forget() {
	c.mu.Lock()
	c.until, c.registry = nil, nil
	c.mu.Unlock()
}

// registryDue asks for a read of the instance registry at the next pass.
func (c *liveCache) registryDue() {
	c.mu.Lock()
	c.registry = nil
	c.mu.Unlock()
}

// cachedRegistry returns the registry to use in this pass, nil when it must be read.
func (c *liveCache) cachedRegistry() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.registry == nil || c.passes >= registryEvery {
		c.registry = nil
		return nil
	}
	c.passes++
	return c.registry
}

// keepRegistry remembers a read of the registry.
func (c *liveCache) keepRegistry(r map[string]string) {
	c.mu.Lock()
	c.registry, c.passes = r, 1
	c.mu.Unlock()
}

// sessionsAlive fills alive for owners (owner -> alive), reading with PTTL only the
// sessions the cache cannot answer for. A registered instance found gone makes the
// registry due. One PTTL per owner read, in one pipeline.
func (e *Engine) sessionsAlive(ctx context.Context, owners map[string]bool, alive map[string]bool) error {
	c := &e.lives
	now := time.Now()
	var check []string
	c.mu.Lock()
	for o := range owners {
		if t, ok := c.until[o]; ok && (t.IsZero() || now.Before(t)) {
			alive[o] = !t.IsZero()
			continue
		}
		check = append(check, o)
	}
	c.mu.Unlock()
	if len(check) == 0 {
		return nil
	}
	sent := time.Now()
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.DurationCmd, len(check))
	for i, o := range check {
		cmds[i] = pipe.PTTL(ctx, e.keys.SessionKey(o))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return translateRedisErr(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil || len(c.until) >= liveCacheLimit {
		c.until = map[string]time.Time{}
	}
	for i, o := range check {
		switch ttl := cmds[i].Val(); {
		case ttl == keyspace.TTLMissing:
			alive[o], c.until[o] = false, time.Time{}
			c.registry = nil // an instance may have gone
		case ttl == keyspace.TTLNoExpiry:
			// seqctl never writes one; live, read again next interval
			alive[o], c.until[o] = true, sent.Add(e.cfg.DiscoveryInterval)
		default:
			alive[o], c.until[o] = true, sent.Add(ttl)
		}
	}
	return nil
}

// fleet is what a discovery pass knows of the live instances: how many there are (at
// least 1: this one) and this instance's rank among their registry fields in sorted
// order (-1 when it is not registered yet), which splits fresh partitions between them
// (see prefers).
type fleet struct {
	n, rank int
}

// liveness checks the sessions of the registered instances and of the known foreign
// owners of units (at most one PTTL per distinct owner, never one per partition, see
// sessionsAlive), prunes long-dead registry entries, and returns which owners are alive
// and the live fleet.
func (e *Engine) liveness(ctx context.Context, instances map[string]string, owner string) (map[string]bool, fleet, error) {
	e.mu.Lock()
	owners := map[string]bool{}
	for _, lv := range e.knownOwner { // only units of the view (forgetGoneUnits)
		if o := ownerOf(lv); o != "" && o != owner {
			owners[o] = true
		}
	}
	e.mu.Unlock()
	registered := map[string]string{} // registry field -> session owner
	for id, raw := range instances {
		if info, err := keyspace.DecodeInstance(raw); err == nil && info.Owner != "" {
			registered[id] = info.Owner
			if info.Owner != owner {
				owners[info.Owner] = true
			}
		}
	}
	alive := map[string]bool{owner: true}
	if err := e.sessionsAlive(ctx, owners, alive); err != nil {
		return nil, fleet{}, err
	}
	var live []string
	for id, o := range registered {
		if alive[o] || id == e.regID {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	e.pruneInstances(ctx, registered, alive)
	return alive, fleet{n: max(len(live), 1), rank: slices.Index(live, e.regID)}, nil
}

// pruneInstances removes registry entries of instances whose session is gone and whose
// last heartbeat is older than ten lease TTLs.
func (e *Engine) pruneInstances(ctx context.Context, registered map[string]string, alive map[string]bool) {
	// Only the stale entries' heartbeat needs reading; they are rare.
	for id, o := range registered {
		if alive[o] || id == e.regID {
			continue
		}
		raw, err := e.rdb.HGet(ctx, e.keys.InstancesKey(), id).Result()
		if err != nil {
			continue
		}
		info, err := keyspace.DecodeInstance(raw)
		if err != nil {
			continue
		}
		if time.Since(time.UnixMilli(info.HeartbeatMS)) > 10*e.cfg.Timing.LeaseTTL {
			e.rdb.HDel(ctx, e.keys.InstancesKey(), id)
		}
	}
}
