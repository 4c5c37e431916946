package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// An instance whose record of a unit's owner went stale (the release notice was trimmed
// from the capped control stream before it read it, as in a mass hand-over) still takes
// the unit once it is short of its share: it does not trust the record while that owner
// lives.
func TestStaleOwnerRecordDoesNotStrandPartitions(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	keys := keysOf(20)
	// A live "ghost" instance holds half of the partitions.
	const ghost = "ghost.x"
	rdb.Set(ctx, keyspace.SingleNode.SessionKey(ghost), "ghost", time.Minute)
	info := keyspace.Instance{ID: "ghost", Owner: ghost, HeartbeatMS: time.Now().UnixMilli()}.Encode()
	rdb.HSet(ctx, keyspace.SingleNode.InstancesKey(), "ghost#1", info)
	var handled atomic.Int64
	d := testDomain(t, func(context.Context, Event) error { handled.Add(1); return nil }, nil)
	for i, k := range keys {
		publish(t, NewRedisBroker(rdb), d, k, 0, false)
		if i%2 == 0 {
			rdb.Set(ctx, keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector"), ghost+":5", 0)
		}
	}
	b := startEngine(t, srv, d, "b", time.Second)
	waitFor(t, 5*time.Second, "b takes the free half", func() bool { return len(b.Owned()) == len(keys)/2 })
	// The ghost releases its partitions and leaves, and b misses every notice.
	for i, k := range keys {
		if i%2 == 0 {
			rdb.Del(ctx, keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector"))
		}
	}
	rdb.HDel(ctx, keyspace.SingleNode.InstancesKey(), "ghost#1")
	waitFor(t, 5*time.Second, "b takes the partitions the ghost released", func() bool { return len(b.Owned()) == len(keys) })
	waitFor(t, 5*time.Second, "every event handled", func() bool { return handled.Load() == int64(len(keys)) })
}
