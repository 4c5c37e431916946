package tui

import (
	"context"
	"strconv"
	"strings"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
)

// The DLQ and audit views: read-only lists, fetched when the view is entered and again
// with every refresh while it is shown. They exist when the Source implements
// DLQSource / AuditSource.

// auditLimit is how many audit records the audit view reads.
const auditLimit = 200

// listState is the data and cursor of one list view.
type listState struct {
	loaded      bool
	err         error
	fetching    bool
	cursor, top int
}

// clamp keeps the cursor on one of the n rows, and that row on screen.
func (l *listState) clamp(n, page int) {
	l.cursor = max(min(l.cursor, n-1), 0)
	l.top = scrollTop(l.cursor, l.top, n, page)
}

// fetchList starts the fetch of the list the view shows, when it has a source and no
// fetch is in flight.
func (m *model) fetchList() tea.Cmd {
	switch m.view {
	case viewDLQ:
		if src, ok := m.src.(DLQSource); ok && !m.dlq.fetching {
			m.dlq.fetching = true
			return fetchRows(m.ctx, src.DLQs)
		}
	case viewAudit:
		if src, ok := m.src.(AuditSource); ok && !m.audit.fetching {
			m.audit.fetching = true
			return fetchRows(m.ctx, func(ctx context.Context) ([]AuditRecord, error) { return src.Audit(ctx, auditLimit) })
		}
	}
	return nil
}

// receive records the answer of a list view's fetch in l and returns the rows the view
// shows: the new ones, or, when the fetch failed, those it showed before.
func receive[T any](l *listState, msg listMsg[T], shown []T, page int) []T {
	l.fetching = false
	l.loaded, l.err = true, msg.err
	if msg.err == nil {
		shown = msg.rows
	}
	l.clamp(len(shown), page)
	return shown
}

var dlqCols = []column{
	{id: 0, title: "STREAM", min: 16, max: 48},
	{id: 1, title: "ENTRIES", min: 7, max: 7, right: true},
	{id: 2, title: "OLDEST", min: 15, max: 20, drop: 2},
	{id: 3, title: "NEWEST", min: 15, max: 20, drop: 1},
	{id: 4, title: "OLDEST AGE", min: 10, max: 10, right: true},
}

var auditCols = []column{
	{id: 0, title: "TIME", min: 8, max: 8},
	{id: 1, title: "USER", min: 6, max: 16, drop: 3},
	{id: 2, title: "COMMAND", min: 10, max: 12},
	{id: 3, title: "STREAM", min: 12, max: 32},
	{id: 4, title: "HANDLER", min: 8, max: 20, drop: 2},
	{id: 5, title: "ENTRY", min: 8, max: 20, drop: 1},
	{id: 6, title: "OUTCOME", min: 11, max: 11},
	{id: 7, title: "DETAIL", min: 6, max: 60, drop: 4},
}

// listBody draws a list view: the title row, then the rows from l.top, or why there are
// none.
func (m *model) listBody(cols []column, want []int, w, h int, l listState, n int, empty string, ok bool, cell func(i int, id colID) string, rowStyle func(i int, sel bool) lipgloss.Style) []string {
	widths := layoutColumns(cols, want, w)
	var b strings.Builder
	tableLine(&b, strings.Repeat(" ", gutterWidth), cols, widths, func(id colID) string { return cols[id].title })
	lines := []string{m.st.tableHeader.Render(b.String())}
	switch {
	case !ok:
		return append(lines, m.st.dim.Render("  not available from this source"))
	case l.err != nil && !l.loaded:
		return append(lines, m.st.statusErr.Render("  "+oneLine(l.err.Error())))
	case !l.loaded:
		return append(lines, m.st.dim.Render("  loading…"))
	case n == 0:
		return append(lines, m.st.dim.Render("  "+empty))
	}
	from, to := visibleRows(l.top, n, h)
	for i := from; i < to; i++ {
		b.Reset()
		sel := i == l.cursor
		tableLine(&b, gutter(sel, false), cols, widths, func(id colID) string { return cell(i, id) })
		lines = append(lines, rowStyle(i, sel).Render(b.String()))
	}
	return lines
}

func (m *model) viewDLQs(w, h int) []string {
	want := make([]int, len(dlqCols))
	for _, d := range m.dlqRows {
		want[0] = max(want[0], textWidth(d.Stream))
		want[2] = max(want[2], len(d.OldestID))
		want[3] = max(want[3], len(d.NewestID))
	}
	_, ok := m.src.(DLQSource)
	lines := m.listBody(dlqCols, want, w, h, m.dlq, len(m.dlqRows), "no DLQ has entries", ok,
		func(i int, id colID) string {
			d := m.dlqRows[i]
			switch id {
			case 0:
				return d.Stream
			case 1:
				return fmtCount(d.Length)
			case 2:
				return orDash(d.OldestID)
			case 3:
				return orDash(d.NewestID)
			case 4:
				return fmtDurOr(d.OldestAge)
			}
			return ""
		}, func(_ int, sel bool) lipgloss.Style { return m.st.row.Reverse(sel) })
	return lines
}

func (m *model) viewAuditLog(w, h int) []string {
	want := make([]int, len(auditCols))
	for _, a := range m.auditRows {
		want[1] = max(want[1], textWidth(a.User))
		want[2] = max(want[2], textWidth(a.Command))
		want[3] = max(want[3], textWidth(a.Stream))
		want[4] = max(want[4], textWidth(a.Handler))
		want[5] = max(want[5], len(a.EntryID))
		want[7] = max(want[7], textWidth(a.Detail))
	}
	_, ok := m.src.(AuditSource)
	lines := m.listBody(auditCols, want, w, h, m.audit, len(m.auditRows), "no operator actions recorded", ok,
		func(i int, id colID) string {
			a := m.auditRows[i]
			switch id {
			case 0:
				return a.Time.UTC().Format("15:04:05")
			case 1:
				return orDash(a.User)
			case 2:
				return orDash(a.Command)
			case 3:
				return orDash(a.Stream)
			case 4:
				return orDash(a.Handler)
			case 5:
				return orDash(a.EntryID)
			case 6:
				return orDash(a.Outcome)
			case 7:
				return orDash(oneLine(a.Detail))
			}
			return ""
		}, func(i int, sel bool) lipgloss.Style {
			if m.auditRows[i].Outcome != "ok" {
				return m.st.rowUnowned.Reverse(sel)
			}
			return m.st.row.Reverse(sel)
		})
	return lines
}

// listInfo is the position shown on the right of the status line of a list view.
func listInfo(what string, l listState, n int) string {
	if n == 0 {
		return ""
	}
	return what + " " + strconv.Itoa(l.cursor+1) + "/" + strconv.Itoa(n)
}
