package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var ackNodeScript = load("acknode.lua", true)

// AckNode acknowledges, on Redis Cluster, handled entries of the lanes of one node in one
// call (acknode.lua); a lane whose slot the node does not serve is left alone.
type AckNode struct {
	Lanes []AckLane // the first lane's lease key routes the call
}

// EvalSha queues the call on a pipeline (see RunPipelined).
func (c AckNode) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	var args []any
	for _, l := range c.Lanes {
		args = l.ids(append(args, l.Lease, l.Stream, l.Token, l.Group))
	}
	return ackNodeScript.EvalSha(ctx, pipe, []string{c.Lanes[0].Lease}, args...)
}

// ParseAckNode reads the reply of a queued call: one count per lane, AckFenced or
// AckNotServed where nothing was done.
func ParseAckNode(cmd *redis.Cmd) ([]int64, error) {
	return ints("acknode.lua", cmd)
}
