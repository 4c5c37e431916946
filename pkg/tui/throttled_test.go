package tui

import (
	"strings"
	"testing"
)

// throttledFixture is fixture(true) with client-2 and globex waiting for a permit of
// their handler's limit key, on the values acme and globex.
func throttledFixture() Snapshot {
	s := fixture(true)
	for i, p := range s.Partitions {
		switch p.Key {
		case "client-2":
			s.Partitions[i].State, s.Partitions[i].LimitValue = StateThrottled, "acme"
		case "globex":
			s.Partitions[i].State, s.Partitions[i].LimitValue = StateThrottled, "globex"
		}
	}
	return s
}

// The header counts the throttled partitions, their rows say so in the STATE column
// (widened for the word), the detail names the value they wait for, and the filter
// finds them by state and by value.
func TestThrottledPartitions(t *testing.T) {
	h := newHarness(t, newFake(throttledFixture()), Options{}, 120, 40)
	settle(h)
	if h.m.sum.throttled != 2 {
		t.Fatalf("throttled count = %d, want 2", h.m.sum.throttled)
	}
	view := h.m.View()
	if !strings.Contains(view, "throttled 2") {
		t.Errorf("the header does not count the throttled partitions:\n%s", view)
	}
	for _, l := range strings.Split(view, "\n") {
		if strings.Contains(l, " client-2 ") && !strings.HasSuffix(strings.TrimRight(l, " "), "throttled") {
			t.Errorf("client-2's row does not end with its state: %q", l)
		}
	}

	h.press("/")
	h.typeText("limit:acme")
	h.press("enter")
	if len(h.m.rows) != 1 || h.selected() != "client-2" {
		t.Fatalf("limit:acme keeps %d rows (selected %q), want client-2 alone", len(h.m.rows), h.selected())
	}
	h.press("enter")
	if view := h.m.View(); !strings.Contains(view, "throttled: waiting for a permit of limit value acme") {
		t.Errorf("the detail does not name the value:\n%s", view)
	}
}
