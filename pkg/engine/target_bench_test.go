package engine

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The benchmarks run on one redis-server, and with SEQCTL_BENCH_CLUSTER=1 also on a
// 3-master Redis Cluster on loopback: each benchmark that supports both then runs as the
// sub-benchmarks node and cluster, one after the other in the same invocation, so their
// figures are taken side by side (select one with -bench 'BenchmarkLatency/cluster').
// Without it a benchmark runs on one node under its usual name.
//
// On the cluster the Redis figures (calls, µs per command, rcpu%) are summed over the
// masters, read from each master's INFO.

// benchTarget is the Redis a benchmark runs on, as the harness sees it.
type benchTarget struct {
	tg    redisTarget
	admin redis.UniversalClient // the harness's own client: publishing, the lease watch
	nodes []*redis.Client       // one per master: INFO and CONFIG RESETSTAT go to each
	keys  keyspace.Keys         // the key layout the engines use on this target
}

// startTarget starts a private redis-server, or a 3-master Redis Cluster, for one
// benchmark; it is stopped at cleanup.
func startTarget(b *testing.B, cluster bool) *benchTarget {
	b.Helper()
	t := &benchTarget{}
	if cluster {
		c := redistest.StartCluster(b, 3)
		t.tg = redisTarget{cl: c}
		for _, n := range c.Nodes {
			t.nodes = append(t.nodes, n.Client(b))
		}
	} else {
		srv := redistest.Start(b)
		t.tg = redisTarget{srv: srv}
		t.nodes = []*redis.Client{srv.Client(b)}
	}
	t.admin = t.tg.client(b)
	t.keys = keyspace.For(t.admin)
	return t
}

// cluster reports a Redis Cluster target.
func (t *benchTarget) cluster() bool { return t.tg.cl != nil }

// resetStats clears INFO commandstats on every master.
func (t *benchTarget) resetStats(b *testing.B) {
	b.Helper()
	for _, n := range t.nodes {
		if err := n.ConfigResetStat(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClusterEnv selects the cluster variants of the benchmarks.
const benchClusterEnv = "SEQCTL_BENCH_CLUSTER"

// onTargets runs fn on one node, and with SEQCTL_BENCH_CLUSTER=1 as the sub-benchmarks
// node and cluster, each on a target of its own.
func onTargets(b *testing.B, fn func(b *testing.B, t *benchTarget)) {
	if os.Getenv(benchClusterEnv) != "1" {
		fn(b, startTarget(b, false))
		return
	}
	b.Run("node", func(b *testing.B) { fn(b, startTarget(b, false)) })
	b.Run("cluster", func(b *testing.B) { fn(b, startTarget(b, true)) })
}

// benchInstances is the number of engines a throughput benchmark starts: 2 on one node,
// 4 on the cluster, or SEQCTL_BENCH_INSTANCES on both.
func benchInstances(t *benchTarget) int {
	if n, err := strconv.Atoi(os.Getenv("SEQCTL_BENCH_INSTANCES")); err == nil && n > 0 {
		return n
	}
	if t.cluster() {
		return 4
	}
	return 2
}

// envInt reads a positive integer from the environment, or returns def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// leaseGetter reads the values of many lease keys for the lease watch, in calls of at most
// watchChunk keys, one after the other: an MGET of 10,000 keys holds Redis for about 5 ms,
// which showed as the one-node latency outliers of the watch's period. One node takes a
// chunk in one MGET. A cluster refuses an MGET across slots, and the partitions' leases
// are all in slots of their own, so there a chunk is one MGET per slot, in a pipeline that
// the cluster client splits by master: as many commands as partitions, which is why the
// watch polls a cluster less often (see watchLeases). The harness's MGETs are counted
// (harnessMGets) and left out of the call counts on both.
func leaseGetter(t *benchTarget, names []string) func(ctx context.Context) ([]any, error) {
	const watchChunk = 500
	if !t.cluster() {
		return func(ctx context.Context) ([]any, error) {
			out := make([]any, 0, len(names))
			for i := 0; i < len(names); i += watchChunk {
				harnessMGets.Add(1)
				vals, err := t.admin.MGet(ctx, names[i:min(i+watchChunk, len(names))]...).Result()
				if err != nil {
					return nil, err
				}
				out = append(out, vals...)
			}
			return out, nil
		}
	}
	bySlot := map[int][]int{} // slot -> indexes into names
	var slots []int
	for i, n := range names {
		s := redistest.Slot(n)
		if _, ok := bySlot[s]; !ok {
			slots = append(slots, s)
		}
		bySlot[s] = append(bySlot[s], i)
	}
	return func(ctx context.Context) ([]any, error) {
		out := make([]any, len(names))
		for c := 0; c < len(slots); c += watchChunk {
			chunk := slots[c:min(c+watchChunk, len(slots))]
			pipe := t.admin.Pipeline()
			cmds := make([]*redis.SliceCmd, len(chunk))
			for j, s := range chunk {
				idx := bySlot[s]
				ks := make([]string, len(idx))
				for x, i := range idx {
					ks[x] = names[i]
				}
				harnessMGets.Add(1)
				cmds[j] = pipe.MGet(ctx, ks...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, err
			}
			for j, s := range chunk {
				for x, i := range bySlot[s] {
					out[i] = cmds[j].Val()[x]
				}
			}
		}
		return out, nil
	}
}

// idleWarmup is how long the idle benchmarks wait, after the shares settled, before they
// measure: the doorbell's first block and 2 s on both targets, and on Redis Cluster also
// the time the idle partitions' leases take to go dormant (one lease TTL idle, then the
// heartbeat that notices it and one more).
func (t *benchTarget) idleWarmup() time.Duration {
	d := doorbellBlock + 2*time.Second
	if t.cluster() {
		d += DefaultLeaseTTL + 2*DefaultLeaseTTL/5
	}
	return d
}

// logDormant logs, on Redis Cluster, how many of the first n benchPayload keys'
// partitions have a dormant lease (no expiry). Run after the measured window: its PTTLs
// are not in the counts.
func (t *benchTarget) logDormant(b *testing.B, n int) {
	b.Helper()
	if !t.cluster() {
		return
	}
	ctx := context.Background()
	pipe := t.admin.Pipeline()
	cmds := make([]*redis.DurationCmd, n)
	for k := range n {
		cmds[k] = pipe.PTTL(ctx, t.keys.LeaseKey(t.keys.PartitionStream("order", fmt.Sprintf("client-%d", k)), "Projector"))
	}
	_, _ = pipe.Exec(ctx)
	dormant := 0
	for _, c := range cmds {
		if c.Val() == -1 {
			dormant++
		}
	}
	b.Logf("dormant leases after the window: %d of %d", dormant, n)
}
