package partitions

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// TestPartitionsList10kCLI measures 'seqctl partitions list' over 10,000 partitions,
// end to end (connect, list, render), on a private local redis-server, and logs the
// times (a measurement, not a timed assertion; the target is under 2 s).
// Run: go test ./cmd/seqctl/internal/partitions -run TestPartitionsList10kCLI -v
func TestPartitionsList10kCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 partitions: skipped with -short")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rdb.Set(ctx, keyspace.SingleNode.SessionKey("i1.1"), "i1", time.Minute)
	rdb.SAdd(ctx, keyspace.SingleNode.GroupRegistry("order"), "Projector")
	for start := 0; start < 10000; start += 1000 {
		pipe := rdb.Pipeline()
		for i := start; i < start+1000; i++ {
			key := "client-" + strconv.Itoa(i)
			stream := keyspace.SingleNode.PartitionStream("order", key)
			for seq := 0; seq < 3; seq++ {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", fmt.Sprint(i, "-", seq), "type", "OrderPlaced", "data", "{}"}})
			}
			pipe.SAdd(ctx, keyspace.SingleNode.PartitionIndex("order"), key)
			pipe.XGroupCreate(ctx, stream, "Projector", "0")
			pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "Projector", Consumer: "i1.1:1", Streams: []string{stream, ">"}, Count: 2})
			pipe.Set(ctx, keyspace.SingleNode.LeaseKey(stream, "Projector"), "i1.1:"+strconv.Itoa(i+1), 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"partitions", "list", "-o", "json"},
		{"partitions", "list"},
		{"partitions", "list", "--halted"},
	} {
		start := time.Now()
		r := cmdtest.RunCLI(t, false, append(args, "--redis-url", srv.URL)...)
		took := time.Since(start)
		if r.Code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.Code, r.Stderr)
		}
		t.Logf("seqctl %s over 10,000 partitions: %d lines in %v", strings.Join(args, " "), strings.Count(r.Stdout, "\n"), took)
	}
}
