package tui

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	durs := map[time.Duration]string{
		850 * time.Millisecond: "850ms", 4200 * time.Millisecond: "4.2s", 42 * time.Second: "42s",
		3*time.Minute + 12*time.Second: "3m12s", 2*time.Hour + 5*time.Minute: "2h05m", 76 * time.Hour: "3d04h",
	}
	for d, want := range durs {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
	counts := map[int64]string{0: "0", 9999: "9999", 12_345: "12.3k", 123_456: "123k", 1_234_567: "1.2M", 2_500_000_000: "2.5G"}
	for n, want := range counts {
		if got := fmtCount(n); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", n, got, want)
		}
	}
	gens := map[int64]string{0: "-", 7: "7", 9_999_999: "9999999", 10_000_000: "…000000", 1796123456789012: "…789012"}
	for g, want := range gens {
		if got := ShortGeneration(g); got != want {
			t.Errorf("ShortGeneration(%d) = %q, want %q", g, got, want)
		}
	}
	if got := fmtThousands(1234567); got != "1,234,567" {
		t.Errorf("fmtThousands = %q", got)
	}
	bars := []struct {
		lag, max int64
		want     string
	}{{0, 100, "     "}, {1, 1000, "▏    "}, {50, 100, "██▌  "}, {100, 100, "█████"}}
	for _, b := range bars {
		if got := lagBar(b.lag, b.max, 5); got != b.want {
			t.Errorf("lagBar(%d, %d) = %q, want %q", b.lag, b.max, got, b.want)
		}
	}
}
