package tui

import (
	"strconv"
	"strings"
)

// The two tables render only their visible rows, into fixed-width cells laid out for the
// terminal width: columns are dropped (least useful first) until the minimum widths fit,
// then the flexible columns grow towards the widest content seen at the last refresh.

type colID int

const (
	colKey colID = iota
	colCategory
	colHandler
	colOwner
	colGen
	colLease
	colLag
	colBar
	colPending
	colHeadAge
	colState
	colCount
)

type instColID = colID

const (
	icolID instColID = iota
	icolHost
	icolPID
	icolOwned
	icolHeartbeat
	icolStatus
	instColCount
)

// column describes a table column. A column is flexible when max > min. drop is the
// order in which columns go when the terminal is narrow (1 first); 0 never goes.
type column struct {
	id       colID
	title    string
	min, max int
	right    bool
	drop     int
}

var partitionCols = []column{
	{id: colKey, title: "KEY", min: 12, max: 40},
	{id: colCategory, title: "CATEGORY", min: 8, max: 20, drop: 7},
	{id: colHandler, title: "HANDLER", min: 8, max: 24, drop: 6},
	{id: colOwner, title: "OWNER", min: 8, max: 24, drop: 3},
	{id: colGen, title: "GEN", min: 7, max: 7, right: true, drop: 1}, // ShortGeneration
	{id: colLease, title: "LEASE", min: 6, max: 6, right: true, drop: 2},
	{id: colLag, title: "BACKLOG", min: 7, max: 8, right: true},
	{id: colBar, title: "", min: 5, max: 20, drop: 4},
	{id: colPending, title: "PENDING", min: 7, max: 7, right: true, drop: 5},
	{id: colHeadAge, title: "HEAD AGE", min: 9, max: 9, right: true},
	{id: colState, title: "STATE", min: 7, max: 9}, // "throttled" when one is
}

var instanceCols = []column{
	{id: icolID, title: "INSTANCE", min: 12, max: 40},
	{id: icolHost, title: "HOST", min: 8, max: 30, drop: 2},
	{id: icolPID, title: "PID", min: 7, max: 7, right: true, drop: 1},
	{id: icolOwned, title: "OWNED", min: 6, max: 6, right: true},
	{id: icolHeartbeat, title: "LAST HEARTBEAT", min: 14, max: 14, right: true},
	{id: icolStatus, title: "STATUS", min: 6, max: 6},
}

const gutterWidth = 2 // cursor mark and halted mark

// layoutColumns returns the width of each column (0 = dropped) for a table width.
// want is the widest content of each column, by id.
func layoutColumns(cols []column, want []int, width int) []int {
	widths := make([]int, len(cols))
	total := -1 // n columns take n-1 separators
	for i, c := range cols {
		widths[i] = c.min
		total += c.min + 1
	}
	avail := width - gutterWidth
	for total > avail {
		drop := -1
		for i, c := range cols {
			if widths[i] > 0 && c.drop > 0 && (drop < 0 || c.drop < cols[drop].drop) {
				drop = i
			}
		}
		if drop < 0 {
			break // nothing left to drop: the rows get truncated
		}
		total -= widths[drop] + 1
		widths[drop] = 0
	}
	// Grow the flexible columns one cell at a time, in turn, towards their content.
	for grown := true; grown && total < avail; {
		grown = false
		for i, c := range cols {
			if total >= avail {
				break
			}
			if widths[i] > 0 && widths[i] < min(c.max, max(want[c.id], c.min)) {
				widths[i]++
				total++
				grown = true
			}
		}
	}
	return widths
}

// tableLine joins cells into one line: the gutter, then each kept column.
func tableLine(b *strings.Builder, gutter string, cols []column, widths []int, cell func(colID) string) {
	b.WriteString(gutter)
	first := true
	for i, c := range cols {
		if widths[i] == 0 {
			continue
		}
		if !first {
			b.WriteByte(' ')
		}
		first = false
		b.WriteString(fit(cell(c.id), widths[i], c.right))
	}
}

func (m *model) viewPartitions(w, h int) []string {
	widths := layoutColumns(partitionCols, m.want[:], w)
	lines := make([]string, 0, h)
	var b strings.Builder
	tableLine(&b, strings.Repeat(" ", gutterWidth), partitionCols, widths, func(id colID) string {
		return partitionTitle(id, m.sortBy, m.sortDesc)
	})
	lines = append(lines, m.st.tableHeader.Render(b.String()))

	switch {
	case !m.haveSnap:
		return append(lines, m.st.dim.Render("  waiting for the first snapshot…"))
	case len(m.snap.Partitions) == 0:
		return append(lines, m.st.dim.Render("  no partitions"))
	case len(m.rows) == 0:
		return append(lines, m.st.dim.Render("  no partition matches the filter "+strconv.Quote(m.filterTxt)))
	}
	from, to := visibleRows(m.top, len(m.rows), h)
	for n := from; n < to; n++ {
		p := &m.snap.Partitions[m.rows[n]]
		sel := n == m.cursor && !m.selGone
		b.Reset()
		tableLine(&b, gutter(sel, p.State == StateHalted), partitionCols, widths, func(id colID) string {
			return m.partitionCell(p, id, widths)
		})
		lines = append(lines, m.st.rowStyle(p.State, sel).Render(b.String()))
	}
	return lines
}

// visibleRows is the range [from, to) of a table's n rows that its body of h lines, the
// title line included, shows from row top.
func visibleRows(top, n, h int) (from, to int) {
	from = max(min(top, n-1), 0)
	return from, min(from+h-1, n)
}

func gutter(selected, flagged bool) string {
	g := []byte("  ")
	if selected {
		g[0] = '>'
	}
	if flagged {
		g[1] = '!'
	}
	return string(g)
}

func partitionTitle(id colID, by sortKey, reversed bool) string {
	t := partitionCols[id].title
	if id != by.column() {
		return t
	}
	if by.descendingByDefault() != reversed {
		return t + "▼"
	}
	return t + "▲"
}

func (m *model) partitionCell(p *Partition, id colID, widths []int) string {
	switch id {
	case colKey:
		return orDash(p.Key)
	case colCategory:
		return p.Category
	case colHandler:
		return p.Handler
	case colOwner:
		return orDash(p.Owner)
	case colGen:
		return ShortGeneration(p.Generation)
	case colLease:
		if p.Owner == "" {
			return "-"
		}
		return fmtDurOr(p.LeaseTTL)
	case colLag:
		if p.Backlog() < 0 {
			return "?"
		}
		return fmtCount(p.Backlog())
	case colBar:
		return lagBar(p.Backlog(), m.sum.maxLag, widths[colBar])
	case colPending:
		return fmtCount(p.Pending)
	case colHeadAge:
		return fmtDurOr(p.HeadAge)
	case colState:
		return stateText(p.State)
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (m *model) viewInstances(w, h int) []string {
	widths := layoutColumns(instanceCols, m.instWant[:], w)
	lines := make([]string, 0, h)
	var b strings.Builder
	tableLine(&b, strings.Repeat(" ", gutterWidth), instanceCols, widths, func(id colID) string {
		return instanceCols[id].title
	})
	lines = append(lines, m.st.tableHeader.Render(b.String()))
	switch {
	case !m.haveSnap:
		return append(lines, m.st.dim.Render("  waiting for the first snapshot…"))
	case len(m.instOrder) == 0:
		return append(lines, m.st.dim.Render("  no instances registered"))
	}
	taken := m.snap.Taken
	from, to := visibleRows(m.itop, len(m.instOrder), h)
	for n := from; n < to; n++ {
		in := m.snap.Instances[m.instOrder[n]]
		sel, stale := n == m.icursor, instanceStale(in, taken)
		b.Reset()
		tableLine(&b, gutter(sel, stale), instanceCols, widths, func(id colID) string {
			switch id {
			case icolID:
				return in.ID
			case icolHost:
				return orDash(in.Host)
			case icolPID:
				if in.PID == 0 {
					return "-"
				}
				return strconv.Itoa(in.PID)
			case icolOwned:
				return strconv.Itoa(in.Owned)
			case icolHeartbeat:
				if in.LastHeartbeat.IsZero() {
					return "-"
				}
				return fmtDur(taken.Sub(in.LastHeartbeat)) + " ago"
			case icolStatus:
				if stale {
					return "stale"
				}
				return "alive"
			}
			return ""
		})
		st := m.st.row
		if stale {
			st = m.st.rowUnowned
		}
		if sel {
			st = st.Reverse(true)
		}
		lines = append(lines, st.Render(b.String()))
	}
	return lines
}
