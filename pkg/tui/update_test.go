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
