package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var acquireScript = load("acquire.lua", false)

// Acquire takes the ownership lease of one unit for one consumer group (acquire.lua).
type Acquire struct {
	Lease      string   // the lease key
	Generation string   // the generation counter of the group
	Live       string   // the caller's session key; on Redis Cluster the lease key
	Guards     []string // the unit's guard lease keys (a process manager's streams)
	Lanes      []string // the unit's lane streams
	Owner      string   // the caller's session owner
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
func (c Acquire) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	keys := make([]string, 0, 3+len(c.Guards)+len(c.Lanes))
	keys = append(keys, c.Lease, c.Generation, c.Live)
	keys = append(append(keys, c.Guards...), c.Lanes...)
	args := make([]any, 0, 4+len(c.DeadOwners))
	args = append(args, c.Owner, c.SessionPrefix, len(c.Guards), c.LeasePX)
	for _, o := range c.DeadOwners {
		args = append(args, o)
	}
	return acquireScript.EvalSha(ctx, pipe, keys, args...)
}

// ParseAcquire reads the reply of a queued call.
func ParseAcquire(cmd *redis.Cmd) (AcquireReply, error) {
	return reply("acquire.lua", cmd, func(code int64, rest []any) (AcquireReply, error) {
		r := AcquireReply{Code: AcquireCode(code)}
		switch r.Code {
		case Acquired, Readopted:
			r.Generation = num(rest, 0)
		case HeldByOther:
			r.Holder = str(rest, 0)
		}
		return r, nil
	})
}
