package tui

import (
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/go-cmp/cmp"
)

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
