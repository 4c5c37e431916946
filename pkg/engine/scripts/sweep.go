package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var (
	sweepScript = load("sweep.lua", false)
	// sweepClusterScript is sweep.lua for Redis Cluster, where one call reads the lanes of
	// one master, of many slots.
	sweepClusterScript = func() *script {
		b, _ := files.ReadFile("sweep.lua")
		return register("sweep.lua", "#!lua flags=allow-cross-slot-keys\n"+string(b), true)
	}()
)

// Sweep finds, among idle lanes, those with an entry after the last one their owner saw
// (sweep.lua).
type Sweep struct {
	Cluster bool // lanes of one master of a Redis Cluster
	Lanes   []SweepLane
}

// SweepLane is a lane and the last entry id its owner saw.
type SweepLane struct{ Stream, After string }

// EvalSha queues the call on a pipeline (see RunPipelined).
func (c Sweep) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	args := make([]any, 0, 2*len(c.Lanes))
	for _, l := range c.Lanes {
		args = append(args, l.Stream, l.After)
	}
	s := sweepScript
	if c.Cluster {
		s = sweepClusterScript
	}
	return s.EvalSha(ctx, pipe, []string{c.Lanes[0].Stream}, args...)
}

// ParseSweep reads the reply of a queued call: the indexes (from 0) of the lanes that
// hold a later entry.
func ParseSweep(cmd *redis.Cmd) ([]int, error) {
	res, err := ints("sweep.lua", cmd)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(res))
	for _, k := range res {
		out = append(out, int(k)-1)
	}
	return out, nil
}
