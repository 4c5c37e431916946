package scripts

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	stateIndexScript = load("stateindex.lua", false)
	statePruneScript = load("stateprune.lua", false)
)

// StateIndexGrace is how long a state index member stays after a reader found its record
// missing: longer than any writer takes between adding the member and writing the record
// (the halt and pause calls are bounded by the lease TTL and the operator's timeout).
const StateIndexGrace = 10 * time.Minute

// StateIndex adds a unit to a category's index of halted or paused units
// (stateindex.lua), before the record is written.
type StateIndex struct {
	Index, Member string
}

// Run calls the script.
func (c StateIndex) Run(ctx context.Context, rdb redis.Scripter) error {
	return stateIndexScript.Run(ctx, rdb, []string{c.Index}, c.Member).Err()
}

// StatePrune removes the members of a state index whose record a reader found missing
// and that are older than Grace (stateprune.lua).
type StatePrune struct {
	Index   string
	Grace   time.Duration // StateIndexGrace when zero
	Members []string
}

// Run calls the script; removed is how many members went.
func (c StatePrune) Run(ctx context.Context, rdb redis.Scripter) (removed int64, err error) {
	if len(c.Members) == 0 {
		return 0, nil
	}
	grace := c.Grace
	if grace == 0 {
		grace = StateIndexGrace
	}
	args := make([]any, 0, len(c.Members)+1)
	args = append(args, grace.Milliseconds())
	for _, m := range c.Members {
		args = append(args, m)
	}
	return statePruneScript.Run(ctx, rdb, []string{c.Index}, args...).Int64()
}
