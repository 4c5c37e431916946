package tui

import (
	"io"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Every colour and text attribute of the dashboard is here. Colours are the basic ANSI
// palette (the terminal theme decides the shade), so nothing depends on querying the
// terminal's background, which would race with Bubble Tea's input reader.
var (
	colRed    = lipgloss.Color("1")
	colGreen  = lipgloss.Color("2")
	colYellow = lipgloss.Color("3")
	colBlue   = lipgloss.Color("4")
	colPurple = lipgloss.Color("5")
	colCyan   = lipgloss.Color("6")
	colWhite  = lipgloss.Color("15")
	colGrey   = lipgloss.Color("8")
)

// styles is built once per model from one renderer.
type styles struct {
	title, label, value, dim lipgloss.Style
	plain                    lipgloss.Style // no attribute, from the model's renderer
	paused, banner           lipgloss.Style

	tableHeader lipgloss.Style
	// Rows are rendered with a single style each (one Render per visible row).
	// The cursor row is the same style in reverse video (and marked ">" in the gutter,
	// which is all that is left of it without colour).
	row, rowIdle, rowUnowned, rowHalted, rowPaused, rowThrottled lipgloss.Style

	statusOK, statusWarn, statusErr lipgloss.Style

	dialog, dialogTitle, helpBox, section lipgloss.Style
	filterPrompt                          lipgloss.Style

	help help.Styles
}

// newRenderer returns the renderer for out: colour as the terminal allows, or none at
// all when noColor (NO_COLOR / --no-color) or when out is not a terminal.
func newRenderer(out io.Writer, noColor bool) *lipgloss.Renderer {
	if out == nil {
		out = io.Discard
	}
	r := lipgloss.NewRenderer(out)
	if noColor {
		r.SetColorProfile(termenv.Ascii)
	}
	// Fixed answer, never a terminal query (see the colour comment above).
	r.SetHasDarkBackground(true)
	return r
}

func newStyles(r *lipgloss.Renderer) styles {
	s := styles{}
	s.title = r.NewStyle().Bold(true)
	s.label = r.NewStyle().Foreground(colGrey)
	s.value = r.NewStyle().Bold(true)
	s.dim = r.NewStyle().Faint(true)
	s.plain = r.NewStyle()
	s.paused = r.NewStyle().Bold(true).Foreground(colYellow).Reverse(true)
	s.banner = r.NewStyle().Bold(true).Foreground(colWhite).Background(colRed)

	s.tableHeader = r.NewStyle().Bold(true).Foreground(colBlue)
	s.row = r.NewStyle()
	s.rowIdle = r.NewStyle().Faint(true)
	s.rowUnowned = r.NewStyle().Foreground(colYellow)
	s.rowHalted = r.NewStyle().Bold(true).Foreground(colRed)
	s.rowPaused = r.NewStyle().Bold(true).Foreground(colPurple)
	s.rowThrottled = r.NewStyle().Foreground(colCyan)

	s.statusOK = r.NewStyle().Foreground(colGreen)
	s.statusWarn = r.NewStyle().Foreground(colYellow)
	s.statusErr = r.NewStyle().Bold(true).Foreground(colRed)

	s.dialog = r.NewStyle().Border(lipgloss.RoundedBorder()).BorderForeground(colRed).Padding(0, 1)
	s.dialogTitle = r.NewStyle().Bold(true)
	s.helpBox = r.NewStyle().Border(lipgloss.RoundedBorder()).BorderForeground(colBlue).Padding(0, 1)
	s.section = r.NewStyle().Bold(true).Foreground(colBlue)
	s.filterPrompt = r.NewStyle().Bold(true).Foreground(colYellow)

	key := r.NewStyle().Bold(true)
	desc := r.NewStyle().Foreground(colGrey)
	s.help = help.Styles{
		Ellipsis:       desc,
		ShortKey:       key,
		ShortDesc:      desc,
		ShortSeparator: desc,
		FullKey:        key,
		FullDesc:       desc,
		FullSeparator:  desc,
	}
	return s
}

// alertStyle is the style of a state that wants an operator's eye (halted, paused,
// throttled), else otherwise.
func (s styles) alertStyle(state string, otherwise lipgloss.Style) lipgloss.Style {
	switch state {
	case StateHalted:
		return s.rowHalted
	case StatePaused:
		return s.rowPaused
	case StateThrottled:
		return s.rowThrottled
	}
	return otherwise
}

// rowStyle is the style of a table row in the given partition state.
func (s styles) rowStyle(state string, selected bool) lipgloss.Style {
	st := s.row
	switch state {
	case StateUnowned:
		st = s.rowUnowned
	case StateIdle:
		st = s.rowIdle
	default:
		st = s.alertStyle(state, s.row)
	}
	if selected {
		st = st.Reverse(true)
	}
	return st
}
