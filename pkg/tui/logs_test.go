package tui

import (
	"strings"
	"testing"
	"time"
)

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
