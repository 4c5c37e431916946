package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSortAndHaltedPinnedFirst(t *testing.T) {
	tests := []struct {
		name    string
		halted  bool
		presses int // times o is pressed
		want    []string
	}{
		{"lag", false, 0, []string{"client-4", "globex", "client-1", "eu-west", "client-5", "client-2", "acme-corp", "client-3"}},
		{"head age", false, 1, []string{"client-4", "globex", "client-5", "eu-west", "client-1", "client-2", "acme-corp", "client-3"}},
		{"name", false, 2, []string{"eu-west", "acme-corp", "client-1", "client-2", "client-3", "client-4", "client-5", "globex"}},
		{"back to lag", false, int(sortKeys), []string{"client-4", "globex", "client-1", "eu-west", "client-5", "client-2", "acme-corp", "client-3"}},
		{"halted/lag", true, 0, []string{"client-3", "acme-corp", "client-4", "globex", "client-1", "eu-west", "client-5", "client-2"}},
		{"halted/head age", true, 1, []string{"acme-corp", "client-3", "client-4", "globex", "client-5", "eu-west", "client-1", "client-2"}},
		{"halted/name", true, 2, []string{"acme-corp", "client-3", "eu-west", "client-1", "client-2", "client-4", "client-5", "globex"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, newFake(fixture(tt.halted)), Options{}, 80, 24)
			for range tt.presses {
				h.press("o")
			}
			if diff := cmp.Diff(tt.want, h.keys()); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHaltedStayPinnedAfterRefresh(t *testing.T) {
	src := newFake(fixture(false))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("o", "o") // by name
	src.set(fixture(true), nil)
	h.advance(time.Second)
	if got := h.keys()[:2]; !cmp.Equal(got, []string{"acme-corp", "client-3"}) {
		t.Fatalf("first rows after a partition halted: %v, want the halted ones", got)
	}
}

// o cycles through every sortable column; O reverses the order of the current one.
func TestSortEveryColumnReversible(t *testing.T) {
	s := fixture(false)
	for i := range s.Partitions {
		s.Partitions[i].Pending, s.Partitions[i].Generation = int64(i), int64(10-i)
	}
	h := newHarness(t, newFake(s), Options{}, 120, 40)
	seen := map[colID]bool{}
	for range int(sortKeys) {
		seen[h.m.sortBy.column()] = true
		first := h.keys()
		h.press("O")
		rev := h.keys()
		if cmp.Equal(first, rev) {
			t.Errorf("sort %s: O did not change the order %v", h.m.sortBy, first)
		}
		h.press("O")
		if !cmp.Equal(first, h.keys()) {
			t.Errorf("sort %s: O twice is not the original order", h.m.sortBy)
		}
		h.press("o")
	}
	for _, c := range []colID{colKey, colHandler, colOwner, colGen, colLease, colLag, colPending, colHeadAge, colState} {
		if !seen[c] {
			t.Errorf("column %s cannot be sorted by", partitionCols[c].title)
		}
	}
	if h.m.sortBy != sortLag {
		t.Errorf("after a full cycle the sort is %s, want lag", h.m.sortBy)
	}
	h.press("o", "o") // name, A to Z
	h.press("O")
	if got := h.keys(); got[0] != "globex" || got[len(got)-1] != "eu-west" {
		t.Errorf("name reversed: %v", got)
	}
	if !strings.Contains(h.m.View(), "KEY▼") {
		t.Error("the KEY title does not carry the reversed mark")
	}
}

// A partition whose entries were read ahead (lag 0, pending 5) shows a backlog of 5, not
// 0, and sorts by it.
func TestBacklogCountsReadAhead(t *testing.T) {
	s := fixture(false)
	s.Partitions[2] = part("client-3", StateRunning, 0, time.Minute)
	s.Partitions[2].Pending = 5
	s.Partitions[4].Lag = -1 // unknown
	h := newHarness(t, newFake(s), Options{}, 120, 40)
	p, _ := h.m.lookup(PartitionRef{"order", "client-3", "projector"})
	if got := h.m.partitionCell(&p, colLag, nil); got != "5" {
		t.Errorf("backlog cell %q, want 5", got)
	}
	u, _ := h.m.lookup(PartitionRef{"order", "client-5", "projector"})
	if got := h.m.partitionCell(&u, colLag, nil); got != "?" {
		t.Errorf("unknown backlog cell %q, want ?", got)
	}
	if got := h.keys(); got[3] != "eu-west" || got[4] != "client-3" || got[5] != "client-2" {
		t.Errorf("backlog order %v: client-3 (5) belongs between eu-west (56) and client-2 (4)", got)
	}
}
