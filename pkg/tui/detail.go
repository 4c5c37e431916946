package tui

import (
	"fmt"
	"strings"
)

// viewDetail is the detail pane of one partition: its row, its lanes, its head entry with
// the halt reason, and as much of the payload as fits.
func (m *model) viewDetail(w, h int) []string {
	st := m.st
	p, listed := m.lookup(m.detailRef)
	lines := make([]string, 0, h)
	lines = append(lines, m.detailSummary(p, listed)...)
	lines = append(lines, "")

	switch {
	case m.detailErr != nil:
		lines = append(lines, st.statusErr.Render("cannot read the head: "+oneLine(m.detailErr.Error())))
		if m.detail == nil {
			return lines
		}
	case m.detail == nil:
		return append(lines, st.dim.Render("reading the head…"))
	}
	d := m.detail
	lines = append(lines, m.detailLanes(d.Lanes, w)...)
	if d.EntryID == "" {
		return append(lines, st.section.Render("HEAD")+" "+st.dim.Render("none: nothing is waiting on this partition"))
	}
	lines = append(lines, m.detailHead(d, w)...)
	if p.State == StateHalted && p.HaltedEntryID != "" && p.HaltedEntryID != d.EntryID {
		lines = append(lines, st.statusWarn.Render("  the halt record names "+p.HaltedEntryID+"; actions use that id"))
	}
	// The payload gets what is left.
	return append(lines, m.detailPayload(h-len(lines)-2)...)
}

// detailSummary is the pane's first lines: the partition with its state, then its row
// of the table in words, or why the last snapshot has no row for it, and its pause.
func (m *model) detailSummary(p Partition, listed bool) []string {
	st := m.st
	title := st.title.Render(m.detailRef.String())
	if !listed {
		return []string{title, st.statusWarn.Render("not in the last snapshot (reaped, or filtered out by the source)")}
	}
	stStyle := st.alertStyle(p.State, st.value)
	lines := []string{title + "  " + stStyle.Render(stateText(p.State)), st.label.Render(fmt.Sprintf(
		"owner %s · gen %d · lease %s · backlog %s · lag %s · pending %s · head age %s",
		orDash(p.Owner), p.Generation, fmtDurOr(p.LeaseTTL), fmtLag(p.Backlog()), fmtLag(p.Lag),
		fmtThousands(p.Pending), fmtDurOr(p.HeadAge)))}
	if pi := p.Pause; pi != nil {
		lines = append(lines, st.rowPaused.Render("paused "+pauseInfoText(pi)+": "+oneLine(pi.Reason)))
	}
	if p.LimitValue != "" {
		lines = append(lines, st.rowThrottled.Render("throttled: waiting for a permit of limit value "+oneLine(p.LimitValue)+" (seqctl limits get)"))
	}
	return lines
}

// detailLanes is the LANES section: a line per lane stream with its length and pending
// entries; nothing when the source gave none.
func (m *model) detailLanes(lanes []LaneInfo, w int) []string {
	if len(lanes) == 0 {
		return nil
	}
	st := m.st
	sw := 6
	for _, l := range lanes {
		sw = max(sw, textWidth(l.Stream))
	}
	sw = min(sw, max(w-2-2*9, 10))
	lines := []string{st.section.Render("LANES"),
		st.tableHeader.Render("  " + fit("STREAM", sw, false) + " " + fit("LENGTH", 8, true) + " " + fit("PENDING", 8, true))}
	for _, l := range lanes {
		lines = append(lines, "  "+fit(l.Stream, sw, false)+" "+fit(fmtThousands(l.Length), 8, true)+" "+
			fit(fmtThousands(l.Pending), 8, true))
	}
	return append(lines, "")
}

// detailHead is the HEAD section: the entry and its lane, its attempts and since when it
// is halted, its event, and the halt reason wrapped on up to three lines.
func (m *model) detailHead(d *HeadDetail, w int) []string {
	st := m.st
	lane := "primary lane"
	if d.Lane == 1 {
		lane = "backfill lane"
	}
	head := st.section.Render("HEAD") + " " + st.value.Render(d.EntryID) + st.label.Render("  "+lane)
	if d.Stream != "" {
		head += st.label.Render(", " + d.Stream)
	}
	facts := []string{fmt.Sprintf("attempts %d", d.Attempts)}
	if !d.Since.IsZero() {
		facts = append(facts, fmt.Sprintf("halted %s ago (%s)", fmtDur(m.clock.Now().Sub(d.Since)),
			d.Since.UTC().Format("2006-01-02 15:04:05Z")))
	}
	lines := []string{head, "  " + strings.Join(facts, " · ")}
	var event []string
	if d.EventType != "" {
		event = append(event, "type "+d.EventType)
	}
	if d.EventID != "" {
		event = append(event, "id "+d.EventID)
	}
	if len(event) > 0 {
		lines = append(lines, "  "+strings.Join(event, " · "))
	}
	if d.Error != "" {
		for i, l := range wrapLines(oneLine(d.Error), w-9, 3) {
			label := "         "
			if i == 0 {
				label = "  error: "
			}
			lines = append(lines, st.rowHalted.Render(label+l))
		}
	}
	return lines
}

// detailPayload is the PAYLOAD section: up to room lines of the payload, the last of them
// saying how many more there are when it is longer; nothing without room or payload.
func (m *model) detailPayload(room int) []string {
	if room < 1 || len(m.payload) == 0 {
		return nil
	}
	lines := []string{"", m.st.section.Render("PAYLOAD")}
	show := m.payload
	if len(show) > room {
		show = show[:room-1]
	}
	for _, l := range show {
		lines = append(lines, "  "+l)
	}
	if len(show) < len(m.payload) {
		lines = append(lines, m.st.dim.Render(fmt.Sprintf("  … %d more lines", len(m.payload)-len(show))))
	}
	return lines
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
