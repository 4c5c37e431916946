package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var retireScript = load("retire.lua", false)

// Retire takes a removed handler's consumer group out of a category on one node
// (retire.lua): its registry entry, its consumer group on every stream and its halt
// records, in one step, compare-and-act on what the operator inspected.
type Retire struct {
	Registry, Index string
	Lanes           []string // the category stream and each partition's lanes
	Leases          []string // the group's lease keys over the category's units
	Halts           []string // the group's halt records to delete
	Group           string
	SessionPrefix   string
	ExpectRead      string // the entries read the operator saw, "" for no check
	Apply           bool   // false: a dry run
	Members         []string
}

// RetireCode is retire.lua's answer.
type RetireCode int64

// The answers of retire.lua.
const (
	Retired          RetireCode = 1
	RetireReadMoved  RetireCode = -4  // the group read since the operator looked
	RetireLeaseHeld  RetireCode = -8  // a lease of the group is held by a live session
	RetireUnknown    RetireCode = -9  // the group is not registered for the category
	RetireIndexMoved RetireCode = -10 // the partition index changed: read it again
)

// RetireReply is retire.lua's reply.
type RetireReply struct {
	Code                 RetireCode
	Read                 int64 // Retired, RetireReadMoved: the group's entries read
	Destroyed, HaltsGone int64 // Retired
	LeaseKey, LeaseValue string
}

// Run calls the script.
func (c Retire) Run(ctx context.Context, rdb redis.Scripter) (RetireReply, error) {
	keys := make([]string, 0, 2+len(c.Lanes)+len(c.Leases)+len(c.Halts))
	keys = append(keys, c.Registry, c.Index)
	keys = append(append(append(keys, c.Lanes...), c.Leases...), c.Halts...)
	mode := "check"
	if c.Apply {
		mode = "apply"
	}
	args := make([]any, 0, 6+len(c.Members))
	args = append(args, c.Group, len(c.Lanes), len(c.Leases), c.SessionPrefix, c.ExpectRead, mode)
	for _, m := range c.Members {
		args = append(args, m)
	}
	cmd := retireScript.Run(ctx, rdb, keys, args...)
	return reply("retire.lua", cmd, func(code int64, rest []any) (RetireReply, error) {
		r := RetireReply{Code: RetireCode(code)}
		switch r.Code {
		case Retired:
			r.Read, r.Destroyed, r.HaltsGone = num(rest, 0), num(rest, 1), num(rest, 2)
		case RetireReadMoved:
			r.Read = num(rest, 0)
		case RetireLeaseHeld:
			r.LeaseKey, r.LeaseValue = str(rest, 0), str(rest, 1)
		}
		return r, nil
	})
}
