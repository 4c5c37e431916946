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

	"github.com/seqctl/seqctl/internal/testkit"
)

// TestProgram runs the whole program: it starts, shows the first snapshot, picks up a
// change at the next refresh, and quits on q.
func TestProgram(t *testing.T) {
	src := newFake(fixture(false))
	// New, with a context to end the tick timer when the test is done.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := Options{Source: src, Refresh: 100 * time.Millisecond, NoColor: true}
	tm := teatest.NewTestModel(t, newModel(ctx, opts, newRenderer(io.Discard, true)),
		teatest.WithInitialTermSize(80, 24))
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
		return bytes.Contains(b, []byte("client-4")) && bytes.Contains(b, []byte("partitions 8"))
	}, teatest.WithDuration(5*time.Second))

	s := fixture(false)
	s.Partitions = append(s.Partitions, part("late-key", StateRunning, 20_000, time.Minute))
	src.set(s, nil)
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
		return bytes.Contains(b, []byte("late-key"))
	}, teatest.WithDuration(5*time.Second))

	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
	m, ok := tm.FinalModel(t).(*model)
	// late-key sorts first (largest lag); no key moved the cursor, so it stayed on the
	// first row.
	if !ok || len(m.snap.Partitions) != 9 || m.selected() != "late-key" || m.cursor != 0 {
		t.Fatalf("final model: %T, %d partitions, cursor %d on %q", tm.FinalModel(t),
			len(m.snap.Partitions), m.cursor, m.selected())
	}
	if src.calls() < 2 {
		t.Fatalf("%d Snapshot calls, want at least 2", src.calls())
	}
}

// TestRunStopsWithContext runs Run on the alternate screen and ends it by cancelling the
// context: it returns nil and leaves the alternate screen.
func TestRunStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, inW := io.Pipe()
	defer inW.Close()
	out := &testkit.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Source: newFake(fixture(true)), NoColor: true}, in, out)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "client-3") {
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot drawn:\n%q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the context ended")
	}
	o := out.String()
	if !strings.Contains(o, "\x1b[?1049h") || !strings.Contains(o, "\x1b[?1049l") {
		t.Error("the alternate screen was not entered and left")
	}
	if err := Run(ctx, Options{}, in, out); err == nil {
		t.Error("Run without a Source: no error")
	}
}
