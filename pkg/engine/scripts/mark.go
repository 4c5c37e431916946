package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var markScript = load("mark.lua", false)

// Mark sets a partition's indexed mark on Redis Cluster while the lane the publisher
// appended to exists (mark.lua), the last step of a publish there.
type Mark struct {
	Mark, Lane string
}

// Run calls the script; marked is false when the lane is gone (a reap came between).
func (c Mark) Run(ctx context.Context, rdb redis.Scripter) (marked bool, err error) {
	n, err := markScript.Run(ctx, rdb, []string{c.Mark, c.Lane}).Int64()
	return n == 1, err
}
