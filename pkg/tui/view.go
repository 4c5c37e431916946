package tui

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/lipgloss"
)

// Smallest terminal the dashboard draws in; below it, it says so.
const (
	minWidth  = 40
	minHeight = 10
)

// View draws the whole screen: exactly height lines, none wider than width.
func (m *model) View() string {
	w, h := m.width, m.height
	if w < minWidth || h < minHeight {
		return clip(fmt.Sprintf("terminal too small (%dx%d), need %dx%d", w, h, minWidth, minHeight), max(w, 1))
	}
	lines := make([]string, 0, h)
	lines = append(lines, m.viewHeader(w)...)
	bodyH := h - len(lines) - footerHeight

	var body []string
	switch m.view {
	case viewInstances:
		body = m.viewInstances(w, bodyH)
	case viewDLQ:
		body = m.viewDLQs(w, bodyH)
	case viewAudit:
		body = m.viewAuditLog(w, bodyH)
	case viewDetail:
		body = m.viewDetail(w, bodyH)
	default:
		body = m.viewPartitions(w, bodyH)
	}
	switch {
	case m.showHelp:
		body = overlay(body, m.viewHelpBox(w), w, bodyH)
	case m.dialog != nil:
		body = overlay(body, m.viewDialog(w), w, bodyH)
	}
	for len(body) < bodyH {
		body = append(body, "")
	}
	lines = append(lines, body[:bodyH]...)
	lines = append(lines, m.viewStatus(w), m.viewKeys(w))
	for i, l := range lines {
		lines[i] = clip(l, w)
	}
	return strings.Join(lines, "\n")
}

// segment is a piece of a header line; when the line is too wide the segments with the
// lowest priority go first.
type segment struct {
	text string // styled
	prio int
}

func segmentsWidth(segs []segment) int {
	total := 0
	for i, s := range segs {
		total += lipgloss.Width(s.text)
		if i > 0 {
			total += len(segmentSep)
		}
	}
	return total
}

const segmentSep = "  "

func joinSegments(segs []segment, w int) string {
	for len(segs) > 1 && segmentsWidth(segs) > w {
		low := 0
		for i, s := range segs {
			if s.prio < segs[low].prio {
				low = i
			}
		}
		segs = append(segs[:low:low], segs[low+1:]...)
	}
	parts := make([]string, len(segs))
	for i, s := range segs {
		parts[i] = s.text
	}
	return strings.Join(parts, segmentSep)
}

func (m *model) labelled(label, value string, valueStyle lipgloss.Style) string {
	return m.st.label.Render(label+" ") + valueStyle.Render(value)
}

func (m *model) viewHeader(w int) []string {
	st := m.st
	now := m.clock.Now()
	addr := m.addr
	if addr == "" {
		addr = m.snap.Addr
	}
	// When a line is too narrow the least important segment goes first: the title, then
	// the rate, read-only, the instances, the refresh age.
	line1 := []segment{{st.title.Render("seqctl top"), 10}}
	if m.paused {
		line1 = append(line1, segment{st.paused.Render("PAUSED"), 95})
	}
	if m.readOnly {
		line1 = append(line1, segment{st.paused.Render("READ-ONLY"), 88})
	}
	line1 = append(line1, segment{m.labelled("redis", orDash(addr), st.value), 100})
	if m.haveSnap {
		inst := strconv.Itoa(m.sum.alive)
		if m.sum.stale > 0 {
			inst += fmt.Sprintf(" (%d stale)", m.sum.stale)
		}
		rate := "-"
		if m.rateKnown {
			rate = fmtRate(m.rate)
		}
		line1 = append(line1,
			segment{m.labelled("instances", inst, st.value), 90},
			segment{m.labelled("ev/s", rate, st.value), 80},
			segment{m.labelled("refreshed", fmtDur(now.Sub(m.lastOK))+" ago", st.value), 92})
	} else {
		line1 = append(line1, segment{st.label.Render("no data yet"), 92})
	}

	line2 := m.countSegments(false)
	if segmentsWidth(line2) > w {
		line2 = m.countSegments(true) // 10000 and 75.0M rather than dropping a count
	}

	lines := []string{joinSegments(line1, w), joinSegments(line2, w)}
	if m.lastErr != nil {
		lines = append(lines, m.viewBanner(w, now)...)
	}
	return lines
}

// countSegments is the second header line: the partitions by state and the total lag.
func (m *model) countSegments(compact bool) []segment {
	st := m.st
	if !m.haveSnap {
		return []segment{{st.label.Render("partitions -"), 100}}
	}
	s := m.sum
	num, lag := fmtThousands, fmtThousands
	if compact {
		num = func(n int64) string { return strconv.FormatInt(n, 10) }
		lag = fmtCount
	}
	count := func(label string, n int64, hot lipgloss.Style, prio int) segment {
		vs := st.value
		if n > 0 {
			vs = hot
		}
		return segment{m.labelled(label, num(n), vs), prio}
	}
	segs := []segment{
		count("partitions", int64(s.streams), st.value, 100),
		count("rows", int64(s.total), st.value, 60),
		count("running", int64(s.running), st.value, 50),
		count("idle", int64(s.idle), st.value, 40),
		count("halted", int64(s.halted), st.rowHalted, 90),
		count("unowned", int64(s.unowned), st.rowUnowned, 80),
	}
	if s.paused > 0 {
		segs = append(segs, count("paused", int64(s.paused), st.rowPaused, 87))
	}
	// Partitions waiting for a permit of their handler's limit key: not failing, held
	// back by a tenant's cap.
	if s.throttled > 0 {
		segs = append(segs, count("throttled", int64(s.throttled), st.rowThrottled, 86))
	}
	if s.other > 0 {
		segs = append(segs, count("other", int64(s.other), st.value, 30))
	}
	if s.sampled > 0 {
		// Halted, paused and throttled are read in full; the rest is a sample.
		what := "running, idle, unowned, backlog of " + num(int64(s.sampled)) + " rows"
		if s.unindexed {
			what += "; halts older than the state index unseen: partitions list --rebuild-index"
		}
		segs = append(segs, segment{m.labelled("sampled", what, st.value), 95})
	}
	segs = append(segs, segment{m.labelled("backlog", lag(s.lag), st.value), 70})
	// The handler-slot queue of the live instances: calls running out of the limit, and
	// partitions waiting for a slot (not failing: their attempt has not started).
	slots := num(int64(s.slotsInUse))
	if !s.slotsUnbounded {
		slots += "/" + num(int64(s.slotsLimit))
	}
	return append(segs,
		segment{m.labelled("slots", slots, st.value), 45},
		segment{m.labelled("waiting", num(int64(s.slotsWaiting)), st.value), 85})
}

// viewBanner is the two lines of a failed refresh: Redis unreachable, or a refresh that
// ran out of time while Redis answers (slow: the data shown is stale); what is shown and
// when the next attempt is, then the error.
func (m *model) viewBanner(w int, now time.Time) []string {
	facts := []string{"!! REDIS UNREACHABLE"}
	if m.slow {
		facts = []string{"!! REFRESH SLOW", "Redis answers, the refresh took over " + fmtDur(fetchTimeout)}
	}
	switch {
	case m.paused:
		facts = append(facts, "retries paused")
	case m.fetching:
		facts = append(facts, fmt.Sprintf("retry %d running", m.failures))
	default:
		wait := m.nextFetch.Sub(now).Round(100 * time.Millisecond)
		facts = append(facts, fmt.Sprintf("retry %d in %s", m.failures, fmtDur(wait)))
	}
	if m.haveSnap {
		facts = append(facts, "showing data from "+fmtDur(now.Sub(m.lastOK))+" ago")
	} else {
		facts = append(facts, "no data yet")
	}
	return []string{
		m.st.banner.Render(fit(strings.Join(facts, " · "), w, false)),
		m.st.banner.Render(fit("   "+oneLine(m.lastErr.Error()), w, false)),
	}
}

// viewStatus is the first footer line: the filter being typed, else the last message and,
// on the right if it fits, where the cursor is.
func (m *model) viewStatus(w int) string {
	if m.filtering {
		return m.filter.View() + m.st.dim.Render("  enter keep · esc clear")
	}
	var info string
	switch m.view {
	case viewPartitions, viewDetail:
		if m.haveSnap {
			info = "sort " + m.sortText()
			if m.filterTxt != "" {
				info += " · filter " + strconv.Quote(m.filterTxt)
			}
			if len(m.rows) > 0 {
				info += fmt.Sprintf(" · %d/%s", m.cursor+1, fmtThousands(int64(len(m.rows))))
			} else {
				info += " · 0/0"
			}
		}
	case viewInstances:
		if n := len(m.instOrder); n > 0 {
			info = fmt.Sprintf("instance %d/%d", m.icursor+1, n)
		}
	case viewDLQ:
		info = listInfo("DLQ", m.dlq, len(m.dlqRows))
	case viewAudit:
		info = listInfo("action", m.audit, len(m.auditRows))
	}
	var left string
	switch {
	case m.status == "" && m.filterErr != "" && (m.view == viewPartitions || m.view == viewDetail):
		left = m.st.statusWarn.Render("filter: " + m.filterErr + " (taken as text)")
	case m.status == "" && m.view == viewDLQ && m.dlq.err != nil:
		left = m.st.statusErr.Render("DLQs: " + oneLine(m.dlq.err.Error()))
	case m.status == "" && m.view == viewAudit && m.audit.err != nil:
		left = m.st.statusErr.Render("audit: " + oneLine(m.audit.err.Error()))
	}
	if m.status != "" {
		st := m.st.dim
		switch m.statusKind {
		case statusOK:
			st = m.st.statusOK
		case statusWarn:
			st = m.st.statusWarn
		case statusErr:
			st = m.st.statusErr
		}
		left = st.Render(m.status)
	}
	lw, iw := lipgloss.Width(left), textWidth(info)
	if info == "" || left != "" && lw+2+iw > w {
		return left
	}
	return left + strings.Repeat(" ", max(w-lw-iw, 0)) + m.st.dim.Render(info)
}

// viewKeys is the last line: the keys that do something right now.
func (m *model) viewKeys(w int) string {
	var b []key.Binding
	switch {
	case m.filtering:
		b = m.keys.filterHelp()
	case m.dialog != nil && m.dialog.act == actPause:
		b = m.keys.reasonHelp()
	case m.dialog != nil:
		b = m.keys.dialogHelp()
	case m.showHelp:
		b = []key.Binding{m.keys.Help, m.keys.Quit}
	case m.view == viewDetail:
		b = m.keys.detailHelp()
	case m.view == viewInstances, m.view == viewDLQ, m.view == viewAudit:
		b = []key.Binding{m.keys.SwitchView, m.keys.Back, m.keys.Pause, m.keys.Help, m.keys.Quit}
	default:
		b = m.keys.ShortHelp()
	}
	h := m.help
	h.Width = w
	return h.ShortHelpView(b)
}

// overlay puts box over the middle of body, replacing whole lines so that no styled line
// is cut in two.
func overlay(body []string, box string, w, h int) []string {
	for len(body) < h {
		body = append(body, "")
	}
	boxLines := strings.Split(box, "\n")
	if len(boxLines) > h {
		boxLines = boxLines[:h]
	}
	top := (h - len(boxLines)) / 2
	bw := lipgloss.Width(box)
	pad := strings.Repeat(" ", max((w-bw)/2, 0))
	out := append([]string(nil), body...)
	for i, l := range boxLines {
		out[top+i] = pad + l
	}
	return out
}

func (m *model) viewHelpBox(w int) string {
	bw := min(w-4, 76)
	inner := bw - 4 // border and padding
	h := m.help
	h.Width = inner
	legend := wrapLines("! marks a halted partition (always on top), > the cursor, PAUSED a partition an "+
		"operator paused: the event in flight finishes and no other starts until it is resumed (P pauses "+
		"with a reason, U resumes). BACKLOG counts the entries not handled yet; the bar is the backlog "+
		"relative to the largest. s/d/r need a halted head and y, and do nothing if the head is no longer "+
		"the entry id the dialog showed.", inner, 6)
	content := m.st.dialogTitle.Render("Keys") + "\n\n" + h.FullHelpView(m.keys.FullHelp()) + "\n\n" +
		m.st.dim.Render(strings.Join(legend, "\n"))
	return m.st.helpBox.Width(bw - 2).Render(content)
}

var actionText = map[action]struct{ title, what string }{
	actSkip: {"Skip the head entry",
		"The entry is acknowledged without being handled; the partition resumes with the next entry."},
	actDLQ: {"Move the head entry to the DLQ",
		"The entry is copied with its error to the partition's DLQ stream and acknowledged; the partition resumes with the next entry."},
	actRetry: {"Retry the head entry",
		"The halt is cleared and the owner tries the entry once more; if it fails again, the partition halts again."},
	actPause: {"Pause the partition",
		"Its owner finishes the event in flight and starts no other until it is resumed (U); other keys and handlers go on. The pause holds through restarts."},
	actResume: {"Resume the partition",
		"Its owner starts its next event at once, in order."},
}

func (m *model) viewDialog(w int) string {
	d := m.dialog
	if d.act.onPartition() {
		return m.viewPauseDialog(w)
	}
	bw := min(w-4, 72)
	inner := bw - 4 // border and padding
	t := actionText[d.act]
	row := func(label, value string) string {
		return m.st.label.Render(fit(label, 10, false)) + value
	}
	lines := []string{
		m.st.dialogTitle.Render(t.title + "?"),
		"",
		row("partition", d.ref.String()),
		row("head", m.st.value.Render(d.expectID)),
		row("owner", fmt.Sprintf("%s gen %d", orDash(d.part.Owner), d.part.Generation)),
		"",
	}
	lines = append(lines, wrapLines(t.what, inner, 3)...)
	lines = append(lines, wrapLines("Nothing is done if the head is no longer this entry.", inner, 2)...)
	lines = append(lines, "", m.st.value.Render("y")+" confirm   "+m.st.value.Render("n/esc")+" cancel")
	for i, l := range lines {
		lines[i] = clip(l, inner)
	}
	return m.st.dialog.Width(bw - 2).Render(strings.Join(lines, "\n"))
}
