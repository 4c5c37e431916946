package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var ackManyScript = load("ackmany.lua", false)

// AckMany acknowledges handled entries of many lanes of one instance in one call, each
// lane fenced by its own lease (ackmany.lua).
type AckMany struct {
	Session string // the caller's session key
	Lanes   []AckLane
}

// EvalSha queues the call on a pipeline (see RunPipelined).
func (c AckMany) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	keys := make([]string, 0, 1+2*len(c.Lanes))
	keys = append(keys, c.Session)
	var args []any
	for _, l := range c.Lanes {
		keys = append(keys, l.Lease, l.Stream)
		args = l.ids(append(args, l.Token, l.Group))
	}
	return ackManyScript.EvalSha(ctx, pipe, keys, args...)
}

// ParseAckMany reads the reply of a queued call: sessionGone when the caller's session
// is gone (nothing acknowledged), else one count per lane, AckFenced for a lane whose
// lease is not the caller's.
func ParseAckMany(cmd *redis.Cmd) (counts []int64, sessionGone bool, err error) {
	res, err := ints("ackmany.lua", cmd)
	if err != nil {
		return nil, false, err
	}
	if len(res) == 1 && res[0] == -3 {
		return nil, true, nil
	}
	return res, false, nil
}
