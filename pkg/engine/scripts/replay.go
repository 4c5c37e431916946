package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var replayScript = load("replay.lua", false)

// Replay re-publishes a dead-lettered event at the tail of its lane and removes it from
// the DLQ, in one step (replay.lua).
type Replay struct {
	DLQ, Lane string
	// Index and Control are written on one node for a partitioned lane; IndexedMark is
	// read on Redis Cluster (see Publish).
	Index, Control, IndexedMark string
	Bell                        string
	ID, Key, Category           string
}

// Run calls the script; gone is true when the DLQ entry was not there (nothing
// published).
func (c Replay) Run(ctx context.Context, rdb redis.Scripter) (r PublishReply, gone bool, err error) {
	keys := []string{c.DLQ, c.Lane, c.Lane, c.Lane, c.Bell, c.Lane}
	flags := ""
	switch {
	case c.Index != "":
		flags, keys[2], keys[3] = "i", c.Index, c.Control
	case c.IndexedMark != "":
		flags, keys[5] = "c", c.IndexedMark
	}
	cmd := replayScript.Run(ctx, rdb, keys, c.ID, c.Key, c.Category, flags)
	code, rest, err := head("replay.lua", cmd)
	if err != nil || code != 1 {
		return PublishReply{}, err == nil, err
	}
	return PublishReply{Appended: true, EntryID: str(rest, 0), IndexNeeded: num(rest, 1) == 1}, false, nil
}
