package tui

import "github.com/charmbracelet/bubbles/key"

// keyMap holds every key binding of the dashboard; the help overlay and the footer are
// generated from it, so a binding documented here is a binding that works.
type keyMap struct {
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding

	Detail, Back, SwitchView, Sort, Reverse, Filter key.Binding

	Skip, DLQ, Retry key.Binding
	// PausePart and ResumePart pause the selected partition (asking a reason) and resume
	// it; Pause, below, pauses the dashboard's refresh.
	PausePart, ResumePart key.Binding
	Act                   key.Binding // footer hints only: s/d/r/P/U, and what it says when read-only
	ActOff                key.Binding
	Browse                key.Binding // footer hint of the detail pane: ↑/↓
	Confirm, Cancel       key.Binding
	// ReasonApply and ReasonCancel end the reason prompt of a pause.
	ReasonApply, ReasonCancel key.Binding

	FilterApply, FilterClear key.Binding

	Pause, Help, Quit key.Binding
}

func newKeyMap() keyMap {
	return keyMap{
		Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		PageUp:   key.NewBinding(key.WithKeys("pgup", "ctrl+b"), key.WithHelp("pgup", "page up")),
		PageDown: key.NewBinding(key.WithKeys("pgdown", "ctrl+f"), key.WithHelp("pgdn", "page down")),
		Top:      key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g/home", "first row")),
		Bottom:   key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G/end", "last row")),

		Detail:     key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "detail")),
		Back:       key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "back")),
		SwitchView: key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "view")),
		Sort:       key.NewBinding(key.WithKeys("o"), key.WithHelp("o", "sort")),
		Reverse:    key.NewBinding(key.WithKeys("O"), key.WithHelp("O", "reverse")),
		Filter:     key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),

		Skip:       key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "skip head")),
		DLQ:        key.NewBinding(key.WithKeys("d"), key.WithHelp("d", "head to DLQ")),
		Retry:      key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "retry head")),
		PausePart:  key.NewBinding(key.WithKeys("P"), key.WithHelp("P", "pause partition")),
		ResumePart: key.NewBinding(key.WithKeys("U"), key.WithHelp("U", "resume partition")),
		Act:        key.NewBinding(key.WithKeys("s", "d", "r", "P", "U"), key.WithHelp("s/d/r/P/U", "act")),
		ActOff:     key.NewBinding(key.WithKeys("s", "d", "r", "P", "U"), key.WithHelp("s/d/r/P/U", "off")),
		Browse:     key.NewBinding(key.WithKeys("up", "down"), key.WithHelp("↑/↓", "prev/next")),
		Confirm:    key.NewBinding(key.WithKeys("y"), key.WithHelp("y", "confirm")),
		Cancel:     key.NewBinding(key.WithKeys("n", "esc"), key.WithHelp("n/esc", "cancel")),

		FilterApply: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "keep filter")),
		FilterClear: key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear filter")),

		ReasonApply:  key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "pause")),
		ReasonCancel: key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel")),

		Pause: key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause")),
		Help:  key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:  key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
	}
}

// ShortHelp is the footer of the main views (help.KeyMap).
func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Detail, k.Act, k.Filter, k.Sort, k.SwitchView, k.Help, k.Quit}
}

// FullHelp is the help overlay, one column per group (help.KeyMap), with longer
// descriptions than the footer has room for.
func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom,
			long(k.Detail, "detail pane"), long(k.Back, "back / clear filter"),
			long(k.SwitchView, "partitions / instances / DLQ / audit"), long(k.Sort, "sort by the next column"),
			long(k.Reverse, "reverse the sort")},
		{long(k.Filter, "filter rows"), long(k.Pause, "pause / resume the refresh"),
			long(k.Skip, "skip the halted head"), long(k.DLQ, "move the head to DLQ"),
			long(k.Retry, "retry the halted head"), long(k.PausePart, "pause the partition (asks why)"),
			long(k.ResumePart, "resume the paused partition"), long(k.Confirm, "confirm an action"),
			long(k.Cancel, "cancel an action"), long(k.Help, "close this help"), k.Quit},
	}
}

func long(b key.Binding, desc string) key.Binding {
	b.SetHelp(b.Help().Key, desc)
	return b
}

// detailHelp is the footer of the detail pane.
func (k keyMap) detailHelp() []key.Binding {
	return []key.Binding{k.Back, k.Browse, k.Act, k.Pause, k.Help, k.Quit}
}

// dialogHelp is the footer while a confirmation dialog is open.
func (k keyMap) dialogHelp() []key.Binding {
	return []key.Binding{k.Confirm, k.Cancel}
}

// reasonHelp is the footer while the reason of a pause is being typed.
func (k keyMap) reasonHelp() []key.Binding {
	return []key.Binding{k.ReasonApply, k.ReasonCancel}
}

// filterHelp is the footer while the filter is being typed.
func (k keyMap) filterHelp() []key.Binding {
	return []key.Binding{k.FilterApply, k.FilterClear}
}
