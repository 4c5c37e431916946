package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A status message goes after a few seconds (a warning after longer), so an old
// message never reads as news.
func TestStatusExpires(t *testing.T) {
	h := newHarness(t, newFake(fixture(true)), Options{}, 80, 24)
	h.press("o")
	if !strings.HasPrefix(h.m.status, "sorted by head age") {
		t.Fatalf("status %q", h.m.status)
	}
	h.advance(4 * time.Second)
	if h.m.status == "" {
		t.Fatal("the status went before statusTTL")
	}
	h.advance(time.Second)
	if h.m.status != "" {
		t.Fatalf("status %q still shown after %v", h.m.status, statusTTL)
	}
	h.press("g", "j", "j", "s") // client-4 is running: skip warns

	if h.m.statusKind != statusWarn || h.m.status == "" {
		t.Fatalf("status %q kind %d, want a warning", h.m.status, h.m.statusKind)
	}
	h.advance(10 * time.Second)
	if h.m.status == "" {
		t.Fatal("a warning went after 10s")
	}
	h.advance(5 * time.Second)
	if h.m.status != "" {
		t.Fatalf("warning %q still shown after %v", h.m.status, statusWarnTTL)
	}
}

// The selection stays on the partition the operator chose while the rows re-sort; when
// that partition is no longer listed, no key acts on the row that took its place.
func TestSelectionStaysOnTheChosenKey(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("j") // client-3 (halted) then acme-corp: lag order puts client-3 first
	chosen := h.selected()
	if chosen != "acme-corp" {
		t.Fatalf("selected %q", chosen)
	}
	// Three refreshes that re-sort the rows: acme-corp's lag changes each time.
	for i, lag := range []int64{1, 90_000, 2} {
		s := fixture(true)
		s.Partitions[6].Lag = lag
		src.set(s, nil)
		h.advance(time.Second)
		if got := h.selected(); got != chosen {
			t.Fatalf("refresh %d: selected %q, want %q", i, got, chosen)
		}
	}
	// acme-corp is resolved elsewhere and filtered out by state: the row under the
	// cursor is another halted partition, but a key press must not act on it.
	h.press("/")
	h.typeText("state:halted")
	h.press("enter")
	s := fixture(true)
	s.Partitions[6] = part("acme-corp", StateRunning, 1, time.Second)
	src.set(s, nil)
	h.advance(time.Second)
	if !h.m.selGone {
		t.Fatal("the chosen partition left the list, but selGone is false")
	}
	h.press("s")
	if h.m.dialog != nil || len(src.actions) != 0 {
		t.Fatalf("s opened a dialog on %v after the chosen partition left", h.m.dialog)
	}
	if !strings.Contains(h.m.status, "order:acme-corp (projector) is no longer listed") {
		t.Errorf("status %q", h.m.status)
	}
	// Moving the cursor chooses again.
	h.press("g")
	h.press("s")
	if h.m.dialog == nil || h.m.dialog.ref.Key != "client-3" {
		t.Fatalf("after choosing client-3, s: dialog %+v", h.m.dialog)
	}
}

func TestFilterSyntax(t *testing.T) {
	tests := []struct {
		filter string
		want   []string
		err    string
	}{
		{"client", []string{"client-3", "client-4", "client-1", "client-5", "client-2"}, ""},
		{"handler:mailer", []string{"eu-west"}, ""},
		{"cat:invoice", []string{"eu-west"}, ""},
		{"owner:inst-b", []string{"globex", "eu-west"}, ""},
		{"state:halted", []string{"client-3", "acme-corp"}, ""},
		{"key:/^client-[45]$/", []string{"client-4", "client-5"}, ""},
		{"/^(acme|globex)/", []string{"acme-corp", "globex"}, ""},
		{"order:client-1", []string{"client-1"}, ""},        // not a field: plain text
		{"stream:order:client-2", []string{"client-2"}, ""}, // the value may hold a colon
		{"key:/[/", []string{}, "bad regular expression /[/"},
		{"state:running owner:inst-a", []string{"client-4", "client-1", "client-2"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			h := newHarness(t, newFake(fixture(true)), Options{}, 80, 24)
			h.press("/")
			h.typeText(tt.filter)
			h.press("enter")
			got := h.keys()
			if got == nil {
				got = []string{}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(h.m.filterErr, tt.err) || (tt.err == "") != (h.m.filterErr == "") {
				t.Errorf("filter error %q, want %q", h.m.filterErr, tt.err)
			}
		})
	}
}

// A stream name pasted as it reads on Redis Cluster (order:{client-7}) finds its partition.
func TestFilterClusterStreamName(t *testing.T) {
	p := &Partition{Category: "order", Key: "client-7", Stream: "order:{client-7}", Handler: "Projector", State: "running"}
	other := &Partition{Category: "order", Key: "client-70", Stream: "order:{client-70}", Handler: "Projector", State: "running"}
	f := parseFilter("order:{client-7}")
	if !f.match(p, haystack(p)) {
		t.Error("order:{client-7} does not match its own partition")
	}
	if f.match(other, haystack(other)) {
		t.Error("order:{client-7} matches order:{client-70}")
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

// The DLQ and audit views fetch when entered and again with every refresh while shown.
func TestDLQAndAuditViews(t *testing.T) {
	src := newFake(fixture(true))
	sampleLists(src)
	h := newHarness(t, src, Options{}, 120, 40)
	if src.listCalls != 0 {
		t.Fatalf("%d list calls before the views were opened", src.listCalls)
	}
	h.press("tab", "tab")
	if h.m.view != viewDLQ || src.listCalls != 1 || len(h.m.dlqRows) != 2 {
		t.Fatalf("DLQ view: view %d, %d calls, %d rows", h.m.view, src.listCalls, len(h.m.dlqRows))
	}
	src.dlqs = src.dlqs[:1]
	h.advance(time.Second)
	if src.listCalls != 2 || len(h.m.dlqRows) != 1 {
		t.Fatalf("after a refresh: %d calls, %d rows", src.listCalls, len(h.m.dlqRows))
	}
	h.press("tab")
	if h.m.view != viewAudit || len(h.m.auditRows) != 2 || h.m.auditRows[0].User != "alice" {
		t.Fatalf("audit view: view %d rows %+v", h.m.view, h.m.auditRows)
	}
	h.press("j", "j")
	if h.m.audit.cursor != 1 {
		t.Errorf("audit cursor %d, want 1 (clamped)", h.m.audit.cursor)
	}
	v := h.m.View()
	for _, want := range []string{"head_moved", "action 2/2", "alice"} {
		if !strings.Contains(v, want) {
			t.Errorf("audit view lacks %q:\n%s", want, v)
		}
	}
	h.press("esc")
	if h.m.view != viewPartitions {
		t.Errorf("esc: view %d", h.m.view)
	}
	calls := src.listCalls
	h.advance(time.Second)
	if src.listCalls != calls {
		t.Error("the lists are fetched while the partitions view is shown")
	}
}

// "partitions" counts partition streams, as the CLI and seqctl dev do; "rows" counts the
// table's (handler, partition) rows.
func TestPartitionsCountStreams(t *testing.T) {
	s := fixture(false)
	second := s.Partitions[0]
	second.Handler = "mailer"
	s.Partitions = append(s.Partitions, second)
	h := newHarness(t, newFake(s), Options{}, 120, 40)
	if h.m.sum.streams != 8 || h.m.sum.total != 9 {
		t.Fatalf("streams %d rows %d, want 8 and 9", h.m.sum.streams, h.m.sum.total)
	}
	if v := h.m.View(); !strings.Contains(v, "partitions 8  rows 9") {
		t.Errorf("header lacks \"partitions 8  rows 9\":\n%s", v)
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
