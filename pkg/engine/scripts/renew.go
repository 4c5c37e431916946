package scripts

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var renewScript = load("renew.lua", true)

// Renew renews, on Redis Cluster, leases of one node in one call, each only while it
// holds its token (renew.lua); TTLMS 0 makes them dormant (no expiry).
type Renew struct {
	TTLMS  int64
	Leases []HeldLease // the first one's key routes the call
}

// HeldLease is a lease (or guard) key and the token it must hold.
type HeldLease struct{ Key, Token string }

// The answers of renew.lua, one per lease.
const (
	Renewed    = 1  // renewed (or made dormant)
	RenewLost  = 0  // the key no longer holds the token: nothing changed
	RenewMoved = -1 // the node does not serve the key's slot: nothing changed
)

func (c Renew) args() []any {
	args := make([]any, 0, 1+2*len(c.Leases))
	args = append(args, strconv.FormatInt(c.TTLMS, 10))
	for _, l := range c.Leases {
		args = append(args, l.Key, l.Token)
	}
	return args
}

// Run calls the script and returns one answer per lease.
func (c Renew) Run(ctx context.Context, rdb redis.Scripter) ([]int64, error) {
	return renewScript.Run(ctx, rdb, []string{c.Leases[0].Key}, c.args()...).Int64Slice()
}

// EvalSha queues the call on a pipeline (see RunPipelined).
func (c Renew) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	return renewScript.EvalSha(ctx, pipe, []string{c.Leases[0].Key}, c.args()...)
}

// ParseRenew reads the reply of a queued call: one answer per lease.
func ParseRenew(cmd *redis.Cmd) ([]int64, error) {
	return ints("renew.lua", cmd)
}
