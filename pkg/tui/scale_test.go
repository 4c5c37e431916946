package tui

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// errRefreshTimeout is a refresh that ran out of time.
var errRefreshTimeout = fmt.Errorf("i/o timeout: %w", context.DeadlineExceeded)

// sampledFixture is the fixture as a source reads a large deployment: its rows, with
// totals counted in Redis.
func sampledFixture() Snapshot {
	s := fixture(true)
	s.Totals = &Totals{Streams: 1_000_000, Rows: 1_000_000}
	return s
}

// A refresh that runs out of time while Redis answers a PING is shown as slow, with the
// last data, never as unreachable; one that fails while the PING fails too is
// unreachable; the next good refresh clears either.
func TestSlowRefreshIsNotUnreachable(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		pingErr  error
		want     string
		wantSlow bool
	}{
		{"timeout, Redis answers", fmt.Errorf("engine: redis unavailable: %w", errRefreshTimeout), nil, "REFRESH SLOW", true},
		{"timeout, no PING either", fmt.Errorf("engine: redis unavailable: %w", errRefreshTimeout), errRedisDown, "REDIS UNREACHABLE", false},
		{"connection refused, PING answers", errRedisDown, nil, "REDIS UNREACHABLE", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newFake(fixture(true))
			h := newHarness(t, src, Options{}, 120, 40)
			src.set(Snapshot{}, tt.err)
			src.pingErr = tt.pingErr
			h.advance(time.Second)
			v := h.m.View()
			if h.m.slow != tt.wantSlow || !strings.Contains(v, tt.want) || len(h.m.rows) != 8 {
				t.Fatalf("slow %v, %d rows, view:\n%s\nwant %q, slow %v and the last rows", h.m.slow, len(h.m.rows), v, tt.want, tt.wantSlow)
			}
			if tt.wantSlow && strings.Contains(v, "UNREACHABLE") {
				t.Fatalf("a slow refresh shown as unreachable:\n%s", v)
			}
			src.set(fixture(true), nil)
			h.advance(2 * time.Second)
			if v := h.m.View(); h.m.slow || strings.Contains(v, "SLOW") || strings.Contains(v, "UNREACHABLE") {
				t.Fatalf("the banner stayed after a good refresh:\n%s", v)
			}
		})
	}
}

// With Totals the header shows Redis's counts of partitions and rows, and says which
// counts come from the rows read.
func TestSampledHeader(t *testing.T) {
	h := newHarness(t, newFake(sampledFixture()), Options{}, 200, 40)
	v := h.m.View()
	for _, s := range []string{"partitions 1,000,000", "rows 1,000,000", "sampled running, idle, unowned, backlog of 8 rows"} {
		if !strings.Contains(v, s) {
			t.Errorf("header lacks %q:\n%s", s, v)
		}
	}
	if h.m.sum.halted != 2 || h.m.sum.total != 1_000_000 || h.m.sum.sampled != 8 {
		t.Errorf("summary = %+v, want the fixture's 2 halted, 1,000,000 rows, 8 sampled", h.m.sum)
	}
}
