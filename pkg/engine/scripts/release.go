package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var releaseScript = load("release.lua", false)

// Release gives a lease back (release.lua): at a graceful shutdown or a hand-over.
type Release struct {
	Lease string
	// Control is the control stream on one node (the release is announced there); on
	// Redis Cluster the lease key again, and the caller announces it.
	Control  string
	Lanes    []string
	Guards   []string
	Token    string // the lease value the caller holds
	Group    string
	Unit     string
	Consumer string
	Announce bool
	// Unstarted are the entries the caller read and never started: each goes back with
	// its delivery count restored.
	Unstarted []Unstarted
}

// Unstarted is an entry read and never started, with the delivery count to give it (the
// count before the read), or for giveback.lua the count the read gave it.
type Unstarted struct {
	Lane       int // 0-based lane index
	ID         string
	Deliveries int
}

// Run calls the script; released is false when the lease was not the caller's any more
// (nothing changed).
func (c Release) Run(ctx context.Context, rdb redis.Scripter) (released bool, err error) {
	keys := make([]string, 0, 2+len(c.Lanes)+len(c.Guards))
	keys = append(append(append(keys, c.Lease, c.Control), c.Lanes...), c.Guards...)
	announce := "0"
	if c.Announce {
		announce = "1"
	}
	args := []any{c.Token, c.Group, c.Unit, c.Consumer, len(c.Guards), announce}
	for _, u := range c.Unstarted {
		args = append(args, u.Lane+1, u.ID, u.Deliveries)
	}
	n, err := releaseScript.Run(ctx, rdb, keys, args...).Int64()
	return n == 1, err
}
