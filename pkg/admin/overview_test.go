package admin_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Above its limit the overview counts every row in Redis, lists the halted partition in
// full and samples the rest; below it, it lists everything.
func TestOverviewSamplesAboveItsLimit(t *testing.T) {
	w := haltedWorld(t) // order:A halted, order:B drained; groups Projector and Mailer
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	whole, err := adm.Overview(ctx, 100)
	if err != nil || whole.Sampled || whole.Streams != 2 || whole.Rows != 4 || len(whole.Partitions) != 4 {
		t.Fatalf("small overview = %+v, %v; want 4 rows of 2 streams, not sampled", whole, err)
	}
	const n = 3000
	members := make([]any, n)
	for i := range n {
		members[i] = "k" + strconv.Itoa(i)
	}
	w.rdb.SAdd(ctx, keyspace.SingleNode.PartitionIndex("order"), members...)
	ov, err := adm.Overview(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !ov.Sampled || ov.Streams != n+2 || ov.Rows != 2*(n+2) || len(ov.Unindexed) != 1 {
		t.Errorf("overview: sampled %v, %d streams, %d rows, unindexed %q; want sampled, %d, %d, [order]", ov.Sampled, ov.Streams, ov.Rows, ov.Unindexed, n+2, 2*(n+2))
	}
	if len(ov.Partitions) > 2*admin.ListPageSize+2 || len(ov.Partitions) < 2 {
		t.Errorf("overview read %d rows, want a bounded sample", len(ov.Partitions))
	}
	if p := ov.Partitions[0]; p.Key != "A" || p.State != admin.StateHalted {
		t.Errorf("first row = %s %s, want the halted order:A from the state index", p.Stream, p.State)
	}
}
