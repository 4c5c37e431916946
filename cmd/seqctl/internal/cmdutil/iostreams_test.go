package cmdutil

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestColorEnabled(t *testing.T) {
	tests := []struct {
		name string
		tty  bool
		env  map[string]string
		want bool
	}{
		{"terminal", true, nil, true},
		{"pipe", false, nil, false},
		{"NO_COLOR set", true, map[string]string{"NO_COLOR": "1"}, false},
		{"NO_COLOR empty counts as unset", true, map[string]string{"NO_COLOR": ""}, true},
		{"dumb terminal", true, map[string]string{"TERM": "dumb"}, false},
		{"pipe with a colour terminal", false, map[string]string{"TERM": "xterm-256color"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			if got := colorEnabled(tt.tty, getenv); got != tt.want {
				t.Errorf("colorEnabled(%v, %v) = %v, want %v", tt.tty, tt.env, got, tt.want)
			}
		})
	}
}

func TestStyles(t *testing.T) {
	ios, _, _, _ := NewTestIOStreams()
	if ios.IsTerminal || ios.Color || ios.InIsTerminal {
		t.Fatalf("test streams claim a terminal: %+v", ios)
	}
	if got := ios.Bold("x") + ios.Green("y") + ios.Red("z") + ios.Gray("w"); got != "xyzw" {
		t.Errorf("styles without colour = %q, want plain text", got)
	}
	ios.Color = true
	if got := ios.Green("ok"); got != "\x1b[32mok\x1b[0m" {
		t.Errorf("Green with colour = %q", got)
	}
	if got := ios.Red(""); got != "" {
		t.Errorf("styling an empty string = %q, want empty", got)
	}
}

func TestTablePrinter(t *testing.T) {
	tests := []struct {
		name  string
		tty   bool
		color bool
		want  string
	}{
		{"pipe: tab-separated rows, no header", false, false, "order\tclient_id\npayment\tnot partitioned\n"},
		{"terminal: aligned under a header", true, false, "CATEGORY  KEY\norder     client_id\npayment   not partitioned\n"},
		{"terminal in colour: bold header", true, true, "\x1b[1mCATEGORY  KEY\x1b[0m\norder     client_id\npayment   not partitioned\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := NewTestIOStreams()
			ios.IsTerminal, ios.Color = tt.tty, tt.color
			tp := NewTablePrinter(ios, "CATEGORY", "KEY")
			tp.AddRow("order", "client_id")
			tp.AddRow("payment", "not\tpartitioned") // a tab inside a cell would split it: it becomes a space
			var b bytes.Buffer
			if err := tp.Render(&b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("Render mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
