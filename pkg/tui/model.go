package tui

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
)

// viewMode is what the body of the screen shows.
type viewMode int

const (
	viewPartitions viewMode = iota
	viewInstances
	viewDLQ
	viewAudit
	viewDetail
)

// tabOrder is the cycle of the tab key.
var tabOrder = []viewMode{viewPartitions, viewInstances, viewDLQ, viewAudit}

// sortKey orders the partitions table by one of its columns; halted partitions always
// come first. The default order of a column is the useful one (largest lag, oldest head,
// names A to Z); sortDesc reverses it.
type sortKey int

const (
	sortLag     sortKey = iota // lag, largest first
	sortHeadAge                // head age, oldest first
	sortName                   // category, key, handler
	sortPending                // pending, largest first
	sortOwner                  // owner, A to Z
	sortLease                  // lease time left, shortest first
	sortGen                    // generation, highest first
	sortState                  // state, A to Z
	sortHandler                // handler, then category and key
	sortKeys                   // number of sort keys, for cycling
)

// sortOrder is what a sort key means: its name, the column carrying the sort mark, and
// the order of the partitions by the column, the useful one first.
type sortOrder struct {
	name string
	col  colID
	// descending says the column's useful order is largest first.
	descending bool
	compare    func(a, b *Partition) int
}

// byName orders partitions by category, key and handler.
func byName(a, b *Partition) int {
	return cmp.Or(naturalCompare(a.Category, b.Category), naturalCompare(a.Key, b.Key), naturalCompare(a.Handler, b.Handler))
}

var sortOrders = [sortKeys]sortOrder{
	sortLag:     {"backlog", colLag, true, func(a, b *Partition) int { return cmp.Compare(b.Backlog(), a.Backlog()) }},
	sortHeadAge: {"head age", colHeadAge, true, func(a, b *Partition) int { return cmp.Compare(b.HeadAge, a.HeadAge) }},
	sortName:    {"name", colKey, false, byName},
	sortPending: {"pending", colPending, true, func(a, b *Partition) int { return cmp.Compare(b.Pending, a.Pending) }},
	sortOwner:   {"owner", colOwner, false, func(a, b *Partition) int { return naturalCompare(a.Owner, b.Owner) }},
	sortLease:   {"lease", colLease, false, func(a, b *Partition) int { return cmp.Compare(a.LeaseTTL, b.LeaseTTL) }},
	sortGen:     {"generation", colGen, true, func(a, b *Partition) int { return cmp.Compare(b.Generation, a.Generation) }},
	sortState:   {"state", colState, false, func(a, b *Partition) int { return cmp.Compare(a.State, b.State) }},
	sortHandler: {"handler", colHandler, false, func(a, b *Partition) int { return naturalCompare(a.Handler, b.Handler) }},
}

// order is what s means; an unknown key means sortLag.
func (s sortKey) order() sortOrder {
	if s < 0 || s >= sortKeys {
		s = sortLag
	}
	return sortOrders[s]
}

func (s sortKey) String() string { return s.order().name }

// column is the column whose title carries the sort mark.
func (s sortKey) column() colID { return s.order().col }

// descendingByDefault says the column's useful order is largest first.
func (s sortKey) descendingByDefault() bool { return s.order().descending }

// action is an operator action: on a halted head (skip, dlq, retry), or on the
// partition itself (pause, resume).
type action int

const (
	actSkip action = iota + 1
	actDLQ
	actRetry
	actPause
	actResume
)

func (a action) String() string {
	switch a {
	case actDLQ:
		return "dlq"
	case actRetry:
		return "retry"
	case actPause:
		return "pause"
	case actResume:
		return "resume"
	}
	return "skip"
}

// onPartition says the action is on the partition rather than on its head entry.
func (a action) onPartition() bool { return a == actPause || a == actResume }

// confirmDialog is an action waiting for the operator's y / n (a pause: for its reason
// and enter). expectID is fixed when the dialog opens: it is the id the operator sees,
// and the compare-and-act names it.
type confirmDialog struct {
	act      action
	ref      PartitionRef
	expectID string
	part     Partition // the row as it was when the dialog opened
	// reason is the pause's reason as the operator types it (actPause only).
	reason textinput.Model
}

// statusKind colours the status line.
type statusKind int

const (
	statusInfo statusKind = iota
	statusOK
	statusWarn
	statusErr
)

// clock is the model's time: real in a program, fake in the Update tests.
type clock interface {
	Now() time.Time
	// Tick returns a command that sends a tickMsg after d.
	Tick(d time.Duration) tea.Cmd
}

// model is the dashboard. It is used through a pointer: Update mutates it and returns it.
// Only Update and View touch it (one goroutine, Bubble Tea's); commands capture the values
// they need and never the model.
type model struct {
	ctx      context.Context
	src      Source
	refresh  time.Duration
	readOnly bool
	addr     string
	clock    clock

	st     styles
	keys   keyMap
	help   help.Model
	filter textinput.Model

	width, height int

	// Data of the last good snapshot, and what is derived from it once per refresh.
	snap     Snapshot
	haveSnap bool
	lastOK   time.Time // local time the last good snapshot arrived
	index    map[PartitionRef]int
	sum      summary
	hay      []string // per partition: lowercase text the filter matches against
	want     [colCount]int
	instWant [instColCount]int
	// events/s from the Handled deltas of the last two snapshots
	rate      float64
	rateKnown bool

	// Ordering: order is every partition sorted (halted first), rows is order after the
	// filter. Both hold indexes into snap.Partitions. Navigation never re-sorts.
	sortBy    sortKey
	order     []int
	rows      []int
	filterTxt string // applied filter, lowercase
	instOrder []int

	view, back    viewMode // back: where esc from the detail pane returns
	cursor, top   int      // partitions table: cursor row and first visible row
	selRef        PartitionRef
	icursor, itop int // instances table
	showHelp      bool
	filtering     bool // the filter input has the keyboard

	// Refresh loop.
	fetching  bool
	paused    bool
	nextFetch time.Time
	failures  int // consecutive Snapshot errors
	lastErr   error
	slow      bool // lastErr is a refresh that ran out of time while Redis answers

	// Detail pane.
	detailRef     PartitionRef
	detail        *HeadDetail
	detailErr     error
	detailLoading bool
	payload       []string // pretty-printed payload lines of detail

	dialog *confirmDialog
	acting bool // an action is in flight

	status     string
	statusKind statusKind
	statusAt   time.Time // when the status was set; it expires (statusTTL)

	// chosen: the operator moved the cursor (or opened a partition's detail), so selRef
	// is their choice and sticks to its partition; until then the cursor stays on its row. selGone: that partition is no longer listed; the cursor row is not a
	// selection until the operator moves it.
	chosen, selGone bool
	// sortDesc reverses the sort key's order.
	sortDesc bool
	// filterErr says why a word of the filter was not understood.
	filterErr string

	// The DLQ and audit views.
	dlq, audit listState
	dlqRows    []DLQInfo
	auditRows  []AuditRecord
}

// summary is the header's aggregate of a snapshot. A partition is a partition stream
// ({category}:{key}), as everywhere in seqctl: streams counts them; total counts the
// table's rows, one per (handler, partition), which is what the states add up to.
type summary struct {
	streams                                                         int
	total, running, idle, halted, paused, throttled, unowned, other int
	lag, maxLag                                                     int64 // backlog: lag + pending
	alive, stale                                                    int
	// handler slots of the live instances: in use, limit (unbounded when any live
	// instance has none) and partitions waiting for a slot
	slotsInUse, slotsLimit, slotsWaiting int
	slotsUnbounded                       bool
	// sampled is the number of rows read when the snapshot has Totals (streams and
	// total are then Redis's counts, the other counts the rows'), 0 otherwise.
	sampled   int
	unindexed bool // Totals.Unindexed
}

// applyTotals takes a sampled snapshot's counts from Redis (nil: the rows are all).
func (sum *summary) applyTotals(t *Totals) {
	if t != nil {
		sum.sampled, sum.streams, sum.total, sum.unindexed = sum.total, int(t.Streams), int(t.Rows), t.Unindexed
	}
}

func newModel(ctx context.Context, opts Options, r *lipgloss.Renderer) *model {
	if ctx == nil {
		ctx = context.Background()
	}
	refresh := opts.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	refresh = max(refresh, minRefresh)
	src := opts.Source
	if src == nil {
		src = noSource{}
	}
	m := &model{
		ctx:      ctx,
		src:      src,
		refresh:  refresh,
		readOnly: opts.ReadOnly,
		addr:     opts.Addr,
		clock:    realClock{ctx: ctx},
		st:       newStyles(r),
		keys:     newKeyMap(),
		help:     help.New(),
		filter:   textinput.New(),
		width:    80,
		height:   24,
		index:    map[PartitionRef]int{},
	}
	m.help.Styles = m.st.help
	if m.readOnly {
		m.keys.Act = m.keys.ActOff // the footer says so
	}
	m.filter.Prompt = "/"
	m.filter.Placeholder = "text in key, category, handler, owner or state"
	m.filter.CharLimit = 128
	m.filter.Width = 50
	m.filter.PromptStyle = m.st.filterPrompt
	m.filter.TextStyle = r.NewStyle()
	m.filter.PlaceholderStyle = m.st.dim
	m.filter.CompletionStyle = m.st.dim
	m.filter.Cursor.Style = r.NewStyle()
	m.filter.Cursor.TextStyle = r.NewStyle()
	m.filter.Cursor.SetMode(cursor.CursorStatic)
	return m
}

// Init starts the first refresh and the tick loop.
func (m *model) Init() tea.Cmd {
	return tea.Batch(m.clock.Tick(m.tickEvery()), m.startFetch(m.clock.Now()))
}

// tickEvery is the period of the redraw tick: the refresh interval, but at least once a
// second so ages and the retry countdown stay current.
func (m *model) tickEvery() time.Duration {
	return min(m.refresh, time.Second)
}

// apply installs a good snapshot: the aggregates, the rate, the filter haystack, the
// column widths, the order and the cursor. This is the only O(partitions) work, once per
// refresh.
func (m *model) apply(s Snapshot, now time.Time) {
	if s.Taken.IsZero() {
		s.Taken = now
	}
	prev, prevIndex, hadPrev := m.snap, m.index, m.haveSnap

	index := make(map[PartitionRef]int, len(s.Partitions))
	hay := make([]string, len(s.Partitions))
	sum := summary{total: len(s.Partitions)}
	streams := map[string]bool{}
	var want [colCount]int
	var handled, delta int64
	for i := range s.Partitions {
		p := &s.Partitions[i]
		index[p.Ref()] = i
		streams[p.Category+"\x00"+p.Key] = true
		switch p.State {
		case StateRunning:
			sum.running++
		case StateIdle:
			sum.idle++
		case StateHalted:
			sum.halted++
		case StatePaused:
			sum.paused++
		case StateThrottled:
			sum.throttled++
		case StateUnowned:
			sum.unowned++
		default:
			sum.other++
		}
		sum.lag += max(p.Backlog(), 0) // -1: unknown
		sum.maxLag = max(sum.maxLag, p.Backlog())
		hay[i] = haystack(p)
		want[colKey] = max(want[colKey], textWidth(p.Key))
		want[colCategory] = max(want[colCategory], textWidth(p.Category))
		want[colHandler] = max(want[colHandler], textWidth(p.Handler))
		want[colOwner] = max(want[colOwner], textWidth(p.Owner))
		want[colState] = max(want[colState], textWidth(stateText(p.State)))
		handled += p.Handled
		if hadPrev {
			if j, ok := prevIndex[p.Ref()]; ok && p.Handled > prev.Partitions[j].Handled {
				delta += p.Handled - prev.Partitions[j].Handled
			}
		}
	}
	sum.streams = len(streams)
	sum.applyTotals(s.Totals)
	want[colBar] = 1 << 10 // the bar takes whatever is left
	want[colLag] = 8       // "BACKLOG▼"; 7 on a narrow terminal

	m.rateKnown = false
	if dt := s.Taken.Sub(prev.Taken); hadPrev && handled > 0 && dt > 0 {
		m.rate, m.rateKnown = float64(delta)/dt.Seconds(), true
	}

	var iwant [instColCount]int
	m.instOrder = m.instOrder[:0]
	for i, in := range s.Instances {
		m.instOrder = append(m.instOrder, i)
		iwant[icolID] = max(iwant[icolID], textWidth(in.ID))
		iwant[icolHost] = max(iwant[icolHost], textWidth(in.Host))
		if instanceStale(in, s.Taken) {
			sum.stale++
		} else {
			sum.alive++
			sum.slotsInUse += in.SlotsInUse
			sum.slotsLimit += in.SlotsLimit
			sum.slotsWaiting += in.SlotsWaiting
			sum.slotsUnbounded = sum.slotsUnbounded || in.SlotsLimit == 0
		}
	}
	slices.SortFunc(m.instOrder, func(a, b int) int { return cmp.Compare(s.Instances[a].ID, s.Instances[b].ID) })

	m.snap, m.haveSnap, m.lastOK = s, true, now
	m.index, m.hay, m.sum, m.want, m.instWant = index, hay, sum, want, iwant
	m.resort()
	m.clampInstances()
}

// instanceStaleAfter: an instance whose last heartbeat is older than this (the default
// lease TTL, after which its session and leases are void) is counted as stale, not alive.
const instanceStaleAfter = 15 * time.Second

func instanceStale(in Instance, taken time.Time) bool {
	return !in.LastHeartbeat.IsZero() && taken.Sub(in.LastHeartbeat) > instanceStaleAfter
}

// resort orders every partition by the sort key (halted first), then refilters.
func (m *model) resort() {
	ps := m.snap.Partitions
	m.order = m.order[:0]
	for i := range ps {
		m.order = append(m.order, i)
	}
	compare, flip := m.sortBy.order().compare, m.sortDesc
	slices.SortFunc(m.order, func(a, b int) int {
		pa, pb := &ps[a], &ps[b]
		if ha, hb := pa.State == StateHalted, pb.State == StateHalted; ha != hb {
			if ha {
				return -1
			}
			return 1
		}
		c := compare(pa, pb)
		if flip {
			c = -c
		}
		if c != 0 {
			return c
		}
		return byName(pa, pb)
	})
	m.refilter()
}

// refilter applies the filter to order (see filter.go) and puts the cursor back on the
// partition the operator chose. When that partition is no longer listed the cursor stays
// where it was, but selGone makes sure no key acts on the row that took its place. Until
// the operator chooses, the cursor stays on its row (the first, where halted partitions
// are pinned) and the partition there is the selection: following it instead would carry
// the view down the table as later refreshes list more partitions above it.
func (m *model) refilter() {
	f := parseFilter(m.filterTxt)
	m.filterErr = f.err
	if f.empty() {
		m.rows = m.order
	} else {
		m.rows = make([]int, 0, len(m.order)/4)
		for _, i := range m.order {
			if f.match(&m.snap.Partitions[i], m.hay[i]) {
				m.rows = append(m.rows, i)
			}
		}
	}
	m.cursor = min(m.cursor, max(len(m.rows)-1, 0))
	found := false
	for n, i := range m.rows {
		if !m.chosen {
			break
		}
		if m.snap.Partitions[i].Ref() == m.selRef {
			m.cursor, found = n, true
			break
		}
	}
	wasGone := m.selGone
	m.selGone = !found && m.chosen
	if p, ok := m.cursorPartition(); ok && !found && !m.chosen {
		m.selRef = p.Ref() // nothing chosen yet: the row under the cursor is the selection
	}
	if m.selGone && !wasGone {
		m.setStatus(statusInfo, m.goneText())
	}
	m.keepOnScreen()
}

// choose makes the row under the cursor the selection: the operator moved the cursor.
func (m *model) choose() {
	m.selGone, m.chosen = false, true
	m.syncSelection()
}

// syncSelection records which partition the cursor is on (unless the selected one is
// gone, see selGone) and keeps it on screen.
func (m *model) syncSelection() {
	if p, ok := m.cursorPartition(); ok && !m.selGone {
		m.selRef = p.Ref()
	}
	m.keepOnScreen()
}

// keepOnScreen scrolls the partitions table so the cursor row is visible.
func (m *model) keepOnScreen() {
	m.top = scrollTop(m.cursor, m.top, len(m.rows), m.tableRows())
}

// clampInstances keeps the cursor of the instances table on a row, and that row on screen.
func (m *model) clampInstances() {
	m.icursor = max(min(m.icursor, len(m.instOrder)-1), 0)
	m.itop = scrollTop(m.icursor, m.itop, len(m.instOrder), m.tableRows())
}

// scrollTop is the first row to show of a table of n rows, page of them on screen: top,
// or as near to it as keeps the cursor row on screen. Every table scrolls by this rule.
func scrollTop(cursor, top, n, page int) int {
	if cursor < top {
		top = cursor
	}
	if cursor >= top+page {
		top = cursor - page + 1
	}
	return max(min(top, n-page), 0)
}

// cursorPartition is the partition under the cursor of the partitions table.
func (m *model) cursorPartition() (Partition, bool) {
	if m.cursor < 0 || m.cursor >= len(m.rows) {
		return Partition{}, false
	}
	return m.snap.Partitions[m.rows[m.cursor]], true
}

// lookup finds a partition of the current snapshot by ref.
func (m *model) lookup(ref PartitionRef) (Partition, bool) {
	i, ok := m.index[ref]
	if !ok {
		return Partition{}, false
	}
	return m.snap.Partitions[i], true
}

// Layout: the header is two lines plus the two banner lines while Redis is unreachable; the footer
// is the status line and the key help. The tables get the rest, less their title row.

func (m *model) headerHeight() int {
	if m.lastErr != nil {
		return 4
	}
	return 2
}

const footerHeight = 2

func (m *model) bodyHeight() int {
	return max(m.height-m.headerHeight()-footerHeight, 1)
}

func (m *model) tableRows() int {
	return max(m.bodyHeight()-1, 1)
}

// How long a status message stays: information a few seconds, a warning or an error
// long enough to be read after looking away.
const (
	statusTTL     = 5 * time.Second
	statusWarnTTL = 15 * time.Second
)

func (m *model) setStatus(kind statusKind, s string) {
	m.status, m.statusKind, m.statusAt = s, kind, m.clock.Now()
}

// expireStatus clears the status message once it is older than its TTL.
func (m *model) expireStatus(now time.Time) {
	ttl := statusTTL
	if m.statusKind == statusWarn || m.statusKind == statusErr {
		ttl = statusWarnTTL
	}
	if m.status != "" && now.Sub(m.statusAt) >= ttl {
		m.status = ""
	}
}
