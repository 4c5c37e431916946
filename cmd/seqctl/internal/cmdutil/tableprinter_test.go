package cmdutil

import (
	"testing"
)

func TestTablePrinterLayouts(t *testing.T) {
	rows := [][]string{{"order", "client-1", "halted"}, {"payment", "p-10\twith a tab", "idle"}}
	tests := []struct {
		name   string
		tty    bool
		color  bool
		layout tableLayout
		want   string
	}{
		{name: "terminal", tty: true, want: "CATEGORY  KEY              STATE\norder     client-1         halted\npayment   p-10 with a tab  idle\n"},
		{name: "terminal without headers", tty: true, layout: tableLayout{NoHeaders: true}, want: "order    client-1         halted\npayment  p-10 with a tab  idle\n"},
		{name: "pipe", want: "order\tclient-1\thalted\npayment\tp-10 with a tab\tidle\n"},
		{name: "pipe with -o table", layout: tableLayout{Output: "table"}, want: "CATEGORY  KEY              STATE\norder     client-1         halted\npayment   p-10 with a tab  idle\n"},
		{name: "pipe with -o wide and --no-headers", layout: tableLayout{Output: "wide", NoHeaders: true}, want: "order    client-1         halted\npayment  p-10 with a tab  idle\n"},
		{
			name: "colour: bold header, coloured cells keep their width and one reset", tty: true, color: true,
			want: ansiBold + "CATEGORY  KEY              STATE" + AnsiReset + "\norder     client-1         " + AnsiRed + "halted" + AnsiReset + "\npayment   p-10 with a tab  idle\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, out, _ := NewTestIOStreams()
			ios.IsTerminal, ios.Color = tt.tty, tt.color
			tp := NewTable(ios, tt.layout, "CATEGORY", "KEY", "STATE")
			for _, r := range rows {
				state := r[2]
				if state == "halted" {
					state = ios.Red(state)
				}
				tp.AddRow(r[0], r[1], state)
			}
			if err := tp.Render(out); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("got:\n%q\nwant:\n%q", out.String(), tt.want)
			}
		})
	}
}
