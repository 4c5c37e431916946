package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Replication safety ([broker] min_replicas).
//
// Redis replicates asynchronously: a write the primary acknowledged can be lost when a
// replica that never received it is promoted. With min_replicas = N > 0 the engine waits,
// with WAIT, until N replicas have acknowledged the writes it is about to rely on:
//
//   - a lease grant, before the new owner starts working the partition (a grant lost on
//     failover would let the generation counter hand the same fencing token out twice);
//   - every operator action (skip, move to the DLQ, retry, DLQ replay) and every publish
//     of a broker made WithReplicas (seqctl publish: once per event, or per file), before
//     it is reported done;
//   - an outbox row's append, before the relay marks the row PUBLISHED (package outbox).
//
// How the wait covers the write. WAIT only counts writes made earlier on the connection
// it is sent on, and go-redis pools connections, while the write to cover ran on some
// connection of the pool (often inside a script call or a pipeline). So WaitReplicas sends
// a write of its own (SET ReplicaBarrierKey) and then WAIT, on one pinned connection.
// The primary's replication stream is a single ordered log: the barrier is appended to it
// after every write whose reply the caller has already received, and a replica that
// acknowledges the barrier's offset holds everything before it. The barrier also covers
// a write that was done earlier on another connection and found again now (a relay row
// whose append the dedupe mark shows done, a lease re-adopted), which a WAIT next to a
// script call that wrote nothing would not.
//
// A shortfall is an error, never silent: a *ReplicaShortfallError (errors.Is
// ErrReplicaShortfall). The write itself stays done on the primary.
//
// Cost: nothing with min_replicas = 0 (the default): no barrier, no WAIT. Otherwise two
// round trips per covered step (one per discovery pass that took leases, per operator
// action, per relay round that appended rows), plus the time the replicas take to
// acknowledge (the primary asks them at once when a client waits, so about one round trip
// to the slowest of the N fastest replicas).

// DefaultReplicaTimeout is how long a wait for replicas lasts by default (1 s, or a
// quarter of the lease TTL when that is shorter). Healthy replicas acknowledge within
// milliseconds; a replica that needs more than a second is as good as missing for a
// failover.
const DefaultReplicaTimeout = time.Second

// ErrReplicaShortfall is matched by every *ReplicaShortfallError.
var ErrReplicaShortfall = errors.New("engine: replica shortfall")

// ReplicaShortfallError says that fewer replicas than required acknowledged a write
// within the timeout. The write is done on the primary, but a failover before the
// replicas catch up may lose it.
type ReplicaShortfallError struct {
	// Write names what was written: "lease grant", "publish", "skip", "move to DLQ",
	// "retry", "DLQ replay", "outbox append".
	Write string
	// Want is the required replica count (min_replicas); Got how many acknowledged.
	Want, Got int
	// Timeout is how long the primary waited for them.
	Timeout time.Duration
}

func (e *ReplicaShortfallError) Error() string {
	return fmt.Sprintf("engine: replica shortfall: the %s is done on the Redis primary, but only %d of the %d required replicas acknowledged it within %v, so a failover may lose it; check the replicas (INFO replication on the primary: connected_slaves, and each replica's state and lag) or lower [broker] min_replicas",
		e.Write, e.Got, e.Want, e.Timeout)
}

// Unwrap makes errors.Is(err, ErrReplicaShortfall) true.
func (e *ReplicaShortfallError) Unwrap() error { return ErrReplicaShortfall }

// barrierTTL bounds the life of the barrier key: it only needs to exist while a WAIT runs.
const barrierTTL = time.Minute

// WaitReplicas waits until n replicas have acknowledged every write the primary had
// applied before the call (see the top of replicas.go for how), or timeout passes. It
// returns nil at once when n <= 0, a *ReplicaShortfallError naming write when fewer than
// n replicas acknowledged in time, and a translated Redis error when the barrier or the
// WAIT failed (then nothing is known about the replicas).
//
// errReplicasOnCluster: a WAIT covers the writes of one node, and the writes seqctl relies
// on are spread over every master of a Redis Cluster.
var errReplicasOnCluster = errors.New(`engine: min_replicas is not available on Redis Cluster (a WAIT covers one node's writes, and seqctl's are spread over every master); set min_replicas = 0, or use kind = "redis"`)

// With a *redis.Client (the supported case: one primary, possibly behind Sentinel) the
// barrier and the WAIT run on one connection taken from the pool, and the WAIT gets its
// own read timeout. Any other client gets a pipeline (also one connection), whose replies
// are read within the client's ReadTimeout: keep timeout below it.
func WaitReplicas(ctx context.Context, c redis.UniversalClient, write string, n int, timeout time.Duration) error {
	if n <= 0 {
		return nil
	}
	if keyspace.For(c).IsCluster() {
		return errReplicasOnCluster
	}
	if timeout <= 0 {
		timeout = DefaultReplicaTimeout
	}
	var got int64
	var err error
	if pc, ok := c.(interface{ Conn() *redis.Conn }); ok {
		conn := pc.Conn()
		defer conn.Close()
		if err = conn.Set(ctx, keyspace.For(c).ReplicaBarrierKey(), "1", barrierTTL).Err(); err == nil {
			got, err = conn.Wait(ctx, n, timeout).Result()
		}
	} else {
		var wait *redis.Cmd
		_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, keyspace.For(c).ReplicaBarrierKey(), "1", barrierTTL)
			wait = p.Do(ctx, "wait", n, timeout.Milliseconds())
			return nil
		})
		if err == nil {
			got, err = wait.Int64()
		}
	}
	if err != nil {
		return fmt.Errorf("engine: wait for %d replicas after the %s: %w", n, write, translateRedisErr(err))
	}
	if int(got) < n {
		return &ReplicaShortfallError{Write: write, Want: n, Got: int(got), Timeout: timeout}
	}
	return nil
}

// replicaPolicy is how many replicas a broker's operator writes wait for, and how long.
type replicaPolicy struct {
	n       int
	timeout time.Duration
}

// WithReplicas returns a broker over the same client whose writes (Publish, Skip,
// MoveToDLQ, Retry, ReplayDLQ) each wait for n replicas, at most timeout (0:
// DefaultReplicaTimeout), before they return. When fewer acknowledge, the write is done
// on the primary and the call returns a *ReplicaShortfallError: the caller must say that
// it may be lost on failover. n <= 0 waits for nothing. PublishRouted does not wait (the
// outbox relay waits once per round): see AwaitReplicas.
func (b *RedisBroker) WithReplicas(n int, timeout time.Duration) *RedisBroker {
	c := *b
	c.repl = replicaPolicy{n: n, timeout: timeout}
	return &c
}

// waitReplicas applies the broker's replica policy after an operator write.
func (b *RedisBroker) waitReplicas(ctx context.Context, write string) error {
	return WaitReplicas(ctx, b.rdb, write, b.repl.n, b.repl.timeout)
}
