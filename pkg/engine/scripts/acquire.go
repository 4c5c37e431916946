package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var acquireScript = load("acquire.lua", false)

// AcquireUnit is one unit of an AcquireMany: its keys.
type AcquireUnit struct {
	Lease      string   // the lease key
	Generation string   // the generation counter of the group
	Live       string   // the caller's session key; on Redis Cluster the lease key
	Guards     []string // the unit's guard lease keys (a process manager's streams)
	Lanes      []string // the unit's lane streams
}

// AcquireMany takes the ownership leases of units (acquire.lua), each as if in a call of
// its own: one unit a call on Redis Cluster (the keys of a call must share a slot), many
// on one node.
type AcquireMany struct {
	Units []AcquireUnit
	Owner string // the caller's session owner
	// SessionPrefix is the prefix of every session key (a lease's owner is live while its
	// session key exists).
	SessionPrefix string
	// LeasePX is the lease TTL in ms on Redis Cluster (the lease carries it), 0 on one node.
	LeasePX int64
	// DeadOwners are owners whose session key the caller found gone (Redis Cluster).
	DeadOwners []string
}

// AcquireCode is acquire.lua's answer.
type AcquireCode int64

// The answers of acquire.lua.
const (
	Acquired    AcquireCode = 1  // taken at Generation
	Readopted   AcquireCode = 2  // held by the caller without a worker: taken again, at a new Generation
	HeldByOther AcquireCode = 0  // held by a live owner; Holder is its lease value
	SessionGone AcquireCode = -3 // the caller's own session is gone
	NoLane      AcquireCode = -4 // none of the unit's lanes exists (reaped, or never published)
)

// AcquireReply is acquire.lua's reply.
type AcquireReply struct {
	Code       AcquireCode
	Generation int64  // Acquired, Readopted
	Holder     string // HeldByOther: the lease value
}

// EvalSha queues the call on a pipeline (see RunPipelined).
func (c AcquireMany) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	nkeys := 0
	for _, u := range c.Units {
		nkeys += 3 + len(u.Guards) + len(u.Lanes)
	}
	keys := make([]string, 0, nkeys)
	args := make([]any, 0, 4+len(c.DeadOwners)+2*len(c.Units))
	args = append(args, c.Owner, c.SessionPrefix, c.LeasePX, len(c.DeadOwners))
	for _, o := range c.DeadOwners {
		args = append(args, o)
	}
	for _, u := range c.Units {
		keys = append(keys, u.Lease, u.Generation, u.Live)
		keys = append(append(keys, u.Guards...), u.Lanes...)
		args = append(args, len(u.Guards), len(u.Lanes))
	}
	return acquireScript.EvalSha(ctx, pipe, keys, args...)
}

// ParseAcquireMany reads the reply of a queued call: one reply per unit, in order.
func ParseAcquireMany(cmd *redis.Cmd) ([]AcquireReply, error) {
	if err := cmd.Err(); err != nil {
		return nil, err
	}
	list, ok := cmd.Val().([]any)
	if !ok {
		return nil, replyError("acquire.lua", cmd.Val())
	}
	out := make([]AcquireReply, len(list))
	for i, v := range list {
		code, rest, err := headOf("acquire.lua", v)
		if err != nil {
			return nil, err
		}
		r := AcquireReply{Code: AcquireCode(code)}
		switch r.Code {
		case Acquired, Readopted:
			r.Generation = num(rest, 0)
		case HeldByOther:
			r.Holder = str(rest, 0)
		}
		out[i] = r
	}
	return out, nil
}
