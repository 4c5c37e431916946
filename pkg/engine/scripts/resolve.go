package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var resolveScript = load("resolve.lua", false)

// Resolve is an operator's compare-and-act on a partition's head (resolve.lua): skip it,
// move it to the DLQ, or retry it.
type Resolve struct {
	Halt, Lane, DLQ, Lease string
	Action                 string // "skip", "dlq" or "retry"
	Group                  string
	Expect                 string // the head entry id the operator inspected
	Force                  bool   // act on a head that is not halted
	// WakePrefix is the wake streams' prefix on one node (the script wakes the owner);
	// "" on Redis Cluster.
	WakePrefix string
	Extra      []string // DLQ fields (pairs)
}

// ResolveCode is resolve.lua's answer.
type ResolveCode int64

// The answers of resolve.lua.
const (
	Resolved       ResolveCode = 1
	ResolveMoved   ResolveCode = -4 // the head is not the expected entry
	ResolveNotHalt ResolveCode = -5 // the head is not halted and Force was not given
	ResolveGone    ResolveCode = -6 // the entry is no longer in the stream
)

// ResolveReply is resolve.lua's reply.
type ResolveReply struct {
	Code  ResolveCode
	Head  string // Resolved: the entry acted on; ResolveMoved, ResolveNotHalt: the head
	Lease string // Resolved: the unit's lease value ("" when none)
}

// Run calls the script.
func (c Resolve) Run(ctx context.Context, rdb redis.Scripter) (ResolveReply, error) {
	force := ""
	if c.Force {
		force = "force"
	}
	args := []any{c.Action, c.Group, c.Expect, force, c.WakePrefix}
	for _, x := range c.Extra {
		args = append(args, x)
	}
	if len(c.Extra)%2 == 1 {
		args = append(args, "")
	}
	cmd := resolveScript.Run(ctx, rdb, []string{c.Halt, c.Lane, c.DLQ, c.Lease}, args...)
	return reply("resolve.lua", cmd, func(code int64, rest []any) (ResolveReply, error) {
		return ResolveReply{Code: ResolveCode(code), Head: str(rest, 0), Lease: str(rest, 1)}, nil
	})
}
