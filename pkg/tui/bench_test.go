package tui

import (
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/muesli/termenv"
)

// The dashboard with 10,000 partitions at 120x40: what one key press costs (Update and
// the View that follows it), what applying one refresh costs on the TUI side, and what a
// keystroke in the filter costs. Run:
//
//	go test ./pkg/tui -run '^$' -bench . -benchmem

const benchPartitions = 10_000

func benchModel(b *testing.B, colour bool) *harness {
	b.Helper()
	h := newHarness(b, newFake(bigSnapshot(benchPartitions)), Options{NoColor: !colour}, 120, 40)
	if colour {
		h.colour(termenv.TrueColor)
	}
	return h
}

func BenchmarkKeyPress(b *testing.B) {
	for _, bc := range []struct {
		name   string
		colour bool
	}{{"colour", true}, {"nocolor", false}} {
		b.Run(bc.name, func(b *testing.B) {
			h := benchModel(b, bc.colour)
			down, pgdown, top := keyMsg("j"), keyMsg("pgdown"), keyMsg("g")
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				msg := down
				switch {
				case h.m.cursor >= len(h.m.rows)-1:
					msg = top
				case i%20 == 19:
					msg = pgdown
				}
				h.m.Update(msg)
				_ = h.m.View()
			}
		})
	}
}

// BenchmarkRefreshApply is the TUI's share of one refresh: a 10,000-partition snapshot
// arriving (aggregates, rate, sort, filter, cursor), then a View.
func BenchmarkRefreshApply(b *testing.B) {
	h := benchModel(b, true)
	snaps := [2]Snapshot{bigSnapshot(benchPartitions), bigSnapshot(benchPartitions)}
	snaps[1].Taken = snaps[1].Taken.Add(time.Second)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		h.m.fetching = true
		h.m.Update(snapshotMsg{snap: snaps[i%2]})
		_ = h.m.View()
	}
}

// BenchmarkFilterKeystroke: one rune typed into the filter refilters all 10,000 rows.
func BenchmarkFilterKeystroke(b *testing.B) {
	h := benchModel(b, true)
	h.press("/")
	keys := []tea.KeyMsg{keyMsg("7"), keyMsg("backspace")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		h.m.Update(keys[i%2])
		_ = h.m.View()
	}
}
