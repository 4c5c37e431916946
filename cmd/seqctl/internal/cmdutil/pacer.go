package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seqctl/seqctl/internal/ctxwait"
)

// Rate is a pace of actions: at most N actions in any one Per (a second or a minute).
// The zero Rate sets no pace.
type Rate struct {
	N   int
	Per time.Duration
}

// rateForms names the accepted forms of a rate, for usage errors and help texts.
const rateForms = "N/s, N/m or N (per second), N a positive whole number, e.g. 50/s"

// parseRate parses the value of a --rate flag: "N/s", "N/m" or a plain "N" (per second),
// N a positive whole number.
func parseRate(s string) (Rate, error) {
	num, unit, _ := strings.Cut(s, "/")
	var per time.Duration
	switch unit {
	case "", "s":
		per = time.Second
	case "m":
		per = time.Minute
	default:
		return Rate{}, fmt.Errorf("unknown unit %q: want %s", "/"+unit, rateForms)
	}
	if strings.HasSuffix(s, "/") {
		return Rate{}, fmt.Errorf("missing unit after /: want %s", rateForms)
	}
	n, err := strconv.Atoi(num)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return Rate{}, fmt.Errorf("%s is too large: want %s", num, rateForms)
	case err != nil || strings.HasPrefix(num, "+"):
		return Rate{}, fmt.Errorf("want %s", rateForms)
	case n <= 0:
		return Rate{}, fmt.Errorf("the rate must be positive: want %s", rateForms)
	}
	return Rate{N: n, Per: per}, nil
}

// String is the rate as --rate takes it: "50/s", "30/m"; "" for no pace.
func (r Rate) String() string {
	switch r.Per {
	case time.Second:
		return strconv.Itoa(r.N) + "/s"
	case time.Minute:
		return strconv.Itoa(r.N) + "/m"
	case 0:
		return ""
	}
	return fmt.Sprintf("%d per %s", r.N, r.Per)
}

// interval is the least time between the starts of two actions: Per/N, rounded up to
// the nanosecond so that N+1 starts never fit in one Per (0: no pace).
func (r Rate) interval() time.Duration {
	if r.N <= 0 || r.Per <= 0 {
		return 0
	}
	return (r.Per + time.Duration(r.N) - 1) / time.Duration(r.N)
}

// duration is about how long n actions take at the rate: the time from the first start
// to the last.
func (r Rate) duration(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return time.Duration(n-1) * r.interval()
}

// pacer spaces the starts of actions so that at most Rate.N of them start in any one
// Rate.Per. An action starts interval after the start of the one before it, or at once
// when that moment has passed: a slow action is never made up for by a burst. The zero
// interval does not pace. Its clock is now and sleep, which tests replace.
type pacer struct {
	interval time.Duration
	now      func() time.Time
	// sleep waits d, or until ctx ends; it reports whether d passed (ctxwait.Sleep).
	sleep func(ctx context.Context, d time.Duration) bool
	// last is the start of the previous action; started says there was one.
	last    time.Time
	started bool
}

// newPacer returns a pacer at rate r on the real clock.
func newPacer(r Rate) *pacer {
	return &pacer{interval: r.interval(), now: time.Now, sleep: ctxwait.Sleep}
}

// wait returns when the next action may start: at the start of the previous one plus
// the interval, or now when that is past. It returns ctx's error, and the action must
// not start, when ctx has ended or ends first.
func (p *pacer) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.started && p.interval > 0 {
		if d := p.last.Add(p.interval).Sub(p.now()); d > 0 {
			if !p.sleep(ctx, d) {
				return ctx.Err()
			}
		}
	}
	p.last, p.started = p.now(), true
	return nil
}
