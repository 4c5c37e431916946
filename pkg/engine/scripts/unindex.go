package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var unindexScript = load("unindex.lua", false)

// Unindex removes a reaped partition's key from its category's index on Redis Cluster,
// only if the index still holds the value the reaper read (unindex.lua).
type Unindex struct {
	Index, Key, Value string
}

// Run calls the script; removed is false when the value changed (a publish re-indexed
// the key).
func (c Unindex) Run(ctx context.Context, rdb redis.Scripter) (removed bool, err error) {
	n, err := unindexScript.Run(ctx, rdb, []string{c.Index}, c.Key, c.Value).Int64()
	return n == 1, err
}
