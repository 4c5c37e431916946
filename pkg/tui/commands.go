package tui

import (
	"context"
	"errors"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// All I/O happens here, inside tea.Cmds, each bounded by a deadline. A command captures
// the values it needs (source, ref, expected id) when it is made and never reads the model.

const (
	// fetchTimeout bounds one Source.Snapshot or Source.Head call. A refresh that takes
	// longer counts as a failure (banner, backoff): "slow" when Redis answers a PING,
	// else "unreachable".
	fetchTimeout = 5 * time.Second
	// actionTimeout bounds one skip / move-to-DLQ / retry / pause / resume.
	actionTimeout = 10 * time.Second
	// maxBackoff caps the delay between refresh attempts while Redis is unreachable.
	maxBackoff = 30 * time.Second
)

func fetchSnapshot(ctx context.Context, src Source) tea.Cmd {
	return func() tea.Msg {
		fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
		s, err := src.Snapshot(fctx)
		return snapshotMsg{snap: s, err: err, slow: err != nil && timedOut(fctx, err) && answers(ctx, src)}
	}
}

// pingTimeout bounds the PING that tells a slow Redis from an unreachable one.
const pingTimeout = time.Second

// timedOut reports whether a failed call ran out of time: its deadline passed, or the
// connection timed out waiting for a reply.
func timedOut(ctx context.Context, err error) bool {
	var t interface{ Timeout() bool }
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}

// answers reports whether the source's Redis answers a PING within pingTimeout; false
// when the source cannot tell (no Pinger).
func answers(ctx context.Context, src Source) bool {
	p, ok := src.(Pinger)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return p.Ping(ctx) == nil
}

func fetchHead(ctx context.Context, src Source, ref PartitionRef) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
		d, err := src.Head(ctx, ref)
		return headMsg{ref: ref, detail: d, err: err}
	}
}

// fetchRows fetches the rows of a list view (the DLQs, the audit log) with list, and
// sends them back as a listMsg.
func fetchRows[T any](ctx context.Context, list func(context.Context) ([]T, error)) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
		rows, err := list(ctx)
		return listMsg[T]{rows: rows, err: err}
	}
}

func runAction(ctx context.Context, src Source, act action, ref PartitionRef, expectID string) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		var err error
		switch act {
		case actSkip:
			err = src.Skip(ctx, ref, expectID)
		case actDLQ:
			err = src.MoveToDLQ(ctx, ref, expectID)
		case actRetry:
			err = src.Retry(ctx, ref, expectID)
		}
		return actionMsg{act: act, ref: ref, expectID: expectID, err: err}
	}
}

// runPartitionAction pauses (with reason) or resumes the partition ref.
func runPartitionAction(ctx context.Context, src PauseSource, act action, ref PartitionRef, reason string) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		var err error
		if act == actPause {
			err = src.Pause(ctx, ref, reason)
		} else {
			err = src.Resume(ctx, ref)
		}
		return actionMsg{act: act, ref: ref, err: err}
	}
}

// backoff is the wait before refresh attempt n+1 after n consecutive failures: the
// refresh interval, doubled per failure, at most maxBackoff.
func backoff(refresh time.Duration, failures int) time.Duration {
	d := refresh
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// noSource stands in for a missing Options.Source: every call fails, so the dashboard
// shows why instead of crashing.
type noSource struct{}

var errNoSource = errors.New("tui: no Source configured")

func (noSource) Snapshot(context.Context) (Snapshot, error) { return Snapshot{}, errNoSource }
func (noSource) Head(context.Context, PartitionRef) (HeadDetail, error) {
	return HeadDetail{}, errNoSource
}
func (noSource) Skip(context.Context, PartitionRef, string) error      { return errNoSource }
func (noSource) MoveToDLQ(context.Context, PartitionRef, string) error { return errNoSource }
func (noSource) Retry(context.Context, PartitionRef, string) error     { return errNoSource }

// realClock is wall time. Its ticks end with ctx, so no timer goroutine outlives Run.
type realClock struct{ ctx context.Context }

func (realClock) Now() time.Time { return time.Now() }

func (c realClock) Tick(d time.Duration) tea.Cmd {
	return func() tea.Msg {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case now := <-t.C:
			return tickMsg(now)
		case <-c.ctx.Done():
			return nil
		}
	}
}
