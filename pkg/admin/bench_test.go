package admin_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// buildPartitions writes n partitions of category "order" the way a live deployment
// leaves them, with pipelined commands: 3 entries each (XADD) and its index entry
// (SADD); consumer group "Projector" created (XGROUP CREATE) with 2 entries delivered
// and not acknowledged (XREADGROUP); a lease held by a live session; every 100th
// partition halted.
func buildPartitions(tb testing.TB, rdb redis.UniversalClient, n int) {
	tb.Helper()
	ctx := context.Background()
	const owner = "i1.1"
	if err := rdb.Set(ctx, keyspace.SingleNode.SessionKey(owner), "i1", time.Minute).Err(); err != nil {
		tb.Fatal(err)
	}
	rdb.SAdd(ctx, keyspace.SingleNode.GroupRegistry("order"), "Projector")
	for start := 0; start < n; start += 1000 {
		pipe := rdb.Pipeline()
		for i := start; i < min(start+1000, n); i++ {
			key := "client-" + strconv.Itoa(i)
			stream := keyspace.SingleNode.PartitionStream("order", key)
			for seq := 0; seq < 3; seq++ {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{
					"id", fmt.Sprintf("ev-%d-%d", i, seq), "type", "OrderPlaced", "category", "order", "key", key,
					"data", fmt.Sprintf(`{"client_id":%q,"seq":%d}`, key, seq), "priority", "0", "published_at", "0",
				}})
			}
			pipe.SAdd(ctx, keyspace.SingleNode.PartitionIndex("order"), key)
			pipe.XGroupCreate(ctx, stream, "Projector", "0")
			pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "Projector", Consumer: owner + ":1", Streams: []string{stream, ">"}, Count: 2})
			pipe.Set(ctx, keyspace.SingleNode.LeaseKey(stream, "Projector"), owner+":"+strconv.Itoa(i+1), 0)
			if i%100 == 0 {
				pipe.HSet(ctx, keyspace.SingleNode.HaltKey(stream, "Projector"), "entry", "0-1", "lane", "0", "stream", stream,
					"attempts", "3", "error", "boom", "since_ms", "1", "owner", owner, "generation", strconv.Itoa(i+1))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestListPartitions10k measures ListPartitions over 10,000 partitions on a private
// local redis-server and logs the time (a measurement, not a timed assertion; the
// target is under 2 s). Run: go test ./pkg/admin -run TestListPartitions10k -v
func TestListPartitions10k(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 partitions: skipped with -short")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	buildPartitions(t, rdb, 10000)
	adm := admin.New(rdb, admin.Options{})
	ctx := context.Background()
	for _, f := range []admin.Filter{{}, {Halted: true}} {
		start := time.Now()
		ps, err := adm.ListPartitions(ctx, f)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		want := 10000
		if f.Halted {
			want = 100
		}
		if len(ps) != want {
			t.Fatalf("%d partitions, want %d", len(ps), want)
		}
		t.Logf("ListPartitions(%+v) over 10,000 partitions: %d rows in %v", f, len(ps), took)
		if f.Halted {
			continue
		}
		p := ps[0]
		if p.Owner != "i1.1" || p.Pending != 2 || p.Lag != 1 || p.State != admin.StateHalted || p.HeadAgeMS <= 0 {
			t.Errorf("first row = %+v", p)
		}
		if p := ps[1]; p.State != admin.StateRunning {
			t.Errorf("second row = %+v", p)
		}
	}
}

// BenchmarkListPartitions10k: go test ./pkg/admin -run '^$' -bench ListPartitions10k
func BenchmarkListPartitions10k(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	buildPartitions(b, rdb, 10000)
	adm := admin.New(rdb, admin.Options{})
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := adm.ListPartitions(ctx, admin.Filter{}); err != nil {
			b.Fatal(err)
		}
	}
}
