package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/go-cmp/cmp"
)

func TestFirstRefresh(t *testing.T) {
	h := newHarness(t, newFake(fixture(false)), Options{}, 80, 24)
	if got := h.src.calls(); got != 1 {
		t.Fatalf("Init made %d Snapshot calls, want 1", got)
	}
	if !h.m.haveSnap || len(h.m.rows) != 8 {
		t.Fatalf("after the first refresh: haveSnap=%v rows=%d, want true 8", h.m.haveSnap, len(h.m.rows))
	}
	want := summary{streams: 8, total: 8, running: 5, idle: 2, unowned: 1, lag: 120 + 4 + 9800 + 37 + 56 + 1500,
		maxLag: 9800, alive: 2, stale: 1,
		slotsInUse: 6, slotsLimit: 8, slotsWaiting: 37} // the stale instance's slots are left out
	if diff := cmp.Diff(want, h.m.sum, cmp.AllowUnexported(summary{})); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}

func TestNavigation(t *testing.T) {
	h := newHarness(t, newFake(bigSnapshot(100)), Options{}, 80, 24)
	page := h.m.tableRows() // 24 - 2 header - 2 footer - 1 title = 19
	if page != 19 {
		t.Fatalf("tableRows at 80x24 = %d, want 19", page)
	}
	steps := []struct {
		keys       []string
		cursor     int
		topAtLeast int
	}{
		{[]string{"down"}, 1, 0},
		{[]string{"j", "j"}, 3, 0},
		{[]string{"k"}, 2, 0},
		{[]string{"up", "up", "up"}, 0, 0}, // clamps at the top
		{[]string{"pgdown"}, page, 1},
		{[]string{"end"}, 99, 99 - page + 1},
		{[]string{"down"}, 99, 99 - page + 1}, // clamps at the bottom
		{[]string{"pgup"}, 99 - page, 99 - page - page + 1},
		{[]string{"g"}, 0, 0},
		{[]string{"G"}, 99, 81},
		{[]string{"home"}, 0, 0},
	}
	for _, s := range steps {
		h.press(s.keys...)
		if h.m.cursor != s.cursor {
			t.Fatalf("after %v: cursor %d, want %d", s.keys, h.m.cursor, s.cursor)
		}
		if h.m.cursor < h.m.top || h.m.cursor >= h.m.top+page {
			t.Fatalf("after %v: cursor %d not visible (top %d, page %d)", s.keys, h.m.cursor, h.m.top, page)
		}
		if h.m.top < s.topAtLeast && s.topAtLeast > 0 {
			t.Fatalf("after %v: top %d, want >= %d", s.keys, h.m.top, s.topAtLeast)
		}
	}
}

func TestCursorFollowsPartitionAcrossRefresh(t *testing.T) {
	src := newFake(fixture(false))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("down", "down") // client-1 (lag order: client-4, globex, client-1)
	if got := h.selected(); got != "client-1" {
		t.Fatalf("selected %q, want client-1", got)
	}
	// client-1's lag jumps to the top of the order: the cursor goes with it.
	s := fixture(false)
	s.Partitions[0].Lag = 50_000
	src.set(s, nil)
	h.advance(time.Second)
	if got := h.selected(); got != "client-1" || h.m.cursor != 0 {
		t.Fatalf("after refresh: selected %q at %d, want client-1 at 0", got, h.m.cursor)
	}
	// The selected partition disappears: the cursor stays in range.
	s.Partitions = s.Partitions[1:]
	src.set(s, nil)
	h.advance(time.Second)
	if h.m.cursor != 0 || h.selected() == "" {
		t.Fatalf("after the partition went: cursor %d selected %q", h.m.cursor, h.selected())
	}
}

// The dashboard opens at the top, where halted partitions are pinned, and stays there
// while refreshes reorder and grow the rows, until a key moves the cursor; from then on
// the selection follows the chosen partition.
func TestViewStartsAtTopUntilTheCursorMoves(t *testing.T) {
	// grown is n partitions, the last three halted when there are ten or more; "first"
	// keeps lag 100, which leads a few partitions and sorts in the middle of many.
	grown := func(n int, shift int64) Snapshot {
		s := Snapshot{Taken: base, Instances: fixture(false).Instances}
		s.Partitions = append(s.Partitions, part("first", StateRunning, 100, time.Second))
		for i := 1; i < n; i++ {
			st := StateRunning
			if n >= 10 && i >= n-3 {
				st = StateHalted
			}
			s.Partitions = append(s.Partitions, part(fmt.Sprintf("p-%02d", i), st, 1+(int64(i)*37+shift)%200, time.Second))
		}
		return s
	}
	src := newFake(grown(3, 0))
	h := newHarness(t, src, Options{}, 80, 24)
	if h.selected() != "first" {
		t.Fatalf("first snapshot: selected %q, want first", h.selected())
	}
	atTop := func(when string) {
		t.Helper()
		if h.m.cursor != 0 || h.m.top != 0 {
			t.Fatalf("%s: cursor on row %d of %d, view from row %d, selected %q; want the top", when, h.m.cursor, len(h.m.rows), h.m.top, h.selected())
		}
		if p, _ := h.m.cursorPartition(); len(h.m.rows) > 3 && p.State != StateHalted {
			t.Fatalf("%s: the cursor is on %s (%s), not on a halted partition", when, p.Key, p.State)
		}
	}
	atTop("first snapshot")
	for i, shift := range []int64{0, 50, 120} {
		src.set(grown(92, shift), nil)
		h.advance(time.Second)
		atTop(fmt.Sprintf("refresh %d", i+1))
	}

	// The operator moves the cursor: the selection now follows that partition.
	h.press("j")
	chosen := h.selected()
	for i, shift := range []int64{7, 99} {
		src.set(grown(92, shift), nil)
		h.advance(time.Second)
		if got := h.selected(); got != chosen {
			t.Fatalf("refresh %d after the cursor moved: selected %q, want %q", i+1, got, chosen)
		}
	}
}

// Opening a partition's detail chooses it: back in the table, the cursor is on it while
// the rows re-sort.
func TestDetailChoosesThePartition(t *testing.T) {
	src := newFake(fixture(false))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("enter", "esc") // client-4, the first row (largest lag)
	s := fixture(false)
	s.Partitions[3].Lag = 1 // client-4 sorts sixth, above the two idle partitions
	src.set(s, nil)
	h.advance(time.Second)
	if got := h.selected(); got != "client-4" || h.m.cursor != 5 {
		t.Fatalf("after a refresh: selected %q at row %d, want client-4 at 5", got, h.m.cursor)
	}
}

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

func TestFilter(t *testing.T) {
	h := newHarness(t, newFake(fixture(true)), Options{}, 80, 24)
	h.press("/")
	if !h.m.filtering {
		t.Fatal("/ did not open the filter input")
	}
	h.typeText("client")
	if diff := cmp.Diff([]string{"client-3", "client-4", "client-1", "client-5", "client-2"}, h.keys()); diff != "" {
		t.Fatalf("filter client (-want +got):\n%s", diff)
	}
	h.typeText(" halt") // every word must match
	if diff := cmp.Diff([]string{"client-3"}, h.keys()); diff != "" {
		t.Fatalf("filter 'client halt' (-want +got):\n%s", diff)
	}
	// q is text while typing, not quit.
	h.typeText("q")
	if h.quit || len(h.keys()) != 0 {
		t.Fatalf("q while filtering: quit=%v rows=%v", h.quit, h.keys())
	}
	h.press("backspace", "enter")
	if h.m.filtering || h.m.filterTxt != "client halt" {
		t.Fatalf("enter: filtering=%v filter=%q, want false and the text kept", h.m.filtering, h.m.filterTxt)
	}
	// The kept filter survives a refresh.
	h.advance(time.Second)
	if diff := cmp.Diff([]string{"client-3"}, h.keys()); diff != "" {
		t.Fatalf("after refresh (-want +got):\n%s", diff)
	}
	// Matches the handler, the owner and the category too.
	h.press("/")
	h.send(tea.KeyMsg{Type: tea.KeyCtrlU}) // textinput: delete to start
	h.typeText("MAILER")
	if diff := cmp.Diff([]string{"eu-west"}, h.keys()); diff != "" {
		t.Fatalf("filter mailer (-want +got):\n%s", diff)
	}
	h.press("esc") // esc in the input clears it
	if h.m.filtering || h.m.filterTxt != "" || len(h.keys()) != 8 {
		t.Fatalf("esc: filtering=%v filter=%q rows=%d", h.m.filtering, h.m.filterTxt, len(h.keys()))
	}
	// esc in the table clears a kept filter.
	h.press("/")
	h.typeText("globex")
	h.press("enter", "esc")
	if h.m.filterTxt != "" || len(h.keys()) != 8 {
		t.Fatalf("esc in the table: filter=%q rows=%d", h.m.filterTxt, len(h.keys()))
	}
}

func TestActionsConfirmed(t *testing.T) {
	for _, tt := range []struct{ key, act, done string }{
		{"s", "skip", "skipped:"},
		{"d", "dlq", "moved to the DLQ:"},
		{"r", "retry", "retrying:"},
	} {
		t.Run(tt.act, func(t *testing.T) {
			src := newFake(fixture(true))
			h := newHarness(t, src, Options{}, 80, 24)
			// The cursor is on client-3, halted on 1741944000000-14.
			h.press(tt.key)
			if h.m.dialog == nil {
				t.Fatalf("%s did not open the confirmation dialog (status %q)", tt.key, h.m.status)
			}
			if h.m.dialog.expectID != "1741944000000-14" {
				t.Fatalf("dialog expects %q", h.m.dialog.expectID)
			}
			if !strings.Contains(h.m.View(), "1741944000000-14") {
				t.Fatal("the dialog does not show the head entry id")
			}
			// Keys other than y / n do nothing while the dialog is open.
			h.press("j", "s", "enter")
			if h.m.dialog == nil || len(src.actions) != 0 {
				t.Fatal("a stray key closed the dialog or acted")
			}
			before := src.calls()
			h.press("y")
			want := []actionCall{{tt.act, PartitionRef{"order", "client-3", "projector"}, "1741944000000-14"}}
			if diff := cmp.Diff(want, src.actions); diff != "" {
				t.Fatalf("actions (-want +got):\n%s", diff)
			}
			if h.m.dialog != nil || h.m.acting {
				t.Fatal("dialog still open or action still marked running")
			}
			if h.m.statusKind != statusOK || !strings.HasPrefix(h.m.status, tt.done) {
				t.Fatalf("status %q (%d), want %q...", h.m.status, h.m.statusKind, tt.done)
			}
			if src.calls() != before+1 {
				t.Fatalf("no refresh after the action: %d Snapshot calls, want %d", src.calls(), before+1)
			}
		})
	}
}

func TestActionHeadMoved(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("s")
	// While the dialog is open a refresh shows another head; the action still names the
	// id the operator saw, and the source says it moved.
	s := fixture(true)
	s.Partitions[2].HaltedEntryID = "1741944000001-0"
	src.set(s, nil)
	h.advance(time.Second)
	src.actErr = fmt.Errorf("admin: skip order:client-3: %w", ErrHeadMoved)
	h.press("y")
	if len(src.actions) != 1 || src.actions[0].ExpectID != "1741944000000-14" {
		t.Fatalf("actions %+v, want one naming 1741944000000-14", src.actions)
	}
	if h.m.statusKind != statusWarn || !strings.HasPrefix(h.m.status, "head moved, nothing done") {
		t.Fatalf("status %q (%d)", h.m.status, h.m.statusKind)
	}
}

func TestActionFailedOtherwise(t *testing.T) {
	src := newFake(fixture(true))
	src.actErr = errRedisDown
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("d", "y")
	if h.m.statusKind != statusErr || !strings.Contains(h.m.status, "dlq failed") ||
		!strings.Contains(h.m.status, "connection refused") {
		t.Fatalf("status %q (%d)", h.m.status, h.m.statusKind)
	}
}

func TestActionCancelled(t *testing.T) {
	for _, k := range []string{"n", "esc"} {
		t.Run(k, func(t *testing.T) {
			src := newFake(fixture(true))
			h := newHarness(t, src, Options{}, 80, 24)
			h.press("r", k)
			if h.m.dialog != nil || len(src.actions) != 0 {
				t.Fatalf("after %s: dialog %v, actions %v", k, h.m.dialog, src.actions)
			}
			if !strings.Contains(h.m.status, "cancelled") {
				t.Fatalf("status %q", h.m.status)
			}
		})
	}
}

func TestActionNeedsHaltedHead(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("G") // client-2, running
	h.press("s")
	if h.m.dialog != nil || h.m.statusKind != statusWarn || !strings.Contains(h.m.status, "not halted") {
		t.Fatalf("dialog %v, status %q", h.m.dialog, h.m.status)
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{ReadOnly: true}, 80, 24)
	for _, k := range []string{"s", "d", "r"} {
		h.press(k)
		if h.m.dialog != nil {
			t.Fatalf("%s opened a dialog in read-only mode", k)
		}
		if h.m.statusKind != statusWarn || !strings.HasPrefix(h.m.status, "read-only") {
			t.Fatalf("%s: status %q", k, h.m.status)
		}
	}
	h.press("enter", "s") // from the detail pane too
	if h.m.dialog != nil || len(src.actions) != 0 {
		t.Fatal("read-only mode acted")
	}
}

func TestActionFromDetailPane(t *testing.T) {
	src := newFake(fixture(true))
	ref := PartitionRef{"order", "acme-corp", "projector"}
	src.heads[ref] = HeadDetail{EntryID: "1741944000000-3", Stream: "order:acme-corp", Attempts: 5,
		Error: "boom", Since: base.Add(-2 * time.Hour)}
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("down", "enter")
	if h.m.view != viewDetail || h.m.detail == nil || h.m.detail.EntryID != "1741944000000-3" {
		t.Fatalf("detail pane: view %d detail %+v", h.m.view, h.m.detail)
	}
	h.press("s", "y")
	if len(src.actions) != 1 || src.actions[0].Ref != ref || src.actions[0].ExpectID != "1741944000000-3" {
		t.Fatalf("actions %+v", src.actions)
	}
	// The pane re-reads its head after the action.
	if n := len(src.headCalls); n != 2 { // opening the pane, then once after the action
		t.Fatalf("%d Head calls, want 2: %v", n, src.headCalls)
	}
}

func TestDetailPane(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("enter")
	want := []PartitionRef{{"order", "client-3", "projector"}}
	if diff := cmp.Diff(want, src.headCalls); diff != "" {
		t.Fatalf("Head calls (-want +got):\n%s", diff)
	}
	if h.m.view != viewDetail || h.m.detailLoading {
		t.Fatalf("view %d loading %v", h.m.view, h.m.detailLoading)
	}
	// down shows the next partition of the table.
	h.press("down")
	if h.m.detailRef.Key != "acme-corp" || len(src.headCalls) != 2 {
		t.Fatalf("after down: detail of %q, %d Head calls", h.m.detailRef.Key, len(src.headCalls))
	}
	// Each refresh re-reads the head shown.
	h.advance(time.Second)
	if len(src.headCalls) != 3 {
		t.Fatalf("refresh with the pane open: %d Head calls, want 3", len(src.headCalls))
	}
	// A Head error is shown in the pane.
	src.headErr = errRedisDown
	h.advance(time.Second)
	if h.m.detailErr == nil || !strings.Contains(h.m.View(), "cannot read the head") {
		t.Fatal("a Head error is not shown")
	}
	h.press("esc")
	if h.m.view != viewPartitions || h.selected() != "acme-corp" {
		t.Fatalf("esc: view %d selected %q", h.m.view, h.selected())
	}
	// An answer for a pane that is closed is dropped.
	h.send(headMsg{ref: want[0], detail: HeadDetail{EntryID: "x"}})
	if h.m.view != viewPartitions {
		t.Fatal("a late Head answer reopened the pane")
	}
}

func TestInstancesView(t *testing.T) {
	h := newHarness(t, newFake(fixture(false)), Options{}, 80, 24)
	h.press("tab")
	if h.m.view != viewInstances {
		t.Fatalf("tab: view %d", h.m.view)
	}
	var ids []string
	for _, i := range h.m.instOrder {
		ids = append(ids, h.m.snap.Instances[i].ID)
	}
	if diff := cmp.Diff([]string{"inst-a", "inst-b", "inst-c"}, ids); diff != "" {
		t.Fatalf("instances (-want +got):\n%s", diff)
	}
	h.press("j", "j", "j")
	if h.m.icursor != 2 || h.m.cursor != 0 {
		t.Fatalf("instances cursor %d, partitions cursor %d", h.m.icursor, h.m.cursor)
	}
	for _, want := range []viewMode{viewDLQ, viewAudit, viewPartitions} {
		h.press("tab")
		if h.m.view != want {
			t.Fatalf("tab: view %d, want %d (partitions, instances, DLQ, audit, partitions)", h.m.view, want)
		}
	}
	h.press("tab", "esc")
	if h.m.view != viewPartitions {
		t.Fatalf("esc from instances: view %d", h.m.view)
	}
}

func TestRedisDownBannerAndRecovery(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("j") // acme-corp
	src.set(Snapshot{}, errRedisDown)

	// Failures back off: 1 s, 2 s, 4 s after each failure.
	h.advance(time.Second) // attempt 1 fails
	calls := src.calls()
	if h.m.lastErr == nil || h.m.failures != 1 {
		t.Fatalf("after a failed refresh: lastErr %v failures %d", h.m.lastErr, h.m.failures)
	}
	if len(h.m.rows) != 8 || h.selected() != "acme-corp" {
		t.Fatalf("the last data was not kept: %d rows, selected %q", len(h.m.rows), h.selected())
	}
	v := h.m.View()
	if !strings.Contains(v, "REDIS UNREACHABLE") || !strings.Contains(v, "connection refused") {
		t.Fatalf("no banner:\n%s", v)
	}
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if wait > time.Second {
			h.advance(wait - time.Second) // not yet due
			if src.calls() != calls {
				t.Fatalf("retry %d came before its backoff", i+2)
			}
		}
		h.advance(time.Second)
		calls++
		if src.calls() != calls || h.m.failures != i+2 {
			t.Fatalf("retry %d: %d calls (want %d), failures %d", i+2, src.calls(), calls, h.m.failures)
		}
	}
	if got := backoff(time.Second, 20); got != maxBackoff {
		t.Fatalf("backoff is not capped: %v", got)
	}

	// Redis is back: the banner goes by itself at the next retry.
	src.set(fixture(true), nil)
	h.advance(8 * time.Second)
	if h.m.lastErr != nil || h.m.failures != 0 || strings.Contains(h.m.View(), "UNREACHABLE") {
		t.Fatalf("no recovery: lastErr %v failures %d", h.m.lastErr, h.m.failures)
	}
	if h.selected() != "acme-corp" {
		t.Fatalf("selection lost over the outage: %q", h.selected())
	}
	h.advance(time.Second)
	if src.calls() != calls+2 {
		t.Fatalf("normal refresh interval not restored: %d calls, want %d", src.calls(), calls+2)
	}
}

func TestRedisDownBeforeFirstSnapshot(t *testing.T) {
	src := newFake(Snapshot{})
	src.snapErr = errRedisDown
	h := newHarness(t, src, Options{Addr: "redis.internal:6379"}, 80, 24)
	v := h.m.View()
	for _, s := range []string{"REDIS UNREACHABLE", "no data yet", "redis.internal:6379"} {
		if !strings.Contains(v, s) {
			t.Errorf("view lacks %q:\n%s", s, v)
		}
	}
}

func TestPause(t *testing.T) {
	src := newFake(fixture(false))
	h := newHarness(t, src, Options{}, 80, 24)
	h.press("p")
	for range 5 {
		h.advance(time.Second)
	}
	if src.calls() != 1 {
		t.Fatalf("paused, yet %d Snapshot calls", src.calls())
	}
	if !strings.Contains(h.m.View(), "PAUSED") {
		t.Fatal("the header does not say PAUSED")
	}
	h.press("p") // resuming refreshes at once
	if src.calls() != 2 {
		t.Fatalf("resume: %d Snapshot calls, want 2", src.calls())
	}
}

func TestRefreshInterval(t *testing.T) {
	src := newFake(fixture(false))
	h := newHarness(t, src, Options{Refresh: 3 * time.Second}, 80, 24)
	for range 2 {
		h.advance(time.Second) // the tick stays at 1 s to redraw ages
	}
	if src.calls() != 1 {
		t.Fatalf("%d calls before the interval", src.calls())
	}
	h.advance(time.Second)
	if src.calls() != 2 {
		t.Fatalf("%d calls after the interval, want 2", src.calls())
	}
	// A refresh still in flight is not doubled by a tick.
	h.m.fetching = true
	h.advance(5 * time.Second)
	if src.calls() != 2 {
		t.Fatalf("a tick started a second refresh while one was in flight")
	}
}

func TestEventsPerSecond(t *testing.T) {
	src := newFake(fixture(false))
	h := newHarness(t, src, Options{}, 80, 24)
	if h.m.rateKnown {
		t.Fatal("a rate from one snapshot")
	}
	s := fixture(false)
	s.Taken = base.Add(2 * time.Second)
	s.Partitions[0].Handled += 300
	s.Partitions[1].Handled += 100
	s.Partitions[2].Handled -= 50 // a counter going back (reset) does not count
	s.Partitions = append(s.Partitions, part("new-one", StateRunning, 1, time.Second))
	s.Partitions[len(s.Partitions)-1].Handled = 1_000_000 // new partitions do not count
	src.set(s, nil)
	h.advance(time.Second)
	if !h.m.rateKnown || h.m.rate != 200 {
		t.Fatalf("rate %v known %v, want 200", h.m.rate, h.m.rateKnown)
	}
	// Handled unknown (0) everywhere: no rate.
	for i := range s.Partitions {
		s.Partitions[i].Handled = 0
	}
	s.Taken = base.Add(4 * time.Second)
	src.set(s, nil)
	h.advance(time.Second)
	if h.m.rateKnown {
		t.Fatal("a rate without Handled counts")
	}
}

func TestHelpAndQuit(t *testing.T) {
	h := newHarness(t, newFake(fixture(false)), Options{}, 80, 24)
	h.press("?")
	if !h.m.showHelp {
		t.Fatal("? did not open help")
	}
	h.press("j") // ignored under the overlay
	if h.m.cursor != 0 {
		t.Fatal("a key reached the table under the help overlay")
	}
	h.press("esc")
	if h.m.showHelp {
		t.Fatal("esc did not close help")
	}
	h.press("q")
	if !h.quit {
		t.Fatal("q did not quit")
	}
	h2 := newHarness(t, newFake(fixture(false)), Options{}, 80, 24)
	h2.press("/", "ctrl+c")
	if !h2.quit {
		t.Fatal("ctrl+c did not quit while typing a filter")
	}
}

func TestResize(t *testing.T) {
	h := newHarness(t, newFake(bigSnapshot(200)), Options{}, 120, 40)
	h.press("end")
	h.send(tea.WindowSizeMsg{Width: 80, Height: 24})
	if h.m.cursor != 199 || h.m.top != 199-h.m.tableRows()+1 {
		t.Fatalf("after shrinking: cursor %d top %d", h.m.cursor, h.m.top)
	}
	h.send(tea.WindowSizeMsg{Width: 30, Height: 8})
	if v := h.m.View(); !strings.Contains(v, "terminal too small") {
		t.Fatalf("tiny terminal: %q", v)
	}
}

func TestLayoutColumns(t *testing.T) {
	titles := func(w int) []string {
		var want [colCount]int
		want[colKey], want[colHandler] = 30, 10
		ws := layoutColumns(partitionCols, want[:], w)
		var out []string
		total := gutterWidth - 1
		for i, c := range partitionCols {
			if ws[i] > 0 {
				out = append(out, c.title)
				total += ws[i] + 1
			}
		}
		if total > w {
			t.Errorf("width %d: the columns take %d", w, total)
		}
		return out
	}
	all := []string{"KEY", "CATEGORY", "HANDLER", "OWNER", "GEN", "LEASE", "BACKLOG", "", "PENDING", "HEAD AGE", "STATE"}
	for _, tt := range []struct {
		width int
		want  []string
	}{
		{120, all},
		{96, all},
		{90, []string{"KEY", "CATEGORY", "HANDLER", "OWNER", "LEASE", "BACKLOG", "", "PENDING", "HEAD AGE", "STATE"}},
		{80, []string{"KEY", "CATEGORY", "HANDLER", "BACKLOG", "", "PENDING", "HEAD AGE", "STATE"}},
		{60, []string{"KEY", "CATEGORY", "HANDLER", "BACKLOG", "HEAD AGE", "STATE"}},
		{40, []string{"KEY", "BACKLOG", "HEAD AGE", "STATE"}},
	} {
		if diff := cmp.Diff(tt.want, titles(tt.width)); diff != "" {
			t.Errorf("width %d (-want +got):\n%s", tt.width, diff)
		}
	}
}

func TestFormat(t *testing.T) {
	durs := map[time.Duration]string{
		850 * time.Millisecond: "850ms", 4200 * time.Millisecond: "4.2s", 42 * time.Second: "42s",
		3*time.Minute + 12*time.Second: "3m12s", 2*time.Hour + 5*time.Minute: "2h05m", 76 * time.Hour: "3d04h",
	}
	for d, want := range durs {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
	counts := map[int64]string{0: "0", 9999: "9999", 12_345: "12.3k", 123_456: "123k", 1_234_567: "1.2M", 2_500_000_000: "2.5G"}
	for n, want := range counts {
		if got := fmtCount(n); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", n, got, want)
		}
	}
	gens := map[int64]string{0: "-", 7: "7", 9_999_999: "9999999", 10_000_000: "…000000", 1796123456789012: "…789012"}
	for g, want := range gens {
		if got := ShortGeneration(g); got != want {
			t.Errorf("ShortGeneration(%d) = %q, want %q", g, got, want)
		}
	}
	if got := fmtThousands(1234567); got != "1,234,567" {
		t.Errorf("fmtThousands = %q", got)
	}
	bars := []struct {
		lag, max int64
		want     string
	}{{0, 100, "     "}, {1, 1000, "▏    "}, {50, 100, "██▌  "}, {100, 100, "█████"}}
	for _, b := range bars {
		if got := lagBar(b.lag, b.max, 5); got != b.want {
			t.Errorf("lagBar(%d, %d) = %q, want %q", b.lag, b.max, got, b.want)
		}
	}
}

func TestUnknownLag(t *testing.T) {
	s := fixture(false)
	s.Partitions[0].Lag = -1 // client-1: Redis cannot tell
	h := newHarness(t, newFake(s), Options{}, 120, 40)
	if want := int64(4 + 9800 + 37 + 56 + 1500); h.m.sum.lag != want {
		t.Fatalf("total lag %d, want %d (the unknown one left out)", h.m.sum.lag, want)
	}
	if got := h.m.partitionCell(&h.m.snap.Partitions[0], colLag, nil); got != "?" {
		t.Fatalf("lag cell %q, want ?", got)
	}
}

// The header sums the handler slots of the live instances; one unbounded instance makes
// the total unbounded, shown without a limit.
func TestHeaderSlotQueue(t *testing.T) {
	for _, tt := range []struct {
		name      string
		instances []Instance
		want      string
	}{
		{"bounded", []Instance{
			{ID: "a", LastHeartbeat: base, SlotsInUse: 4, SlotsLimit: 4, SlotsWaiting: 4996},
			{ID: "b", LastHeartbeat: base, SlotsInUse: 3, SlotsLimit: 4, SlotsWaiting: 1},
		}, "slots 7/8  waiting 4,997"},
		{"one unbounded", []Instance{
			{ID: "a", LastHeartbeat: base, SlotsInUse: 4, SlotsLimit: 4},
			{ID: "go", LastHeartbeat: base, SlotsInUse: 12},
		}, "slots 16  waiting 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := fixture(false)
			s.Instances = tt.instances
			h := newHarness(t, newFake(s), Options{}, 160, 30)
			if v := h.m.View(); !strings.Contains(v, tt.want) {
				t.Errorf("header lacks %q:\n%s", tt.want, strings.Join(strings.SplitN(v, "\n", 3)[:2], "\n"))
			}
		})
	}
}
