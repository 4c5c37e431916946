package tui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// Text helpers for the views: widths, padding and compact numbers. None of them style.

// textWidth is the display width of plain text (fast for ASCII, the common case).
func textWidth(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return ansi.StringWidth(s)
		}
	}
	return len(s)
}

// fit truncates s to w cells (with "…") and pads it to exactly w, left or right aligned.
func fit(s string, w int, right bool) string {
	if w <= 0 {
		return ""
	}
	n := textWidth(s)
	if n > w {
		s = ansi.Truncate(s, w, "…")
		n = textWidth(s)
	}
	if n == w {
		return s
	}
	pad := strings.Repeat(" ", w-n)
	if right {
		return pad + s
	}
	return s + pad
}

// clip truncates a (possibly styled) line to w cells.
func clip(s string, w int) string {
	if ansi.StringWidth(s) <= w {
		return s
	}
	return ansi.Truncate(s, w, "…")
}

// fmtDur is a compact duration: 850ms, 4.2s, 42s, 3m12s, 2h05m, 3d04h.
func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// fmtDurOr is fmtDur, or "-" for a zero or negative duration (none).
func fmtDurOr(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmtDur(d)
}

// fmtCount is a compact count for narrow columns: 9999, 12.3k, 123k, 1.2M, 1.2G.
func fmtCount(n int64) string {
	neg := ""
	if n < 0 {
		neg, n = "-", -n
	}
	f := float64(n)
	switch {
	case n < 10_000:
		return neg + strconv.FormatInt(n, 10)
	case n < 100_000:
		return neg + fmt.Sprintf("%.1fk", f/1e3)
	case n < 1_000_000:
		return neg + fmt.Sprintf("%.0fk", f/1e3)
	case n < 100_000_000:
		return neg + fmt.Sprintf("%.1fM", f/1e6)
	case n < 1_000_000_000:
		return neg + fmt.Sprintf("%.0fM", f/1e6)
	}
	return neg + fmt.Sprintf("%.1fG", f/1e9)
}

// genDigits is how many trailing digits ShortGeneration keeps.
const genDigits = 6

// ShortGeneration is a fencing generation for a narrow column (at most 7 cells): the
// whole number up to 7 digits, else "…" and its last 6 digits (1796123456789012 is
// "…789012"), "-" for none (0). A generation is never below the Redis time in
// microseconds at its grant, so its leading digits are the same for every lease of a
// deployment for days, and its last six are the microseconds within a second: two
// owners' generations differ there. The dashboard's table and the table of 'seqctl
// partitions list' print it; their detail views, -o wide and JSON print the whole number.
func ShortGeneration(g int64) string {
	if g == 0 {
		return "-"
	}
	s := strconv.FormatInt(g, 10)
	if len(s) <= genDigits+1 {
		return s
	}
	return "…" + s[len(s)-genDigits:]
}

// fmtThousands writes n with thousands separators: 12,345.
func fmtThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtLag is a lag with separators, "?" when unknown (-1).
func fmtLag(n int64) string {
	if n < 0 {
		return "?"
	}
	return fmtThousands(n)
}

// fmtRate is an events/s figure.
func fmtRate(r float64) string {
	if r < 10 {
		return fmt.Sprintf("%.1f", r)
	}
	return fmtThousands(int64(r + 0.5))
}

var barEighths = []string{"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"}

// lagBar draws lag as a bar of w cells, full at maxLag; any lag shows at least a sliver.
func lagBar(lag, maxLag int64, w int) string {
	if w <= 0 {
		return ""
	}
	if lag <= 0 || maxLag <= 0 {
		return strings.Repeat(" ", w)
	}
	eighths := int(float64(lag) / float64(maxLag) * float64(w*8))
	eighths = max(min(eighths, w*8), 1)
	full, part := eighths/8, eighths%8
	s := strings.Repeat("█", full) + barEighths[part]
	cells := full
	if part > 0 {
		cells++
	}
	return s + strings.Repeat(" ", w-cells)
}

// maxPayload is as much of a payload as the detail pane formats.
const maxPayload = 64 << 10

// prettyPayload is the payload as lines: indented JSON when it parses, else as is. A
// payload over maxPayload is cut (and then shown as it is).
func prettyPayload(s string) []string {
	if len(s) > maxPayload {
		s = s[:maxPayload] + "…"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", "  "); err == nil {
		s = b.String()
	}
	s = strings.ReplaceAll(s, "\t", "  ")
	s = strings.ReplaceAll(s, "\r", "")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// wrapLines word-wraps s to w cells and returns at most n lines (the last one ending in
// "…" when s was longer).
func wrapLines(s string, w, n int) []string {
	if w <= 0 || n <= 0 {
		return nil
	}
	lines := strings.Split(ansi.Wrap(s, w, ""), "\n")
	if len(lines) > n {
		lines = lines[:n]
		lines[n-1] = fit(lines[n-1]+" …", w, false)
		lines[n-1] = strings.TrimRight(lines[n-1], " ")
	}
	return lines
}
