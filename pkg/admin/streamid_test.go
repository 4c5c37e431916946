package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// addDLQEntry appends an OrderPlaced envelope with event id ev to a DLQ under entry id id.
func addDLQEntry(t *testing.T, rdb *redis.Client, dlq, id, ev string) {
	t.Helper()
	err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: dlq, ID: id, Values: []any{
		"id", ev, "type", "OrderPlaced", "category", "order", "key", "client-1", "data", `{"client_id":"client-1"}`, "priority", "0",
	}}).Err()
	if err != nil {
		t.Fatal(err)
	}
}

// dlqIDs lists the entry ids of a stream.
func dlqIDs(t *testing.T, rdb *redis.Client, stream string) []string {
	t.Helper()
	var ids []string
	for _, m := range rdb.XRange(context.Background(), stream, "-", "+").Val() {
		ids = append(ids, m.ID)
	}
	return ids
}

// A bare millisecond ("5") is no id of one entry: a replay refuses it, where Redis would
// read it as the first entry of the millisecond to publish and as 5-0 to delete (so an
// entry 5-1 was published and stayed in the DLQ, to be published again). Where a range
// ends (a purge's through) it takes in every entry of the millisecond.
func TestDLQMillisecondIDs(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	adm := admin.New(rdb, admin.Options{})
	who := admin.Actor{User: "alice", Host: "ops-1", Command: "dlq"}
	const dlq = "order:client-1:dlq"
	addDLQEntry(t, rdb, dlq, "5-1", "e-51") // 5-0 was replayed earlier
	addDLQEntry(t, rdb, dlq, "5-2", "e-52")
	addDLQEntry(t, rdb, dlq, "6-0", "e-60")

	for range 2 {
		res, err := adm.Replay(ctx, "order:client-1", "5", who)
		if !errors.Is(err, keyspace.ErrInvalidStreamID) || !strings.Contains(err.Error(), `invalid stream entry id "5"`) {
			t.Errorf("Replay of %q = %+v, %v; want an invalid stream entry id error", "5", res, err)
		}
	}
	if n := rdb.XLen(ctx, "order:client-1").Val(); n != 0 {
		t.Errorf("replays of %q published %d events; the DLQ holds %v", "5", n, dlqIDs(t, rdb, dlq))
	}

	res, err := adm.PurgeDLQ(ctx, "order:client-1", "5", who)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"6-0"}, dlqIDs(t, rdb, dlq)); diff != "" || res.Removed != 2 {
		t.Errorf("purge through 5 removed %d (-want +got left):\n%s", res.Removed, diff)
	}
}
