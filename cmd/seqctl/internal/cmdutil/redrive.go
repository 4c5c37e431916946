package cmdutil

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/seqctl/seqctl/pkg/admin"
)

// A redrive acts on many items one at a time, each its own compare-and-act, after an
// outage: 'dlq replay --all' replays the entries of a DLQ, 'head retry --category'
// retries the halted partitions. What they share is here: the pace (--rate), the
// progress line on a terminal, and the stop between two items (Ctrl-C), which is
// recorded in the audit log and says how to go on.

// Redrive is one run of the items of a redrive.
type Redrive struct {
	// stopCtx ends when the operator stops the run (Ctrl-C, SIGTERM, or the command's
	// context ends); work never ends, so that an item under way is always finished.
	stopCtx, Work context.Context
	release       context.CancelFunc
	pace          *pacer
	bar           *ReplayProgress
}

// StartRedrive starts a redrive in ctx at rate (the zero Rate: no pace), drawing bar.
// end must be called when it is over.
func StartRedrive(ctx context.Context, rate Rate, bar *ReplayProgress) *Redrive {
	stopCtx, release := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(stopCtx, release) // a second Ctrl-C ends the process at once
	return &Redrive{stopCtx: stopCtx, Work: context.WithoutCancel(ctx), release: release, pace: newPacer(rate), bar: bar}
}

// Next waits until the next item may start. False: the operator stopped the run, and
// no other item must start (the progress line is erased).
func (r *Redrive) Next() bool {
	if r.pace.wait(r.stopCtx) != nil {
		r.bar.Clear()
		return false
	}
	return true
}

// Progress redraws the progress line for n items done.
func (r *Redrive) Progress(n int) { r.bar.Update(n) }

// Printf prints a line to w over the progress line (e.g. a warning).
func (r *Redrive) Printf(w io.Writer, format string, args ...any) {
	r.bar.Clear()
	fmt.Fprintf(w, format, args...)
}

// End stops listening for Ctrl-C and erases the progress line.
func (r *Redrive) End() {
	r.release()
	r.bar.Clear()
}

// Stopped records rec in the audit log as the operator's stop (outcome stopped, with
// detail) and returns the error that ends the command with status 1: "stopped after
// done of n; run the same command again to " and again.
func (r *Redrive) Stopped(adm Admin, ios *IOStreams, rec admin.AuditEntry, detail string, done, n int, again string) error {
	rec.Outcome, rec.Detail = admin.OutcomeStopped, detail
	if err := adm.Record(r.Work, rec); err != nil {
		fmt.Fprintf(ios.ErrOut, "warning: the stop was not recorded in the audit log: %v\n", err)
	}
	return &ExitError{Code: ExitFailure, Err: fmt.Errorf("stopped after %d of %d; run the same command again to %s", done, n, again)}
}

// ParseRateFlag parses the value of --rate for command; a bad one is a usage error.
func ParseRateFlag(command, value string) (Rate, error) {
	r, err := parseRate(value)
	if err != nil {
		return Rate{}, UsageErrorf(command, "invalid value %q for --rate: %v", value, err)
	}
	return r, nil
}

// PaceText says how fast n items go at rate: ", at most 50/s (about 10s)"; "" for the
// zero Rate.
func PaceText(rate Rate, n int) string {
	if rate.N == 0 {
		return ""
	}
	if d := rate.duration(n); d >= time.Second {
		return fmt.Sprintf(", at most %s (about %s)", rate, fmtLeft(d))
	}
	return ", at most " + rate.String()
}

// StderrIsTerminal says the stderr of f is a terminal, where a redrive draws its
// progress.
func StderrIsTerminal(f *Factory) bool {
	file, ok := f.IOStreams.ErrOut.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// ReplayProgress draws "replayed 120/500 (50/s, about 8s left)" on one line of a
// terminal, redrawn in place at most every progressEvery, the first time progressEvery
// after the start (a short redrive draws nothing). Off, it draws nothing.
type ReplayProgress struct {
	w     io.Writer
	on    bool
	Total int
	now   func() time.Time
	// Done is the word before the count: "replayed" when "".
	Done string
	// start is when the redrive started, last when the line was drawn (start before).
	start, last time.Time
	Drawn       bool
}

// progressEvery is the least time between two redraws of a progress line.
const progressEvery = 250 * time.Millisecond

func NewReplayProgress(w io.Writer, on bool, total int, now func() time.Time) *ReplayProgress {
	t := now()
	return &ReplayProgress{w: w, on: on, Total: total, now: now, start: t, last: t}
}

// Update draws the line for n items done, unless it was drawn less than progressEvery
// ago.
func (p *ReplayProgress) Update(n int) {
	if !p.on {
		return
	}
	now := p.now()
	if now.Sub(p.last) < progressEvery {
		return
	}
	p.last, p.Drawn = now, true
	fmt.Fprintf(p.w, "\r\x1b[2K%s", p.Line(n, now.Sub(p.start)))
}

// Line is the progress after n items in took: the mean rate so far and the time the
// rest takes at it.
func (p *ReplayProgress) Line(n int, took time.Duration) string {
	perSecond := float64(n) / took.Seconds()
	left := time.Duration(float64(p.Total-n) / perSecond * float64(time.Second))
	done := p.Done
	if done == "" {
		done = "replayed"
	}
	return fmt.Sprintf("%s %d/%d (%s, about %s left)", done, n, p.Total, fmtPerSecond(perSecond), fmtLeft(left))
}

// Clear erases the line, so that a message can be printed on a clean one.
func (p *ReplayProgress) Clear() {
	if p.Drawn {
		fmt.Fprint(p.w, "\r\x1b[2K")
		p.Drawn = false
	}
}

// fmtPerSecond renders a rate: "50/s", "2.5/s", or per minute below one a second ("30/m").
func fmtPerSecond(perSecond float64) string {
	switch {
	case perSecond >= 10:
		return fmt.Sprintf("%.0f/s", perSecond)
	case perSecond >= 1:
		return fmt.Sprintf("%.1f/s", perSecond)
	}
	return fmt.Sprintf("%.0f/m", perSecond*60)
}

// fmtLeft renders a time still to go, rounded up to the second: "8s", "2m05s", "1h02m".
func fmtLeft(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	if secs < 60 {
		return fmt.Sprintf("%ds", secs)
	}
	return FmtMS(secs * 1000)
}
