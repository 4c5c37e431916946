package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// tablePrinter prints rows the way the streams want them: on a terminal, an aligned
// table under a bold header; to a pipe, one tab-separated row per line and no header,
// for cut and awk. Cells must not contain tabs or newlines; they are replaced by spaces.
type tablePrinter struct {
	ios    *IOStreams
	header []string
	rows   [][]string
}

func newTablePrinter(ios *IOStreams, header ...string) *tablePrinter {
	return &tablePrinter{ios: ios, header: header}
}

func (t *tablePrinter) AddRow(cells ...string) {
	clean := make([]string, len(cells))
	for i, c := range cells {
		clean[i] = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(c)
	}
	t.rows = append(t.rows, clean)
}

// Render writes the table to w.
func (t *tablePrinter) Render(w io.Writer) error {
	if !t.ios.IsTerminal {
		for _, r := range t.rows {
			if _, err := fmt.Fprintln(w, strings.Join(r, "\t")); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(t.header) > 0 {
		// Bold escapes would upset the column widths: pad first, then style the line.
		var hb strings.Builder
		htw := tabwriter.NewWriter(&hb, 0, 0, 2, ' ', 0)
		fmt.Fprintln(htw, strings.Join(t.header, "\t"))
		for _, r := range t.rows {
			fmt.Fprintln(htw, strings.Join(r, "\t"))
		}
		if err := htw.Flush(); err != nil {
			return err
		}
		lines := strings.SplitAfter(hb.String(), "\n")
		if _, err := io.WriteString(w, t.ios.Bold(strings.TrimRight(lines[0], " \n"))+"\n"); err != nil {
			return err
		}
		for _, l := range lines[1:] {
			if _, err := io.WriteString(w, strings.TrimRight(l, " \n")+trailingNewline(l)); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func trailingNewline(l string) string {
	if strings.HasSuffix(l, "\n") {
		return "\n"
	}
	return ""
}
