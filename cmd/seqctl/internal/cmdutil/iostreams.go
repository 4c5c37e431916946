package cmdutil

import (
	"bytes"
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams is every byte a command reads or writes. Commands never touch os.Std*
// directly, so tests run them against buffers and choose whether "the terminal" is one.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// IsTerminal says Out is a terminal: commands print aligned tables with headers there,
	// and plain rows to a pipe.
	IsTerminal bool
	// InIsTerminal says In is a terminal, so a command may ask for confirmation.
	InIsTerminal bool
	// Color allows ANSI colour on Out: Out is a terminal, NO_COLOR is unset or empty and
	// TERM is not "dumb".
	Color bool
}

// System returns the process's standard streams, detecting terminals and honouring
// NO_COLOR (https://no-color.org).
func System() *IOStreams {
	outTTY := isTerminal(os.Stdout)
	return &IOStreams{
		In:           os.Stdin,
		Out:          os.Stdout,
		ErrOut:       os.Stderr,
		IsTerminal:   outTTY,
		InIsTerminal: isTerminal(os.Stdin),
		Color:        colorEnabled(outTTY, os.Getenv),
	}
}

// NewTestIOStreams returns streams backed by buffers: not a terminal, no colour. Set the
// fields to test terminal behaviour.
func NewTestIOStreams() (ios *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut}, in, out, errOut
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// colorEnabled decides colour for a stream: only on a terminal, never when NO_COLOR is
// set to a non-empty value or TERM is "dumb".
func colorEnabled(tty bool, getenv func(string) string) bool {
	return tty && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}

// ANSI styles. Every colour the CLI prints goes through these, so NO_COLOR and pipes
// get plain text.
const (
	AnsiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	AnsiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiGray   = "\x1b[90m"
)

func (s *IOStreams) style(code, text string) string {
	if !s.Color || text == "" {
		return text
	}
	return code + text + AnsiReset
}

// Bold, Green, Yellow, Red and Gray colour text when colour is on and return it
// unchanged otherwise.
func (s *IOStreams) Bold(text string) string   { return s.style(ansiBold, text) }
func (s *IOStreams) Green(text string) string  { return s.style(ansiGreen, text) }
func (s *IOStreams) Yellow(text string) string { return s.style(ansiYellow, text) }
func (s *IOStreams) Red(text string) string    { return s.style(AnsiRed, text) }
func (s *IOStreams) Gray(text string) string   { return s.style(ansiGray, text) }
