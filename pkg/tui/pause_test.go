package tui

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/google/go-cmp/cmp"
)

// pausedFixture is fixture(true) with client-2 paused until resumed and client-1 paused
// for a while.
func pausedFixture() Snapshot {
	s := fixture(true)
	for i, p := range s.Partitions {
		switch p.Key {
		case "client-2":
			s.Partitions[i].State = StatePaused
			s.Partitions[i].Pause = &PauseInfo{Reason: "repairing client-2, OPS-42", By: "alice@ops-1", Since: base.Add(-10 * time.Minute)}
		case "client-1":
			s.Partitions[i].State = StatePaused
			s.Partitions[i].Pause = &PauseInfo{Reason: "ERP down", By: "bob@ops-2", Since: base.Add(-time.Minute), Until: base.Add(29 * time.Minute)}
		}
	}
	return s
}

// cursorOn moves the cursor to the row of key.
func (h *harness) cursorOn(key string) {
	h.t.Helper()
	h.press("home")
	for range h.m.rows {
		if h.selected() == key {
			return
		}
		h.press("down")
	}
	h.t.Fatalf("no row for %s", key)
}

// P asks for the reason in a dialog: every key but enter and esc is typed into it (y, n
// and q included), enter without a reason does nothing, and enter with one pauses the
// partition for its handler with that reason, then refreshes.
func TestPausePartitionAsksReason(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24)
	h.cursorOn("client-4")
	h.press("P")
	if h.m.dialog == nil || h.m.dialog.act != actPause {
		t.Fatalf("P did not open the pause dialog (status %q)", h.m.status)
	}
	h.press("enter")
	if h.m.dialog == nil || len(src.pauses) != 0 || h.m.statusKind != statusWarn || !strings.Contains(h.m.status, "type the reason") {
		t.Fatalf("enter without a reason: dialog %v, pauses %v, status %q", h.m.dialog, src.pauses, h.m.status)
	}
	h.typeText("yes, n q: OPS-42")
	if h.m.dialog == nil || h.quit {
		t.Fatal("a key typed into the reason closed the dialog or quit")
	}
	if v := h.m.View(); !strings.Contains(v, "Pause the partition?") || !strings.Contains(v, "yes, n q: OPS-42") {
		t.Fatalf("the dialog does not show the reason typed:\n%s", v)
	}
	before := src.calls()
	h.press("enter")
	want := []pauseCall{{"pause", PartitionRef{"order", "client-4", "projector"}, "yes, n q: OPS-42"}}
	if diff := cmp.Diff(want, src.pauses); diff != "" {
		t.Fatalf("pauses (-want +got):\n%s", diff)
	}
	if h.m.dialog != nil || h.m.acting || h.m.statusKind != statusOK || h.m.status != "paused: order:client-4 (projector)" {
		t.Fatalf("after the pause: dialog %v, acting %v, status %q (%d)", h.m.dialog, h.m.acting, h.m.status, h.m.statusKind)
	}
	if src.calls() != before+1 {
		t.Fatalf("no refresh after the pause: %d Snapshot calls, want %d", src.calls(), before+1)
	}
}

func TestPausePartitionCancelled(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24)
	h.cursorOn("client-4")
	h.press("P")
	h.typeText("half a reason")
	h.press("esc")
	if h.m.dialog != nil || len(src.pauses) != 0 || !strings.Contains(h.m.status, "pause cancelled") {
		t.Fatalf("after esc: dialog %v, pauses %v, status %q", h.m.dialog, src.pauses, h.m.status)
	}
}

// U asks y / n and resumes the paused partition; on a partition that is not paused it
// says so and opens nothing.
func TestResumePartition(t *testing.T) {
	src := newFake(pausedFixture())
	h := newHarness(t, src, Options{}, 80, 24)
	h.cursorOn("client-4")
	h.press("U")
	if h.m.dialog != nil || h.m.statusKind != statusWarn || !strings.Contains(h.m.status, "is not paused") {
		t.Fatalf("U on a running partition: dialog %v, status %q", h.m.dialog, h.m.status)
	}
	h.cursorOn("client-2")
	h.press("U")
	if h.m.dialog == nil || h.m.dialog.act != actResume {
		t.Fatalf("U did not open the resume dialog (status %q)", h.m.status)
	}
	if v := h.m.View(); !strings.Contains(v, "repairing client-2, OPS-42") || !strings.Contains(v, "by alice@ops-1") {
		t.Fatalf("the resume dialog does not show the pause:\n%s", v)
	}
	h.press("y")
	want := []pauseCall{{"resume", PartitionRef{"order", "client-2", "projector"}, ""}}
	if diff := cmp.Diff(want, src.pauses); diff != "" {
		t.Fatalf("resumes (-want +got):\n%s", diff)
	}
	if h.m.statusKind != statusOK || h.m.status != "resumed: order:client-2 (projector)" {
		t.Fatalf("status %q (%d)", h.m.status, h.m.statusKind)
	}
}

// A halted partition cannot be paused; the source's refusal is shown as a failure; a
// read-only dashboard and a source that cannot pause refuse both keys.
func TestPausePartitionRefusals(t *testing.T) {
	src := newFake(fixture(true))
	h := newHarness(t, src, Options{}, 80, 24) // the cursor is on client-3, halted
	h.press("P")
	if h.m.dialog != nil || !strings.Contains(h.m.status, "is halted: resolve its head first") {
		t.Fatalf("P on a halted partition: dialog %v, status %q", h.m.dialog, h.m.status)
	}

	src.actErr = errRedisDown
	h.cursorOn("client-4")
	h.press("P")
	h.typeText("r")
	h.press("enter")
	if h.m.statusKind != statusErr || !strings.Contains(h.m.status, "pause failed on order:client-4 (projector)") ||
		!strings.Contains(h.m.status, "connection refused") {
		t.Fatalf("status %q (%d)", h.m.status, h.m.statusKind)
	}

	ro := newHarness(t, newFake(pausedFixture()), Options{ReadOnly: true}, 80, 24)
	ro.cursorOn("client-2")
	for _, k := range []string{"P", "U"} {
		ro.press(k)
		if ro.m.dialog != nil || !strings.HasPrefix(ro.m.status, "read-only") {
			t.Fatalf("%s read-only: dialog %v, status %q", k, ro.m.dialog, ro.m.status)
		}
	}

	cannot := newHarness(t, newFake(pausedFixture()), Options{}, 80, 24)
	cannot.m.src = noPauseSource{cannot.src}
	cannot.cursorOn("client-2")
	cannot.press("U")
	if cannot.m.dialog != nil || !strings.Contains(cannot.m.status, "cannot pause partitions") {
		t.Fatalf("a source without PauseSource: dialog %v, status %q", cannot.m.dialog, cannot.m.status)
	}
}

// noPauseSource is a Source that cannot pause: only the Source methods of the fake.
type noPauseSource struct{ Source }

// The table marks paused partitions PAUSED, the header counts them, and the detail pane
// shows who paused, since when, until when and why.
func TestPausedPartitionsShown(t *testing.T) {
	h := newHarness(t, newFake(pausedFixture()), Options{}, 120, 40)
	v := h.m.View()
	if !strings.Contains(v, "paused 2") {
		t.Errorf("the header does not count the paused partitions:\n%s", v)
	}
	rows := 0
	for _, l := range strings.Split(v, "\n") {
		if (strings.Contains(l, " client-1 ") || strings.Contains(l, " client-2 ")) && strings.HasSuffix(strings.TrimSpace(l), "PAUSED") {
			rows++
		}
	}
	if rows != 2 {
		t.Errorf("%d rows marked PAUSED, want 2:\n%s", rows, v)
	}
	h.cursorOn("client-1")
	h.press("enter")
	v = h.m.View()
	for _, want := range []string{"PAUSED", "paused by bob@ops-2 since 2025-03-14 09:25:53Z, until 2025-03-14 09:55:53Z: ERP down"} {
		if !strings.Contains(v, want) {
			t.Errorf("the detail pane lacks %q:\n%s", want, v)
		}
	}
}

// The whole program: P, a reason and enter pause the selected partition.
func TestProgramPausesPartition(t *testing.T) {
	src := newFake(pausedFixture())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := Options{Source: src, Refresh: 100 * time.Millisecond, NoColor: true}
	tm := teatest.NewTestModel(t, newModel(ctx, opts, newRenderer(io.Discard, true)), teatest.WithInitialTermSize(100, 30))
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
		return bytes.Contains(b, []byte("PAUSED")) && bytes.Contains(b, []byte("paused 2"))
	}, teatest.WithDuration(5*time.Second))
	// The first rows are client-3 and acme-corp, halted; client-4 (the largest backlog)
	// comes next.
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("j")})
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("j")})
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("P")})
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("Pause the partition?")) },
		teatest.WithDuration(5*time.Second))
	tm.Type("OPS-7")
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("paused: order:")) },
		teatest.WithDuration(5*time.Second))
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.pauses) != 1 || src.pauses[0] != (pauseCall{"pause", PartitionRef{"order", "client-4", "projector"}, "OPS-7"}) {
		t.Fatalf("pauses = %+v, want one with reason OPS-7", src.pauses)
	}
}
