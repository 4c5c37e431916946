package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var trimScript = load("trim.lua", false)

// Trim bounds a busy partition's growth, fenced (trim.lua): the prefix every consumer
// group acknowledged goes, and the group's consumers of old generations with nothing
// pending.
type Trim struct {
	Lease, Live string
	Lanes       []string
	// Registries are, per lane, its category's group registry on one node; on Redis
	// Cluster RegistryNames holds the caller's read of them.
	Registries    []string
	RegistryNames [][]string
	Token, Group  string
	Consumer      string
	Cluster       bool
}

// Run calls the script; fenced is true when the lease is not the caller's.
func (c Trim) Run(ctx context.Context, rdb redis.Scripter) (trimmed, deleted int64, fenced bool, err error) {
	keys := make([]string, 0, 2+2*len(c.Lanes))
	keys = append(append(keys, c.Lease, c.Live), c.Lanes...)
	for i := range c.Lanes {
		if c.Cluster {
			keys = append(keys, c.Lease) // unread
		} else {
			keys = append(keys, c.Registries[i])
		}
	}
	mode := ""
	if c.Cluster {
		mode = "cluster"
	}
	args := []any{c.Token, c.Group, c.Consumer, len(c.Lanes), mode}
	if c.Cluster {
		args = registryArgs(args, c.RegistryNames)
	}
	res, err := trimScript.Run(ctx, rdb, keys, args...).Int64Slice()
	if err != nil {
		return 0, 0, false, err
	}
	if len(res) == 1 && res[0] == -1 {
		return 0, 0, true, nil
	}
	if len(res) != 2 {
		return 0, 0, false, replyError("trim.lua", res)
	}
	return res[0], res[1], false, nil
}
