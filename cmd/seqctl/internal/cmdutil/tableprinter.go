package cmdutil

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// tablePrinter prints rows in one of two layouts:
//
//   - aligned: columns padded by github.com/olekukonko/tablewriter under a header (bold
//     when colour is on), without borders, the way kubectl and gh print. This is what a
//     terminal gets, and what -o table and -o wide ask for anywhere (a pipe included).
//   - rows: one tab-separated row per line, for cut and awk: what a pipe gets by default.
//     No header unless asked for.
//
// --no-headers drops the header of either layout. Cells must not contain tabs or
// newlines; they are replaced by spaces.
type tablePrinter struct {
	ios     *IOStreams
	header  []string
	Rows    [][]string
	Aligned bool
	// showHeader prints the header row.
	showHeader bool
}

// tableLayout is what the command line says about tables: the -o value and
// --no-headers.
type tableLayout struct {
	Output    string
	NoHeaders bool
}

// NewTablePrinter returns a printer that follows the streams only: aligned with a header
// on a terminal, tab-separated rows without a header in a pipe.
func NewTablePrinter(ios *IOStreams, header ...string) *tablePrinter {
	return &tablePrinter{ios: ios, header: header, Aligned: ios.IsTerminal, showHeader: ios.IsTerminal}
}

// NewTable returns a printer that follows the streams and the command line: -o table or
// -o wide align the columns under a header even in a pipe; --no-headers drops it.
func NewTable(ios *IOStreams, l tableLayout, header ...string) *tablePrinter {
	t := NewTablePrinter(ios, header...)
	if l.Output == "table" || l.Output == "wide" {
		t.Aligned, t.showHeader = true, true
	}
	if l.NoHeaders {
		t.showHeader = false
	}
	return t
}

// AlignedTable returns a printer that always aligns its columns under a header: for
// labelled views (inspect) that must read the same in a pipe.
func AlignedTable(ios *IOStreams, header ...string) *tablePrinter {
	return &tablePrinter{ios: ios, header: header, Aligned: true, showHeader: true}
}

var cellCleaner = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

func (t *tablePrinter) AddRow(cells ...string) {
	clean := make([]string, len(cells))
	for i, c := range cells {
		clean[i] = cellCleaner.Replace(c)
	}
	t.Rows = append(t.Rows, clean)
}

// Render writes the table to w.
func (t *tablePrinter) Render(w io.Writer) error {
	if !t.Aligned {
		var b strings.Builder
		if t.showHeader && len(t.header) > 0 {
			b.WriteString(strings.Join(t.header, "\t") + "\n")
		}
		for _, r := range t.Rows {
			b.WriteString(strings.Join(r, "\t") + "\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	var buf bytes.Buffer
	pad := tw.CellPadding{Global: tw.Padding{Left: "", Right: "  ", Overwrite: true}}
	tbl := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenColumns: tw.Off, BetweenRows: tw.Off, ShowHeader: tw.Off},
				Lines:      tw.Lines{ShowHeaderLine: tw.Off, ShowTop: tw.Off, ShowBottom: tw.Off, ShowFooterLine: tw.Off},
			},
		})),
		tablewriter.WithConfig(tablewriter.Config{
			Header: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoFormat: tw.Off, AutoWrap: tw.WrapNone},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Padding:    pad,
			},
			Row: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoWrap: tw.WrapNone},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Padding:    pad,
			},
		}),
		tablewriter.WithTrimSpace(tw.Off),
	)
	headed := t.showHeader && len(t.header) > 0
	if headed {
		tbl.Header(t.header)
	}
	for _, r := range t.Rows {
		if err := tbl.Append(r); err != nil {
			return fmt.Errorf("table: %w", err)
		}
	}
	if err := tbl.Render(); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	var b strings.Builder
	for i, l := range lines {
		l = trimCell(l)
		if i == 0 && headed {
			l = t.ios.Bold(l)
		}
		b.WriteString(l + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// trimCell removes the padding after the last cell, and the colour reset tablewriter
// writes after the padding of a coloured last cell (one reset is put back when the line
// still holds a colour).
func trimCell(l string) string {
	const reset = "\x1b[0m"
	l = strings.TrimRight(l, " ")
	stripped := false
	for strings.HasSuffix(l, reset) {
		l, stripped = strings.TrimRight(strings.TrimSuffix(l, reset), " "), true
	}
	if stripped && strings.Contains(l, "\x1b[") {
		l += reset
	}
	return l
}
