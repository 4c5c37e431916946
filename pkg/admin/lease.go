package admin

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Every view that says whether a lease is live reads it with queueLease and the PTTL of
// its owner's session key (SessionKey), and decides with leaseLife, which applies the
// engine's rule (keyspace.Keys.LeaseLife).

// leaseCmds are the replies of the reads of one lease key.
type leaseCmds struct {
	value *redis.StringCmd
	ttl   *redis.DurationCmd // its expiry; read on Redis Cluster only, where it counts
}

// queueLease queues the reads of a lease key: its value and, on Redis Cluster, its
// expiry (PTTL, in the same slot).
func (a *Admin) queueLease(ctx context.Context, pipe redis.Pipeliner, key string) leaseCmds {
	c := leaseCmds{value: pipe.Get(ctx, key)}
	if a.keys.IsCluster() {
		c.ttl = pipe.PTTL(ctx, key)
	}
	return c
}

// exists reports whether the lease key was read with a value.
func (c leaseCmds) exists() bool { return c.value != nil && c.value.Err() == nil }

// owner is the owner the lease names, "" when there is none (no key, or a value that is
// not a lease's): whose session to read.
func (c leaseCmds) owner() string {
	if !c.exists() {
		return ""
	}
	l, _ := keyspace.ParseLease(c.value.Val())
	return l.Owner
}

// leaseLife decides whether the lease is live from its replies and the PTTL reply of its
// owner's session key (nil when not read: the session counts as gone).
func (a *Admin) leaseLife(c leaseCmds, session *redis.DurationCmd) keyspace.LeaseLife {
	r := keyspace.LeaseReading{TTL: keyspace.TTLNoExpiry, SessionTTL: keyspace.TTLMissing}
	if !c.exists() {
		return keyspace.LeaseLife{}
	}
	r.Value = c.value.Val()
	if c.ttl != nil && c.ttl.Err() == nil {
		r.TTL = c.ttl.Val()
	}
	if session != nil && session.Err() == nil {
		r.SessionTTL = session.Val()
	}
	return a.keys.LeaseLife(r)
}
