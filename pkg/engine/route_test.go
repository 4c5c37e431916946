package engine

import (
	"testing"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Route.In names a route's streams in a layout; a backfill route built with only the
// single-node lane name keeps its suffix.
func TestRouteIn(t *testing.T) {
	for _, tt := range []struct {
		in   Route
		keys keyspace.Keys
		want string
	}{
		{Route{Category: "order", Key: "A", Stream: "order:A"}, keyspace.Cluster, "order:{A}"},
		{Route{Category: "order", Key: "A", Stream: "order:A:low", Backfill: true, Suffix: "low"}, keyspace.Cluster, "order:{A}:low"},
		{Route{Category: "order", Key: "A", Stream: "order:A:low", Backfill: true}, keyspace.Cluster, "order:{A}:low"},
		{Route{Category: "order", Key: "A", Backfill: true}, keyspace.Cluster, "order:{A}:" + DefaultBackfillSuffix},
		{Route{Category: "order", Key: "A", Stream: "order:A:low", Backfill: true}, keyspace.SingleNode, "order:A:low"},
		{Route{Category: "audit", Stream: "audit"}, keyspace.Cluster, "audit"},
	} {
		if got := tt.in.In(tt.keys).Stream; got != tt.want {
			t.Errorf("%+v.In(keys) in cluster=%v: stream %q, want %q", tt.in, tt.keys.IsCluster(), got, tt.want)
		}
	}
}
