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

// listColumn is a column of a list view of T rows: its layout, its cell for a row and,
// for a column whose width follows its content, the width a row asks for (nil: the
// column keeps its minimum). A column's id is its index.
type listColumn[T any] struct {
	column
	cell  func(T) string
	width func(T) int
}

var dlqCols = []listColumn[DLQInfo]{
	{column{id: 0, title: "STREAM", min: 16, max: 48},
		func(d DLQInfo) string { return d.Stream }, func(d DLQInfo) int { return textWidth(d.Stream) }},
	{column{id: 1, title: "ENTRIES", min: 7, max: 7, right: true},
		func(d DLQInfo) string { return fmtCount(d.Length) }, nil},
	{column{id: 2, title: "OLDEST", min: 15, max: 20, drop: 2},
		func(d DLQInfo) string { return orDash(d.OldestID) }, func(d DLQInfo) int { return len(d.OldestID) }},
	{column{id: 3, title: "NEWEST", min: 15, max: 20, drop: 1},
		func(d DLQInfo) string { return orDash(d.NewestID) }, func(d DLQInfo) int { return len(d.NewestID) }},
	{column{id: 4, title: "OLDEST AGE", min: 10, max: 10, right: true},
		func(d DLQInfo) string { return fmtDurOr(d.OldestAge) }, nil},
}

var auditCols = []listColumn[AuditRecord]{
	{column{id: 0, title: "TIME", min: 8, max: 8},
		func(a AuditRecord) string { return a.Time.UTC().Format("15:04:05") }, nil},
	{column{id: 1, title: "USER", min: 6, max: 16, drop: 3},
		func(a AuditRecord) string { return orDash(a.User) }, func(a AuditRecord) int { return textWidth(a.User) }},
	{column{id: 2, title: "COMMAND", min: 10, max: 12},
		func(a AuditRecord) string { return orDash(a.Command) }, func(a AuditRecord) int { return textWidth(a.Command) }},
	{column{id: 3, title: "STREAM", min: 12, max: 32},
		func(a AuditRecord) string { return orDash(a.Stream) }, func(a AuditRecord) int { return textWidth(a.Stream) }},
	{column{id: 4, title: "HANDLER", min: 8, max: 20, drop: 2},
		func(a AuditRecord) string { return orDash(a.Handler) }, func(a AuditRecord) int { return textWidth(a.Handler) }},
	{column{id: 5, title: "ENTRY", min: 8, max: 20, drop: 1},
		func(a AuditRecord) string { return orDash(a.EntryID) }, func(a AuditRecord) int { return len(a.EntryID) }},
	{column{id: 6, title: "OUTCOME", min: 11, max: 11},
		func(a AuditRecord) string { return orDash(a.Outcome) }, nil},
	{column{id: 7, title: "DETAIL", min: 6, max: 60, drop: 4},
		func(a AuditRecord) string { return orDash(oneLine(a.Detail)) }, func(a AuditRecord) int { return textWidth(a.Detail) }},
}

// listBody draws a list view of rows: the title row, then the rows from l.top, or why
// there are none (ok says the source has the view at all). style is a row's style before
// the cursor reverses it.
func listBody[T any](m *model, cols []listColumn[T], rows []T, w, h int, l listState, empty string, ok bool, style func(T) lipgloss.Style) []string {
	layout, want := make([]column, len(cols)), make([]int, len(cols))
	for i, c := range cols {
		layout[i] = c.column
		if c.width == nil {
			continue
		}
		for _, r := range rows {
			want[i] = max(want[i], c.width(r))
		}
	}
	widths := layoutColumns(layout, want, w)
	var b strings.Builder
	tableLine(&b, strings.Repeat(" ", gutterWidth), layout, widths, func(id colID) string { return cols[id].title })
	lines := []string{m.st.tableHeader.Render(b.String())}
	switch {
	case !ok:
		return append(lines, m.st.dim.Render("  not available from this source"))
	case l.err != nil && !l.loaded:
		return append(lines, m.st.statusErr.Render("  "+oneLine(l.err.Error())))
	case !l.loaded:
		return append(lines, m.st.dim.Render("  loading…"))
	case len(rows) == 0:
		return append(lines, m.st.dim.Render("  "+empty))
	}
	from, to := visibleRows(l.top, len(rows), h)
	for i := from; i < to; i++ {
		b.Reset()
		sel := i == l.cursor
		tableLine(&b, gutter(sel, false), layout, widths, func(id colID) string { return cols[id].cell(rows[i]) })
		lines = append(lines, style(rows[i]).Reverse(sel).Render(b.String()))
	}
	return lines
}

func (m *model) viewDLQs(w, h int) []string {
	_, ok := m.src.(DLQSource)
	return listBody(m, dlqCols, m.dlqRows, w, h, m.dlq, "no DLQ has entries", ok,
		func(DLQInfo) lipgloss.Style { return m.st.row })
}

func (m *model) viewAuditLog(w, h int) []string {
	_, ok := m.src.(AuditSource)
	return listBody(m, auditCols, m.auditRows, w, h, m.audit, "no operator actions recorded", ok,
		func(a AuditRecord) lipgloss.Style {
			if a.Outcome != "ok" {
				return m.st.rowUnowned // the action was not done
			}
			return m.st.row
		})
}

// listInfo is the position shown on the right of the status line of a list view.
func listInfo(what string, l listState, n int) string {
	if n == 0 {
		return ""
	}
	return what + " " + strconv.Itoa(l.cursor+1) + "/" + strconv.Itoa(n)
}
