package keyspace

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
)

// On Redis Cluster every key a script touches beside a partition stream is in the
// stream's slot, for partitions and process-manager units alike; on one node the names
// are the documented single-node ones.
func TestKeysLayouts(t *testing.T) {
	for _, k := range []Keys{SingleNode, Cluster} {
		stream := k.PartitionStream("order", "client-123")
		pm := k.PMUnit("Fulfillment", "client-123")
		perPartition := []string{
			k.LaneStream("order", "client-123", "backfill"), k.DLQStream("order", "client-123"),
			k.LeaseKey(stream, "G"), k.HaltKey(stream, "G"), k.BellChannel(stream), k.IndexedMarkKey(stream),
			k.OutboxMarkKey(stream), k.EventMarkKey(stream, "ev-1"), k.GenerationKey(stream, "G"),
			k.LeaseKey(pm, "G"), k.HaltKey(pm, "G"), k.GenerationKey(pm, "G"),
			k.PauseKey(stream, "G"), k.PauseKey(pm, "G"),
			k.PartitionStream("payment", "client-123"), // another category of the same key
		}
		if k.IsCluster() {
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
	got := []string{SingleNode.PartitionStream("order", "c"), Cluster.PartitionStream("order", "c"),
		SingleNode.LeaseKey("order:c", "G"), Cluster.LeaseKey("order:{c}", "G"),
		SingleNode.CategoryDLQStream("order"), Cluster.CategoryDLQStream("order"),
		SingleNode.ControlStream(), Cluster.ControlStream()}
	want := []string{"order:c", "order:{c}", "{order:c}:__lease__:G", "order:{c}:__lease__:G", "order:dlq", "{order}:dlq",
		"__seqctl__:control", "{__seqctl__}:control"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

// PMPauseForm builds, around any group name, the pause key of a process manager's
// correlation value, in both layouts.
func TestPMPauseForm(t *testing.T) {
	for _, k := range []Keys{SingleNode, Cluster} {
		head, middle := k.PMPauseForm("client-123")
		for _, g := range []string{"Fulfillment", "G", "a:b"} {
			if got, want := head+g+middle+g, k.PauseKey(k.PMUnit(g, "client-123"), g); got != want {
				t.Errorf("cluster=%v: the form gives %q for %s, PauseKey %q", k.IsCluster(), got, g, want)
			}
		}
	}
}

// The two keys of a limit value share one slot and no other value's, whatever braces the
// handler's name or the value hold.
func TestLimitKeysOfAnyName(t *testing.T) {
	for _, k := range []Keys{{}, {cluster: true}} {
		tags := map[string]string{}
		for _, n := range [][2]string{{"Projector", "acme"}, {"Pro{jector", "acme"}, {"Pro}jector", "acme"}, {"a{b}c", "acme"},
			{"a{b}c", "bolt"}, {"Projector", "ac{me"}, {"Projector", "ac}me"}, {"{x}", "{y}"}, {"{x}", "{z}"}} {
			p, s := k.LimitKey(n[0], n[1]), k.LimitStartsKey(n[0], n[1])
			if SlotTag(p) != SlotTag(s) {
				t.Errorf("cluster %v, %q/%q: the permits %q and the starts %q are in different slots", k.cluster, n[0], n[1], p, s)
			}
			if other, ok := tags[SlotTag(p)]; ok {
				t.Errorf("cluster %v, %q/%q: the slot tag %q is also %s's", k.cluster, n[0], n[1], SlotTag(p), other)
			}
			tags[SlotTag(p)] = n[0] + "/" + n[1]
		}
	}
}
