package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
)

// On Redis Cluster every key a script touches beside a partition stream is in the
// stream's slot, for partitions and process-manager units alike; on one node the names
// are the documented single-node ones.
func TestKeysLayouts(t *testing.T) {
	for _, k := range []Keys{SingleNodeKeys, ClusterKeys} {
		stream := k.PartitionStream("order", "client-123")
		pm := k.PMUnit("Fulfillment", "client-123")
		perPartition := []string{
			k.LaneStream("order", "client-123", "backfill"), k.DLQStream("order", "client-123"),
			k.LeaseKey(stream, "G"), k.HaltKey(stream, "G"), k.BellChannel(stream), k.IndexedMarkKey(stream),
			k.OutboxMarkKey(stream), k.EventMarkKey(stream, "ev-1"), k.GenerationKey(stream, "G"),
			k.LeaseKey(pm, "G"), k.HaltKey(pm, "G"), k.GenerationKey(pm, "G"),
			k.PartitionStream("payment", "client-123"), // another category of the same key
		}
		if k.Cluster() {
			for _, name := range perPartition {
				if redistest.Slot(name) != redistest.Slot(stream) {
					t.Errorf("cluster: %s is in slot %d, the stream %s in %d", name, redistest.Slot(name), stream, redistest.Slot(stream))
				}
			}
			globals := []string{k.ControlStream(), k.InstancesKey(), k.WakeStream("i1"), k.SessionKey("i1.x"), k.AuditStream()}
			for _, name := range globals {
				if redistest.Slot(name) != redistest.Slot(globals[0]) {
					t.Errorf("cluster: global key %s is not in the slot of %s", name, globals[0])
				}
			}
			if redistest.Slot(k.CategoryDLQStream("order")) != redistest.Slot(k.CategoryStream("order")) {
				t.Errorf("cluster: %s is not in the slot of the category stream", k.CategoryDLQStream("order"))
			}
		}
	}
	got := []string{SingleNodeKeys.PartitionStream("order", "c"), ClusterKeys.PartitionStream("order", "c"),
		SingleNodeKeys.LeaseKey("order:c", "G"), ClusterKeys.LeaseKey("order:{c}", "G"),
		SingleNodeKeys.CategoryDLQStream("order"), ClusterKeys.CategoryDLQStream("order"),
		SingleNodeKeys.ControlStream(), ClusterKeys.ControlStream()}
	want := []string{"order:c", "order:{c}", "{order:c}:__lease__:G", "order:{c}:__lease__:G", "order:dlq", "{order}:dlq",
		"__seqctl__:control", "{__seqctl__}:control"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

// Place names a route's streams in a layout; a backfill route built with only the
// single-node lane name keeps its suffix.
func TestPlaceRoute(t *testing.T) {
	for _, tt := range []struct {
		in   Route
		keys Keys
		want string
	}{
		{Route{Category: "order", Key: "A", Stream: "order:A"}, ClusterKeys, "order:{A}"},
		{Route{Category: "order", Key: "A", Stream: "order:A:low", Backfill: true, Suffix: "low"}, ClusterKeys, "order:{A}:low"},
		{Route{Category: "order", Key: "A", Stream: "order:A:low", Backfill: true}, ClusterKeys, "order:{A}:low"},
		{Route{Category: "order", Key: "A", Backfill: true}, ClusterKeys, "order:{A}:" + DefaultBackfillSuffix},
		{Route{Category: "order", Key: "A", Stream: "order:A:low", Backfill: true}, SingleNodeKeys, "order:A:low"},
		{Route{Category: "audit", Stream: "audit"}, ClusterKeys, "audit"},
	} {
		if got := tt.keys.Place(tt.in).Stream; got != tt.want {
			t.Errorf("Place(%+v) in cluster=%v: stream %q, want %q", tt.in, tt.keys.Cluster(), got, tt.want)
		}
	}
}
