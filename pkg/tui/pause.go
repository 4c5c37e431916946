package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
)

// The pause (P) and resume (U) of the selected partition: P opens a dialog that asks
// for the reason (enter pauses, esc cancels), U a y / n dialog. Both go through the
// Source's PauseSource.

// askPause opens the pause dialog of the selected partition, or says why it cannot.
func (m *model) askPause() tea.Cmd {
	p, ok := m.pauseTarget(actPause)
	if !ok {
		return nil
	}
	if p.State == StateHalted {
		m.setStatus(statusWarn, fmt.Sprintf("pause: %s is halted: resolve its head first (s, d or r)", p.Ref()))
		return nil
	}
	m.dialog = &confirmDialog{act: actPause, ref: p.Ref(), part: p, reason: m.newReasonInput()}
	return m.dialog.reason.Focus()
}

// askResume opens the resume dialog of the selected partition, or says why it cannot.
func (m *model) askResume() {
	p, ok := m.pauseTarget(actResume)
	if !ok {
		return
	}
	if p.State != StatePaused && p.Pause == nil {
		m.setStatus(statusWarn, fmt.Sprintf("resume: %s is not paused, nothing to do", p.Ref()))
		return
	}
	m.dialog = &confirmDialog{act: actResume, ref: p.Ref(), part: p}
}

// pauseTarget is actionTarget for a pause or a resume, which also needs a Source that
// can do them.
func (m *model) pauseTarget(act action) (Partition, bool) {
	if _, ok := m.src.(PauseSource); !ok {
		m.setStatus(statusWarn, fmt.Sprintf("%s: this dashboard's source cannot pause partitions", act))
		return Partition{}, false
	}
	return m.actionTarget(act)
}

// newReasonInput is the text input of a pause's reason.
func (m *model) newReasonInput() textinput.Model {
	in := textinput.New()
	in.Prompt = ""
	in.Placeholder = "why, e.g. repairing the data of this key, OPS-42"
	in.CharLimit = 200
	in.Width = max(min(m.width-4, dialogWidth)-4-labelWidth-1, 10)
	in.TextStyle = m.st.plain
	in.PlaceholderStyle = m.st.dim
	in.CompletionStyle = m.st.dim
	in.Cursor.Style = m.st.plain
	in.Cursor.TextStyle = m.st.plain
	in.Cursor.SetMode(cursor.CursorStatic)
	return in
}

// onReasonKey handles a key while the pause dialog asks for the reason: enter pauses
// (once a reason is typed), esc cancels, anything else is typed.
func (m *model) onReasonKey(msg tea.KeyMsg) tea.Cmd {
	d := m.dialog
	switch {
	case key.Matches(msg, m.keys.ReasonApply):
		if strings.TrimSpace(d.reason.Value()) == "" {
			m.setStatus(statusWarn, "pause: type the reason first (it is shown with the pause and kept in the audit log)")
			return nil
		}
		return m.confirm()
	case key.Matches(msg, m.keys.ReasonCancel):
		m.setStatus(statusInfo, "pause cancelled, nothing done")
		m.dialog = nil
		return nil
	}
	var cmd tea.Cmd
	d.reason, cmd = d.reason.Update(msg)
	return cmd
}

// Widths of the action dialogs: the box, and the labels of its rows.
const (
	dialogWidth = 72
	labelWidth  = 10
)

// viewPauseDialog is the dialog of a pause or a resume: the partition, its pause when
// it has one, what the action does, and the reason being typed or y / n.
func (m *model) viewPauseDialog(w int) string {
	d := m.dialog
	bw := min(w-4, dialogWidth)
	inner := bw - 4 // border and padding
	t := actionText[d.act]
	row := func(label, value string) string {
		return m.st.label.Render(fit(label, labelWidth, false)) + value
	}
	lines := []string{
		m.st.dialogTitle.Render(t.title + "?"),
		"",
		row("partition", d.ref.String()),
		row("state", m.st.rowStyle(d.part.State, false).Render(stateText(d.part.State))),
		row("owner", fmt.Sprintf("%s gen %d", orDash(d.part.Owner), d.part.Generation)),
	}
	if pi := d.part.Pause; pi != nil {
		until := "resumed"
		if !pi.Until.IsZero() {
			until = fmtStamp(pi.Until)
		}
		lines = append(lines, row("paused by", orDash(pi.By)), row("since", fmtStamp(pi.Since)), row("until", until), row("why", pi.Reason))
	}
	lines = append(lines, "")
	lines = append(lines, wrapLines(t.what, inner, 4)...)
	if d.act == actPause {
		if d.part.Pause != nil || d.part.State == StatePaused {
			lines = append(lines, wrapLines("It is paused already: this replaces its pause.", inner, 2)...)
		}
		lines = append(lines, "", row("reason", d.reason.View()), "",
			m.st.value.Render("enter")+" pause   "+m.st.value.Render("esc")+" cancel")
	} else {
		lines = append(lines, "", m.st.value.Render("y")+" confirm   "+m.st.value.Render("n/esc")+" cancel")
	}
	for i, l := range lines {
		lines[i] = clip(l, inner)
	}
	return m.st.dialog.Width(bw - 2).Render(strings.Join(lines, "\n"))
}

// pauseInfoText says who paused a partition, since when and until when.
func pauseInfoText(pi *PauseInfo) string {
	s := "by " + orDash(pi.By)
	if !pi.Since.IsZero() {
		s += " since " + fmtStamp(pi.Since)
	}
	if pi.Until.IsZero() {
		return s + ", until resumed"
	}
	return s + ", until " + fmtStamp(pi.Until)
}

// fmtStamp is a time as the detail pane shows it, in UTC; "-" for none.
func fmtStamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// stateText is a state as the table shows it: the states that need an operator in
// capitals.
func stateText(state string) string {
	switch state {
	case StateHalted, StatePaused:
		return strings.ToUpper(state)
	}
	return state
}
