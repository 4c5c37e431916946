// Package tui is the live dashboard behind `seqctl top`: a header with the deployment's
// health, the partitions table (halted partitions pinned on top, paused ones marked), the
// instances, a detail pane per partition, the operator actions on a halted head (skip,
// move to the DLQ, retry), each confirmed and carried out as a compare-and-act on the
// head entry id the operator saw, and the pause (with a reason) and resume of a
// partition.
//
// The dashboard reads and writes only through a Source (an adapter over pkg/admin in the
// binary, a fake in tests). It refreshes once per Options.Refresh; while Redis is
// unreachable, or a refresh runs out of time while Redis answers a PING (slow, not
// unreachable: see Pinger), it keeps the last data under a banner and retries with
// backoff. A source may read a large deployment in part (Snapshot.Totals): the header
// then says which counts come from the rows read.
//
// Files: source.go (the Source contract and its data), model.go (state, and what is
// derived once per refresh), update.go, view.go / table.go / detail.go / format.go
// (rendering only, no state changes), styles.go (every colour), keys.go, msgs.go,
// commands.go (all I/O, inside tea.Cmds), and pause.go (the pause and resume keys and
// their dialog).
package tui

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

const (
	// DefaultRefresh is the refresh interval when Options.Refresh is zero.
	DefaultRefresh = time.Second
	// minRefresh is the shortest refresh interval accepted; shorter values are raised.
	minRefresh = 100 * time.Millisecond
)

// Options configure the dashboard.
type Options struct {
	// Source is where the data comes from and where actions go. Required.
	Source Source
	// Refresh is the interval between snapshots (default DefaultRefresh, at least 100 ms).
	Refresh time.Duration
	// ReadOnly refuses skip / move-to-DLQ / retry with a message (--readonly).
	ReadOnly bool
	// NoColor renders without any colour or text attribute; the caller maps NO_COLOR and
	// --no-color to it. Output that is not a terminal gets no colour either way.
	NoColor bool
	// Addr is the Redis address shown in the header; when empty, Snapshot.Addr is shown.
	Addr string
}

// New returns the dashboard as a Bubble Tea model, rendering for standard output. Its
// source calls use context.Background(); use Run to tie them to a context.
func New(opts Options) tea.Model {
	return newModel(context.Background(), opts, newRenderer(os.Stdout, opts.NoColor))
}

// Run runs the dashboard full screen (alternate screen) on in / out until the operator
// quits or ctx ends; both return nil. in is normally os.Stdin (nil: no keyboard), out
// os.Stdout; colour follows out unless opts.NoColor. Source calls are bounded and use ctx.
func Run(parent context.Context, opts Options, in io.Reader, out io.Writer) error {
	if opts.Source == nil {
		return errors.New("tui: Options.Source is required")
	}
	// Cancelled when Run returns: ends the tick timer and any source call in flight.
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	m := newModel(ctx, opts, newRenderer(out, opts.NoColor))
	p := tea.NewProgram(m,
		tea.WithContext(ctx),
		tea.WithInput(in),
		tea.WithOutput(out),
		tea.WithAltScreen(),
	)
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && parent.Err() != nil || errors.Is(err, tea.ErrInterrupted) {
		return nil
	}
	return err
}
