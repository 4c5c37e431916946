package scripts

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var reapScript = load("reap.lua", false)

// Reap retires a cold partition or process-manager unit, fenced (reap.lua).
type Reap struct {
	Lease, Live, Halt string
	// PausePrefixes are, per lane, the pause records of its category's partition without
	// the group (keyspace.PausePrefix); PMPause is keyspace.PMPauseForm of the key. The
	// unit is kept while any registered group has either pause.
	PausePrefixes []string
	PMPause       [2]string
	Lanes         []string
	// Indexes are, per lane, its category's index on one node, or the partition's
	// indexed mark on Redis Cluster.
	Indexes []string
	// Registries are, per lane, its category's group registry on one node (the script
	// checks that it names no group beyond RegistryNames); RegistryNames holds the
	// caller's read of them, on one node and on Redis Cluster, where no script reads them.
	Registries    []string
	RegistryNames [][]string
	Generation    string // Redis Cluster: the unit's generation counter, deleted with it
	Control       string // one node: the control stream, where the reap is announced
	Guards        []string
	Token         string
	IdleMS        int64
	Key           string   // the partition key (index member)
	Categories    []string // per lane, its category
	Cluster       bool
}

// ReapCode is reap.lua's answer.
type ReapCode int64

// The answers of reap.lua.
const (
	Reaped        ReapCode = 1
	ReapNotIdle   ReapCode = 0  // not idle long enough: try again after WaitMS
	ReapFenced    ReapCode = -1 // the lease is not the caller's
	ReapNotNow    ReapCode = -7 // halted, pending entries, a group behind: Reason says
	ReapUnindexed ReapCode = -9 // Redis Cluster: Lane's partition lacks its indexed mark
)

// ReapReply is reap.lua's reply.
type ReapReply struct {
	Code   ReapCode
	WaitMS int64
	Reason string
	Lane   string
}

// Run calls the script.
func (c Reap) Run(ctx context.Context, rdb redis.Scripter) (ReapReply, error) {
	n := len(c.Lanes)
	keys := make([]string, 0, 5+3*n+len(c.Guards))
	keys = append(keys, c.Lease, c.Live, c.Halt)
	keys = append(append(keys, c.Lanes...), c.Indexes...)
	for i := range c.Lanes {
		if c.Cluster {
			keys = append(keys, c.Lease) // unread
		} else {
			keys = append(keys, c.Registries[i])
		}
	}
	if c.Cluster {
		keys = append(keys, c.Generation, c.Lease)
	} else {
		keys = append(keys, c.Lease, c.Control)
	}
	for i, names := range c.RegistryNames {
		for _, g := range names {
			keys = append(keys, c.PausePrefixes[i]+g, c.PMPause[0]+g+c.PMPause[1]+g)
		}
	}
	keys = append(keys, c.Guards...)
	mode := ""
	if c.Cluster {
		mode = "cluster"
	}
	args := make([]any, 0, 5+2*n)
	args = append(args, c.Token, c.IdleMS, n, c.Key, mode)
	for _, cat := range c.Categories {
		args = append(args, cat)
	}
	args = registryArgs(args, c.RegistryNames)
	cmd := reapScript.Run(ctx, rdb, keys, args...)
	return reply("reap.lua", cmd, func(code int64, rest []any) (ReapReply, error) {
		r := ReapReply{Code: ReapCode(code)}
		switch r.Code {
		case ReapNotIdle:
			r.WaitMS, _ = strconv.ParseInt(str(rest, 0), 10, 64)
		case ReapNotNow:
			r.Reason = str(rest, 0)
		case ReapUnindexed:
			r.Lane = str(rest, 0)
		}
		return r, nil
	})
}

// registryArgs appends, per lane, the count and the names of its registry (see
// prelude.lua's read_registries).
func registryArgs(args []any, regs [][]string) []any {
	for _, names := range regs {
		args = append(args, len(names))
		for _, n := range names {
			args = append(args, n)
		}
	}
	return args
}
