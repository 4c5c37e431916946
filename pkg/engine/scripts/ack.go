package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var ackScript = load("ack.lua", false)

// Ack acknowledges handled entries of one lane, fenced (ack.lua).
type Ack struct {
	Lease, Live, Lane string
	Token, Group      string
	IDs               []string
}

// Run calls the script; fenced is true when the lease was not the caller's (nothing was
// acknowledged).
func (c Ack) Run(ctx context.Context, rdb redis.Scripter) (acked int64, fenced bool, err error) {
	args := make([]any, 0, 2+len(c.IDs))
	args = append(args, c.Token, c.Group)
	for _, id := range c.IDs {
		args = append(args, id)
	}
	n, err := ackScript.Run(ctx, rdb, []string{c.Lease, c.Live, c.Lane}, args...).Int64()
	if err != nil {
		return 0, false, err
	}
	return max(n, 0), n == AckFenced, nil
}

// AckFenced is the count ack.lua, ackmany.lua and acknode.lua give a lane whose lease is
// not the caller's; AckNotServed the one acknode.lua gives a lane of another node.
const (
	AckFenced    = -1
	AckNotServed = -2
)

// AckLane is one lane's acknowledgements in an ackmany.lua or acknode.lua call.
type AckLane struct {
	Lease, Stream, Token, Group string
	IDs                         []string
}

// args appends the lane's count and ids.
func (l AckLane) ids(args []any) []any {
	args = append(args, len(l.IDs))
	for _, id := range l.IDs {
		args = append(args, id)
	}
	return args
}
