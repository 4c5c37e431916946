package redistest

import (
	"context"
	"fmt"
	"testing"
)

// The cluster helper: three masters that serve every slot, a slot function that agrees
// with Redis (hash tags included: a "{stream}:..." key shares the stream's slot), and a
// live slot migration that clients follow through ASK/MOVED.
func TestStartCluster(t *testing.T) {
	c := StartCluster(t, 3)
	ctx := context.Background()
	cl := c.Client(t)
	node := c.Nodes[0].Client(t)
	for _, k := range []string{"order:client-1", "{order:client-1}:__lease__:Projector", "order:client-1:backfill", "a", "{}x", "{a}b", "x{}{y}"} {
		want, err := node.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); got != int(want) {
			t.Errorf("Slot(%q) = %d, Redis says %d", k, got, want)
		}
	}
	if Slot("{order:client-1}:__lease__:Projector") != Slot("order:client-1") {
		t.Error("a key tagged with a stream name must share the stream's slot")
	}

	used := map[int]bool{}
	for i := range 30 {
		k := fmt.Sprintf("k%d", i)
		if err := cl.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		used[c.NodeOf(t, k)] = true
	}
	if len(used) != 3 {
		t.Errorf("30 keys landed on %d of 3 masters", len(used))
	}

	const key = "moving"
	if err := cl.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	from := c.NodeOf(t, key)
	to := (from + 1) % 3
	c.MoveSlot(t, Slot(key), from, to)
	if got := c.NodeOf(t, key); got != to {
		t.Fatalf("slot of %q on node %d after the move, want %d", key, got, to)
	}
	if v, err := cl.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("GET %q through the cluster client after the move = %q, %v", key, v, err)
	}
}
