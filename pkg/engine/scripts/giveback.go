package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var giveBackScript = load("giveback.lua", false)

// GiveBack gives the entries an owner read and never started their delivery count back,
// when it stops without releasing its lease (giveback.lua; no lease needed).
type GiveBack struct {
	Lanes    []string
	Group    string
	Consumer string
	// Entries carry the delivery count the caller's read gave each.
	Entries []Unstarted
}

// Run calls the script and returns how many entries were given back.
func (c GiveBack) Run(ctx context.Context, rdb redis.Scripter) (int64, error) {
	args := make([]any, 0, 2+3*len(c.Entries))
	args = append(args, c.Group, c.Consumer)
	for _, u := range c.Entries {
		args = append(args, u.Lane+1, u.ID, u.Deliveries)
	}
	return giveBackScript.Run(ctx, rdb, c.Lanes, args...).Int64()
}
