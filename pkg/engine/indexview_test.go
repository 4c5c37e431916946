package engine

import (
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The view's units are the units unitFor gives, one per key and subscription, in both
// layouts, for handlers of one category and for a sequential process manager over two;
// a primary lane is kept as the start of its backfill lane's string, and the units of a
// subscription share their lane categories.
func TestViewUnitsAreUnitForCompacted(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used
		t.Cleanup(func() { rdb.Close() })
		nop := func(context.Context, Event) error { return nil }
		for name, d := range map[string]*Domain{"handlers": twoHandlerDomain(t, nop), "pm": pmDomain(t, nop)} {
			e, err := New(EngineConfig{Domain: d, Client: rdb, InstanceID: "i"})
			if err != nil {
				t.Fatal(err)
			}
			if cluster {
				e.keys, e.view.keys = keyspace.Cluster, keyspace.Cluster
			}
			for c := range e.view.cats {
				for i := range 50 {
					e.view.cats[c][fmt.Sprintf("k%d", i%40+len(c)%3*5)] = 0 // some keys in both categories
				}
			}
			got := e.viewUnits()
			want := map[string]unit{}
			for _, s := range e.subs {
				seen := map[string]bool{}
				for _, c := range s.categories {
					for k := range e.view.cats[c] {
						if !seen[k] {
							seen[k] = true
							u := e.unitFor(s, k)
							want[u.id()] = u
						}
					}
				}
			}
			if len(got) != len(want) {
				t.Errorf("cluster %v, %s: %d units, want %d", cluster, name, len(got), len(want))
			}
			cats := map[*subscription]*string{}
			for _, u := range got {
				w, ok := want[u.id()]
				if diff := cmp.Diff(w, u, cmp.AllowUnexported(unit{}), cmp.Comparer(func(a, b *subscription) bool { return a == b })); !ok || diff != "" {
					t.Errorf("cluster %v, %s: unit %q (-unitFor +view):\n%s", cluster, name, u.id(), diff)
					continue
				}
				if p, ok := cats[u.sub]; ok && p != unsafe.SliceData(u.laneCats) {
					t.Errorf("cluster %v, %s: unit %q has lane categories of its own", cluster, name, u.id())
				}
				cats[u.sub] = unsafe.SliceData(u.laneCats)
				if n := len(u.lanes) / 2; u.sub.partitioned && unsafe.StringData(u.lanes[0]) != unsafe.StringData(u.lanes[n]) {
					t.Errorf("cluster %v, %s: unit %q: the primary lane %q is a string of its own, not the start of %q", cluster, name, u.id(), u.lanes[0], u.lanes[n])
				}
			}
		}
	}
}

// Keys added and reaped by notices, and dropped by an acquire, change the units in place
// of deriving them all again: the units of the keys that stayed are the same values (the
// same strings), and the result is what a derivation from scratch gives.
func TestViewUnitsFollowChangesWithoutDerivingAgain(t *testing.T) {
	e, notice := viewEngine(t)
	for i := range 20 {
		notice(fmt.Sprintf("k%d", i), i+1)
	}
	before := map[string]*byte{}
	for _, u := range e.viewUnits() {
		before[u.key] = unsafe.StringData(u.lanes[0])
	}
	reaped := func(key string, id int) {
		e.controlRead([]redis.XMessage{{ID: fmt.Sprintf("%d-0", id), Values: map[string]any{"op": "reaped", "category": "order", "key": key}}})
	}
	reaped("k3", 30)
	notice("new1", 31)
	reaped("new1", 32)
	notice("new1", 33) // added, reaped and added again: one unit
	notice("new2", 34)
	notice("k5", 35) // announced again: still one unit
	e.view.drop(e.unitFor(e.subs[0], "k7"), e.view.noticeSeq())
	got := map[string]int{}
	for _, u := range e.viewUnits() {
		got[u.key]++
		if p, ok := before[u.key]; ok && p != unsafe.StringData(u.lanes[0]) {
			t.Errorf("unit %q was derived again", u.key)
		}
	}
	e.view.mu.Lock()
	want := map[string]int{}
	for _, u := range e.deriveUnitsLocked() {
		want[u.key]++
	}
	e.view.mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("units per key (-derived from scratch +updated):\n%s", diff)
	}
	for _, k := range []string{"k3", "k7"} {
		if got[k] != 0 {
			t.Errorf("%s is still a unit", k)
		}
	}
}
