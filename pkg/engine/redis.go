package engine

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// loadScripts puts every script into the server's script cache (see scripts.Load).
func loadScripts(ctx context.Context, c scripts.Pipeliner) error {
	return translateRedisErr(scripts.Load(ctx, c))
}

// runPipelined sends n script calls in one pipeline (see scripts.RunPipelined).
func runPipelined(ctx context.Context, c scripts.Pipeliner, n int, call func(pipe redis.Pipeliner, i int) *redis.Cmd) ([]*redis.Cmd, error) {
	cmds, err := scripts.RunPipelined(ctx, c, n, call)
	return cmds, translateRedisErr(err)
}

// connErr keeps a pipeline error only when it is not a reply of Redis to one command
// (those stay on their commands): a connection failure, a timeout, a cancelled context.
func connErr(err error) error { return translateRedisErr(scripts.ConnErr(err)) }

// isNoScript reports a NOSCRIPT reply: the script cache lost the script.
func isNoScript(err error) bool { return scripts.IsNoScript(err) }

// masterAddr returns the address of the master that serves key's slot on Redis Cluster,
// the key that decides where a call over several slots of one node runs.
func masterAddr(ctx context.Context, cc *redis.ClusterClient, key string) (string, error) {
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	return node.Options().Addr, nil
}

// chunkGroups cuts each group into chunks of at most n, for one call per chunk (of the
// keys of one node).
func chunkGroups[T any](groups map[string][]T, n int) [][]T {
	var out [][]T
	for _, g := range groups {
		for len(g) > 0 {
			k := min(len(g), n)
			out = append(out, g[:k])
			g = g[k:]
		}
	}
	return out
}

// announce appends a notice to the control stream, which every instance reads.
func announce(ctx context.Context, c redis.Cmdable, k keyspace.Keys, n keyspace.Notice) error {
	return c.XAdd(ctx, &redis.XAddArgs{Stream: k.ControlStream(), MaxLen: keyspace.ControlStreamCap, Approx: true, Values: n.Fields()}).Err()
}

// notify appends a notice to an instance's wake stream.
func notify(ctx context.Context, c redis.Cmdable, wake string, n keyspace.Notice) error {
	return c.XAdd(ctx, &redis.XAddArgs{Stream: wake, MaxLen: keyspace.WakeStreamCap, Approx: true, Values: n.Fields()}).Err()
}
