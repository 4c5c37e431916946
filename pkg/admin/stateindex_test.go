package admin_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// streamsOf lists the (stream, handler, state) of each listed partition.
func streamsOf(ps []admin.Partition) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Stream+" "+p.Handler+" "+string(p.State))
	}
	return out
}

// The engine's halt and the operator's pause add their unit to the category's state
// index; a halt written before the index existed is listed by the full read until a
// rebuild indexes it; once built, --state reads the candidates from the index, lists
// only what the records confirm, and the same rows as the full read.
func TestStateIndexListsHaltedAndPaused(t *testing.T) {
	w := haltedWorld(t) // order:A halted by the engine, order:B drained
	ctx := context.Background()
	k := keyspace.SingleNode
	adm := admin.New(w.rdb, admin.Options{})
	if got := w.rdb.ZRange(ctx, k.StateIndex("order", keyspace.IndexHalted), 0, -1).Val(); !slices.Equal(got, []string{"p:A:Projector"}) {
		t.Fatalf("halted index after the engine's halt = %q, want the unit of order:A", got)
	}
	if _, err := adm.Pause(ctx, admin.PauseRequest{Stream: "order:B", Handler: "Projector", Reason: "r", Actor: admin.Actor{User: "ops"}}); err != nil {
		t.Fatal(err)
	}
	if got := w.rdb.ZRange(ctx, k.StateIndex("order", keyspace.IndexPaused), 0, -1).Val(); !slices.Equal(got, []string{"p:B:Projector"}) {
		t.Fatalf("paused index after the pause = %q, want the unit of order:B", got)
	}
	// A halt that predates the index: a record with no member.
	publish(t, w.broker, w.dom, "C", 0, false)
	testkit.WaitFor(t, 10*time.Second, "order:C handled", func() bool { return len(logOf(t, w.rdb, "C")) == 1 })
	legacy := k.HaltKey("order:C", "Mailer")
	w.rdb.HSet(ctx, legacy, "entry", "1-0", "stream", "order:C", "attempts", "3", "error", "boom")

	list := func(f admin.Filter) []string {
		t.Helper()
		ps, err := adm.ListPartitions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return streamsOf(ps)
	}
	halted := admin.Filter{States: []admin.State{admin.StateHalted}}
	states := admin.Filter{States: []admin.State{admin.StateHalted, admin.StatePaused}}
	want := []string{"order:A Projector halted", "order:C Mailer halted"}
	if built, _ := adm.StateIndexBuilt(ctx, "order"); built {
		t.Fatal("the index says built before any rebuild")
	}
	if diff := cmp.Diff(want, list(halted)); diff != "" {
		t.Fatalf("halted before the rebuild (-want +got):\n%s", diff)
	}
	before := list(states)
	var unindexed []string
	list(admin.Filter{Halted: true, OnUnindexed: func(c string) { unindexed = append(unindexed, c) }})
	if !slices.Equal(unindexed, []string{"order"}) {
		t.Errorf("categories read in full = %q, want order", unindexed)
	}
	rebuilt, err := adm.RebuildStateIndex(ctx, "")
	if diff := cmp.Diff([]admin.StateIndexRebuild{{Category: "order", Halted: 2, Paused: 1}}, rebuilt); err != nil || diff != "" {
		t.Fatalf("rebuild: %v (-want +got):\n%s", err, diff)
	}
	if built, _ := adm.StateIndexBuilt(ctx, "order"); !built {
		t.Fatal("the index is not built after the rebuild")
	}
	if diff := cmp.Diff(want, list(halted)); diff != "" {
		t.Errorf("halted from the index (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, list(states)); diff != "" {
		t.Errorf("halted and paused: the index and the full read differ (-full +index):\n%s", diff)
	}
	if got := list(admin.Filter{Halted: true, Handler: "Mailer"}); !slices.Equal(got, []string{"order:C Mailer halted"}) {
		t.Errorf("halted of Mailer = %q", got)
	}

	// The record goes (resolved by hand): the member stays, over-reporting, and the
	// listing does not show it.
	w.rdb.Del(ctx, legacy)
	if got := list(halted); !slices.Equal(got, want[:1]) {
		t.Errorf("halted after the record went = %q, want only order:A", got)
	}
	if n := w.rdb.ZCard(ctx, k.StateIndex("order", keyspace.IndexHalted)).Val(); n != 2 {
		t.Errorf("halted index holds %d members within the grace period, want 2", n)
	}
}

// A prune removes only the members older than the grace period: a member written since
// (a halt on its way) stays.
func TestStatePruneKeepsYoungMembers(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	idx := keyspace.SingleNode.StateIndex("order", keyspace.IndexHalted)
	if err := (scripts.StateIndex{Index: idx, Member: "p:old:G"}).Run(ctx, w.rdb); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := (scripts.StateIndex{Index: idx, Member: "p:young:G"}).Run(ctx, w.rdb); err != nil {
		t.Fatal(err)
	}
	n, err := scripts.StatePrune{Index: idx, Grace: 10 * time.Millisecond, Members: []string{"p:old:G", "p:young:G", "p:absent:G"}}.Run(ctx, w.rdb)
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want 1 removed", n, err)
	}
	got := w.rdb.ZRange(ctx, idx, 0, -1).Val()
	if slices.Contains(got, "p:old:G") || !slices.Contains(got, "p:young:G") {
		t.Errorf("index after the prune = %q, want p:young:G kept and p:old:G gone", got)
	}
}

// EachPartition hands the listing over in pages of at most ListPageSize keys, and the
// pages hold every partition once.
func TestEachPartitionPages(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	n := admin.ListPageSize + 500
	members := make([]any, n)
	for i := range n {
		members[i] = "k" + strconv.Itoa(i)
	}
	// Keys with no stream: listed as unowned, which is enough to count them.
	w.rdb.SAdd(ctx, keyspace.SingleNode.PartitionIndex("order"), members...)
	adm := admin.New(w.rdb, admin.Options{})
	seen := map[string]int{}
	pages := 0
	err := adm.EachPartition(ctx, admin.Filter{Handler: "Projector"}, func(ps []admin.Partition) error {
		pages++
		if len(ps) > admin.ListPageSize*2 {
			t.Errorf("a page of %d rows", len(ps))
		}
		for _, p := range ps {
			seen[p.Key]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pages < 2 || len(seen) != n+2 {
		t.Errorf("%d pages, %d keys; want at least 2 pages and %d keys", pages, len(seen), n+2)
	}
}

// A caller that stops the listing gets its error back at once, and the page read ahead
// is dropped (goleak checks that its reader ended).
func TestEachPartitionStopsOnTheCallersError(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	members := make([]any, 3*admin.ListPageSize)
	for i := range members {
		members[i] = "k" + strconv.Itoa(i)
	}
	w.rdb.SAdd(ctx, keyspace.SingleNode.PartitionIndex("order"), members...)
	adm := admin.New(w.rdb, admin.Options{})
	stop := errors.New("enough")
	calls := 0
	err := adm.EachPartition(ctx, admin.Filter{}, func([]admin.Partition) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("EachPartition = %v after %d calls, want the caller's error after 1", err, calls)
	}
}
