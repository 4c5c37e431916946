package tui

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// Update handles one message. Key presses only move cursors and open or close panes:
// sorting and filtering the partitions happens when a snapshot arrives or when the sort
// key or the filter text changes, never on navigation.
func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.help.Width = msg.Width
		m.filter.Width = max(msg.Width-30, 10)
		m.syncSelection()
		m.clampInstances()
		return m, nil
	case tickMsg:
		now := m.clock.Now()
		m.expireStatus(now)
		return m, tea.Batch(m.clock.Tick(m.tickEvery()), m.startFetch(now))
	case snapshotMsg:
		return m, m.onSnapshot(msg)
	case dlqMsg:
		m.dlqRows = receive(&m.dlq, msg, m.dlqRows, m.tableRows())
		return m, nil
	case auditMsg:
		m.auditRows = receive(&m.audit, msg, m.auditRows, m.tableRows())
		return m, nil
	case headMsg:
		m.onHead(msg)
		return m, nil
	case actionMsg:
		return m, m.onAction(msg)
	case tea.KeyMsg:
		return m, m.onKey(msg)
	}
	return m, nil
}

// startFetch starts a refresh if one is due: not paused, none in flight, and the
// refresh interval (or the backoff after a failure) has passed.
func (m *model) startFetch(now time.Time) tea.Cmd {
	// A tick that fires a hair early still counts.
	slack := m.tickEvery() / 10
	if m.paused || m.fetching || now.Add(slack).Before(m.nextFetch) {
		return nil
	}
	m.fetching = true
	m.nextFetch = now.Add(m.refresh)
	return fetchSnapshot(m.ctx, m.src)
}

// refreshNow makes the next refresh due at once and starts it if it can.
func (m *model) refreshNow() tea.Cmd {
	now := m.clock.Now()
	m.nextFetch = now
	return m.startFetch(now)
}

func (m *model) onSnapshot(msg snapshotMsg) tea.Cmd {
	m.fetching = false
	now := m.clock.Now()
	if msg.err != nil {
		m.failures++
		m.lastErr, m.slow = msg.err, msg.slow
		m.nextFetch = now.Add(backoff(m.refresh, m.failures))
		m.syncSelection() // the banner takes a line
		m.clampInstances()
		return nil
	}
	m.failures, m.lastErr, m.slow = 0, nil, false
	m.apply(msg.snap, now)
	if m.view == viewDetail && !m.detailLoading {
		m.detailLoading = true
		return fetchHead(m.ctx, m.src, m.detailRef)
	}
	return m.fetchList() // the DLQ or audit view refreshes with the snapshot
}

func (m *model) onHead(msg headMsg) {
	if m.view != viewDetail || msg.ref != m.detailRef {
		return // the operator moved on
	}
	m.detailLoading = false
	if msg.err != nil {
		m.detailErr = msg.err
		return
	}
	d := msg.detail
	m.detail, m.detailErr = &d, nil
	m.payload = prettyPayload(d.Payload)
}

func (m *model) onAction(msg actionMsg) tea.Cmd {
	m.acting = false
	what := fmt.Sprintf("head %s of %s", msg.expectID, msg.ref)
	if msg.act.onPartition() {
		what = msg.ref.String()
	}
	switch {
	case msg.err == nil:
		m.setStatus(statusOK, actionDone(msg.act)+" "+what)
	case errors.Is(msg.err, ErrHeadMoved):
		m.setStatus(statusWarn, fmt.Sprintf("head moved, nothing done: %s is no longer the head", what))
	default:
		m.setStatus(statusErr, fmt.Sprintf("%s failed on %s: %v", msg.act, what, msg.err))
	}
	cmds := []tea.Cmd{m.refreshNow()}
	if m.view == viewDetail && m.detailRef == msg.ref {
		m.detailLoading = true
		cmds = append(cmds, fetchHead(m.ctx, m.src, m.detailRef))
	}
	return tea.Batch(cmds...)
}

func actionDone(a action) string {
	switch a {
	case actDLQ:
		return "moved to the DLQ:"
	case actRetry:
		return "retrying:"
	case actPause:
		return "paused:"
	case actResume:
		return "resumed:"
	}
	return "skipped:"
}

func (m *model) onKey(msg tea.KeyMsg) tea.Cmd {
	k := m.keys
	if msg.Type == tea.KeyCtrlC {
		return tea.Quit
	}
	switch {
	case m.filtering:
		return m.onFilterKey(msg)
	case m.dialog != nil && m.dialog.act == actPause:
		return m.onReasonKey(msg)
	case m.dialog != nil:
		switch {
		case key.Matches(msg, k.Confirm):
			return m.confirm()
		case key.Matches(msg, k.Cancel):
			m.setStatus(statusInfo, fmt.Sprintf("%s cancelled, nothing done", m.dialog.act))
			m.dialog = nil
		case key.Matches(msg, k.Quit):
			return tea.Quit
		}
		return nil
	case m.showHelp:
		switch {
		case key.Matches(msg, k.Help), key.Matches(msg, k.Back):
			m.showHelp = false
		case key.Matches(msg, k.Quit):
			return tea.Quit
		}
		return nil
	}

	switch {
	case key.Matches(msg, k.Quit):
		return tea.Quit
	case key.Matches(msg, k.Help):
		m.showHelp = true
		return nil
	case key.Matches(msg, k.Pause):
		m.paused = !m.paused
		if m.paused {
			m.setStatus(statusInfo, "paused: the data is not refreshed until p is pressed again")
			return nil
		}
		m.setStatus(statusInfo, "resumed")
		return m.refreshNow()
	case key.Matches(msg, k.SwitchView):
		next := viewPartitions
		for i, v := range tabOrder {
			if v == m.view {
				next = tabOrder[(i+1)%len(tabOrder)]
			}
		}
		m.view = next
		return m.fetchList()
	}

	switch m.view {
	case viewInstances:
		m.onInstancesKey(msg)
		return nil
	case viewDLQ:
		m.onListKey(msg, &m.dlq, len(m.dlqRows))
		return nil
	case viewAudit:
		m.onListKey(msg, &m.audit, len(m.auditRows))
		return nil
	case viewDetail:
		return m.onDetailKey(msg)
	}
	return m.onPartitionsKey(msg)
}

// onListKey moves the cursor of the DLQ or audit view; esc goes back to the partitions.
func (m *model) onListKey(msg tea.KeyMsg, l *listState, n int) {
	if m.move(msg, &l.cursor, n, m.tableRows()) {
		l.clamp(n, m.tableRows())
		return
	}
	if key.Matches(msg, m.keys.Back) {
		m.view = viewPartitions
	}
}

// move applies a navigation key to a cursor over n rows with page rows on screen, and
// reports whether the key was a navigation key.
func (m *model) move(msg tea.KeyMsg, cur *int, n, page int) bool {
	k := m.keys
	switch {
	case key.Matches(msg, k.Up):
		*cur--
	case key.Matches(msg, k.Down):
		*cur++
	case key.Matches(msg, k.PageUp):
		*cur -= page
	case key.Matches(msg, k.PageDown):
		*cur += page
	case key.Matches(msg, k.Top):
		*cur = 0
	case key.Matches(msg, k.Bottom):
		*cur = n - 1
	default:
		return false
	}
	*cur = max(min(*cur, n-1), 0)
	return true
}

func (m *model) onPartitionsKey(msg tea.KeyMsg) tea.Cmd {
	k := m.keys
	if m.move(msg, &m.cursor, len(m.rows), m.tableRows()) {
		m.choose()
		return nil
	}
	switch {
	case key.Matches(msg, k.Detail):
		if p, ok := m.cursorPartition(); ok && !m.selGone {
			m.choose() // back from the pane, the cursor is on the partition looked at
			return m.openDetail(p.Ref())
		}
		if m.selGone {
			m.setStatus(statusWarn, m.goneText())
		}
	case key.Matches(msg, k.Sort):
		m.sortBy, m.sortDesc = (m.sortBy+1)%sortKeys, false
		m.resort()
		m.setStatus(statusInfo, "sorted by "+m.sortText()+" (halted partitions stay on top; O reverses)")
	case key.Matches(msg, k.Reverse):
		m.sortDesc = !m.sortDesc
		m.resort()
		m.setStatus(statusInfo, "sorted by "+m.sortText()+" (halted partitions stay on top)")
	case key.Matches(msg, k.Filter):
		m.filtering = true
		m.filter.SetValue(m.filterTxt)
		m.filter.CursorEnd()
		return m.filter.Focus()
	case key.Matches(msg, k.Back):
		if m.filterTxt != "" {
			m.setFilter("")
		}
	case key.Matches(msg, k.Skip):
		m.askAction(actSkip)
	case key.Matches(msg, k.DLQ):
		m.askAction(actDLQ)
	case key.Matches(msg, k.Retry):
		m.askAction(actRetry)
	case key.Matches(msg, k.PausePart):
		return m.askPause()
	case key.Matches(msg, k.ResumePart):
		m.askResume()
	}
	return nil
}

func (m *model) onInstancesKey(msg tea.KeyMsg) {
	if m.move(msg, &m.icursor, len(m.instOrder), m.tableRows()) {
		m.clampInstances()
		return
	}
	if key.Matches(msg, m.keys.Back) {
		m.view = viewPartitions
	}
}

// onDetailKey: esc / enter go back; up / down show the previous / next partition of the
// table; s / d / r act on the partition shown.
func (m *model) onDetailKey(msg tea.KeyMsg) tea.Cmd {
	k := m.keys
	switch {
	case key.Matches(msg, k.Back), key.Matches(msg, k.Detail):
		m.view = m.back
		return nil
	case key.Matches(msg, k.Skip):
		m.askAction(actSkip)
		return nil
	case key.Matches(msg, k.DLQ):
		m.askAction(actDLQ)
		return nil
	case key.Matches(msg, k.Retry):
		m.askAction(actRetry)
		return nil
	case key.Matches(msg, k.PausePart):
		return m.askPause()
	case key.Matches(msg, k.ResumePart):
		m.askResume()
		return nil
	}
	if m.move(msg, &m.cursor, len(m.rows), m.tableRows()) {
		m.choose()
		if p, ok := m.cursorPartition(); ok && p.Ref() != m.detailRef {
			return m.openDetail(p.Ref())
		}
	}
	return nil
}

func (m *model) openDetail(ref PartitionRef) tea.Cmd {
	if m.view != viewDetail {
		m.back = m.view
	}
	m.view = viewDetail
	m.detailRef = ref
	m.detail, m.detailErr, m.payload = nil, nil, nil
	m.detailLoading = true
	return fetchHead(m.ctx, m.src, ref)
}

func (m *model) onFilterKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, m.keys.FilterApply):
		m.filtering = false
		m.filter.Blur()
		return nil
	case key.Matches(msg, m.keys.FilterClear):
		m.filtering = false
		m.filter.Blur()
		m.filter.SetValue("")
		m.setFilter("")
		return nil
	}
	var cmd tea.Cmd
	m.filter, cmd = m.filter.Update(msg)
	m.setFilter(m.filter.Value())
	return cmd
}

// setFilter applies a new filter text (a no-op when it is unchanged).
func (m *model) setFilter(s string) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == m.filterTxt {
		return
	}
	m.filterTxt = s
	m.refilter()
}

// actionPartition is the partition an action key refers to: the one in the detail pane,
// else the one under the cursor.
func (m *model) actionPartition() (Partition, bool) {
	if m.view == viewDetail {
		return m.lookup(m.detailRef)
	}
	if m.selGone {
		return Partition{}, false
	}
	return m.cursorPartition()
}

// goneText says that the selected partition is no longer listed.
func (m *model) goneText() string {
	return fmt.Sprintf("%s is no longer listed (gone, or filtered out): move the cursor to choose a partition", m.selRef)
}

// sortText names the sort order: the column and its direction.
func (m *model) sortText() string {
	desc := m.sortBy.descendingByDefault() != m.sortDesc
	if desc {
		return m.sortBy.String() + " ▼"
	}
	return m.sortBy.String() + " ▲"
}

// askAction opens the confirmation dialog of act on the halted head of the selected
// partition, or says why it cannot.
func (m *model) askAction(act action) {
	p, ok := m.actionTarget(act)
	switch {
	case !ok:
	case p.State != StateHalted || p.HaltedEntryID == "":
		m.setStatus(statusWarn, fmt.Sprintf("%s: %s is not halted, nothing to do", act, p.Ref()))
	default:
		m.dialog = &confirmDialog{act: act, ref: p.Ref(), expectID: p.HaltedEntryID, part: p}
	}
}

// actionTarget is the partition an action key acts on; when there is none to act on
// (read-only, nothing selected, an action still running) it says why and reports false.
func (m *model) actionTarget(act action) (Partition, bool) {
	if m.readOnly {
		m.setStatus(statusWarn, fmt.Sprintf("read-only: %s is disabled (the dashboard was started read-only)", act))
		return Partition{}, false
	}
	p, ok := m.actionPartition()
	switch {
	case !ok && m.selGone && m.view != viewDetail:
		m.setStatus(statusWarn, fmt.Sprintf("%s: %s", act, m.goneText()))
	case !ok:
		m.setStatus(statusWarn, fmt.Sprintf("%s: no partition selected", act))
	case m.acting:
		m.setStatus(statusWarn, fmt.Sprintf("%s: wait, the previous action is still running", act))
	default:
		return p, true
	}
	return Partition{}, false
}

// confirm carries out the dialog's action: on a head, as a compare-and-act on the id it
// showed; on the partition, a pause with the reason typed, or a resume.
func (m *model) confirm() tea.Cmd {
	d := m.dialog
	m.dialog = nil
	m.acting = true
	if d.act.onPartition() {
		reason := strings.TrimSpace(d.reason.Value())
		m.setStatus(statusInfo, fmt.Sprintf("%s: %s…", d.act, d.ref))
		return runPartitionAction(m.ctx, m.src.(PauseSource), d.act, d.ref, reason)
	}
	m.setStatus(statusInfo, fmt.Sprintf("%s: head %s of %s…", d.act, d.expectID, d.ref))
	return runAction(m.ctx, m.src, d.act, d.ref, d.expectID)
}
