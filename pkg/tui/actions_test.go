package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

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
