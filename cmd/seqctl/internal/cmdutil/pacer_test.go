package cmdutil

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// fakeClock is a pacer's clock that only moves when told to, or when the pacer sleeps.
type fakeClock struct {
	t        time.Time
	slept    []time.Duration
	cancel   context.CancelFunc // called by the sleep of number cancelAt (1-based); 0: never
	cancelAt int
}

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) bool {
	c.slept = append(c.slept, d)
	if c.cancelAt == len(c.slept) {
		c.cancel()
		return false
	}
	c.t = c.t.Add(d)
	return true
}

func (c *fakeClock) pacer(r Rate) *pacer {
	return &pacer{interval: r.interval(), now: c.now, sleep: c.sleep}
}

// maxInWindow is the largest number of starts in any window [s, s+per) that begins at
// a start (a window holding the most starts can always be moved to begin at one).
func maxInWindow(starts []time.Time, per time.Duration) int {
	most, j := 0, 0
	for i := range starts {
		for j < len(starts) && starts[j].Sub(starts[i]) < per {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// At any rate, with actions of any length, no window of one Per holds more than N
// starts; at rates whose interval does not divide Per evenly too.
func TestPacerNeverMoreThanNPerWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range []Rate{{50, time.Second}, {3, time.Second}, {7, time.Second}, {1, time.Second}, {30, time.Minute}, {7, time.Minute}, {1000, time.Second}} {
		c := &fakeClock{t: time.Unix(1700000000, 0)}
		p := c.pacer(r)
		var starts []time.Time
		for range 2000 {
			if err := p.wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			starts = append(starts, c.t)
			// Most actions are quick; some take a while, a few longer than the interval.
			switch k := rng.IntN(10); {
			case k < 7:
				c.t = c.t.Add(time.Duration(rng.Int64N(int64(r.interval()/4) + 1)))
			case k < 9:
				c.t = c.t.Add(time.Duration(rng.Int64N(int64(r.interval()) + 1)))
			default:
				c.t = c.t.Add(time.Duration(rng.Int64N(int64(3 * r.interval()))))
			}
		}
		if got := maxInWindow(starts, r.Per); got > r.N {
			t.Errorf("%s: %d starts in one window of %s, want at most %d", r, got, r.Per, r.N)
		}
		for i := 1; i < len(starts); i++ {
			if d := starts[i].Sub(starts[i-1]); d < r.interval() {
				t.Fatalf("%s: starts %d and %d are %s apart, less than the interval %s", r, i-1, i, d, r.interval())
			}
		}
	}
}

// With actions that take no time the pacer runs at exactly the rate: N starts in the
// first window, the first one at once.
func TestPacerRunsAtTheRate(t *testing.T) {
	c := &fakeClock{t: time.Unix(1700000000, 0)}
	p := c.pacer(Rate{50, time.Second})
	t0 := c.t
	for range 51 {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.t.Sub(t0); got != time.Second {
		t.Errorf("51 starts took %s, want 1s (the first at once, then one every 20ms)", got)
	}
	if len(c.slept) != 50 || c.slept[0] != 20*time.Millisecond {
		t.Errorf("slept %v, want 50 sleeps of 20ms", c.slept)
	}
}

// After a stall (an action that took 3 s at 10/s) the next action starts at once and
// the ones after it are spaced again: no burst to catch up on the 30 actions the stall
// "owed".
func TestPacerNoBurstAfterAStall(t *testing.T) {
	c := &fakeClock{t: time.Unix(1700000000, 0)}
	p := c.pacer(Rate{10, time.Second})
	var starts []time.Time
	step := func() {
		t.Helper()
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, c.t)
	}
	step()
	step()
	c.t = c.t.Add(3 * time.Second) // the second action stalls
	stalledUntil := c.t
	for range 10 {
		step()
	}
	if !starts[2].Equal(stalledUntil) {
		t.Errorf("the action after the stall started %s after it, want at once", starts[2].Sub(stalledUntil))
	}
	for i := 3; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-1]); d != 100*time.Millisecond {
			t.Errorf("start %d came %s after the one before, want 100ms (no burst)", i, d)
		}
	}
	if got := maxInWindow(starts, time.Second); got > 10 {
		t.Errorf("%d starts in one second, want at most 10", got)
	}
}

// A cancelled context stops the pacer before the next action, whether it was cancelled
// before the wait or during its sleep; no pace still stops on a cancelled context.
func TestPacerStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &fakeClock{t: time.Unix(1700000000, 0), cancel: cancel, cancelAt: 3}
	p := c.pacer(Rate{5, time.Second})
	n := 0
	for n < 100 && p.wait(ctx) == nil {
		n++
	}
	if n != 3 {
		t.Errorf("%d actions started, want 3 (cancelled in the third sleep)", n)
	}
	if err := p.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait after the cancel = %v, want context.Canceled", err)
	}
	unpaced := newPacer(Rate{})
	if err := unpaced.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("unpaced wait on a cancelled context = %v, want context.Canceled", err)
	}
	if err := unpaced.wait(context.Background()); err != nil {
		t.Errorf("unpaced wait = %v", err)
	}
}

func TestParseRate(t *testing.T) {
	for _, tt := range []struct {
		in       string
		want     Rate
		interval time.Duration
		wantErr  string
	}{
		{in: "50/s", want: Rate{50, time.Second}, interval: 20 * time.Millisecond},
		{in: "50", want: Rate{50, time.Second}, interval: 20 * time.Millisecond},
		{in: "30/m", want: Rate{30, time.Minute}, interval: 2 * time.Second},
		{in: "1/s", want: Rate{1, time.Second}, interval: time.Second},
		{in: "3/s", want: Rate{3, time.Second}, interval: 333333334}, // rounded up: 4 never fit in 1s
		{in: "7/m", want: Rate{7, time.Minute}, interval: 8571428572},
		{in: "0", wantErr: "must be positive"},
		{in: "0/m", wantErr: "must be positive"},
		{in: "-5/s", wantErr: "must be positive"},
		{in: "+5", wantErr: "want N/s, N/m or N"},
		{in: "", wantErr: "want N/s, N/m or N"},
		{in: "fast", wantErr: "want N/s, N/m or N"},
		{in: "2.5/s", wantErr: "want N/s, N/m or N"},
		{in: "1e3", wantErr: "want N/s, N/m or N"},
		{in: " 50/s", wantErr: "want N/s, N/m or N"},
		{in: "50/h", wantErr: `unknown unit "/h"`},
		{in: "50/sec", wantErr: `unknown unit "/sec"`},
		{in: "50/s/m", wantErr: `unknown unit "/s/m"`},
		{in: "50/", wantErr: "missing unit"},
		{in: "/s", wantErr: "want N/s, N/m or N"},
		{in: "99999999999999999999/s", wantErr: "too large"},
	} {
		got, err := parseRate(tt.in)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseRate(%q) = %v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("parseRate(%q): %v", tt.in, err)
		case got != tt.want || got.interval() != tt.interval:
			t.Errorf("parseRate(%q) = %+v (interval %s), want %+v (interval %s)", tt.in, got, got.interval(), tt.want, tt.interval)
		case strings.TrimSuffix(got.String(), "/s") != strings.TrimSuffix(tt.in, "/s"):
			t.Errorf("parseRate(%q).String() = %q", tt.in, got.String())
		}
	}
}
