package cmdutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/redact"
)

// MaskURL hides the secrets of a URL (its password, even when it does not parse, and
// secret-looking query values), for messages and the dashboard.
func MaskURL(raw string) string {
	return redact.URL(raw)
}

// CheckFormat validates -o for the operator commands.
func CheckFormat(cmd *cobra.Command, v string) error {
	switch v {
	case "", "table", "wide", "json", "yaml":
		return nil
	}
	return UsageErrorf(cmd.CommandPath(), "invalid value %q for --output: want table, wide, json or yaml", v)
}

// Structured says the -o value asks for data (json or yaml) rather than text.
func Structured(output string) bool { return output == "json" || output == "yaml" }

// WriteData prints v as -o asks: indented JSON, or YAML with the same field names (the
// YAML is converted from the JSON, so the json tags are the one definition of both).
// Every command prints its data through here, so each format -o accepts is the format
// printed; a command calls it when structured(output) says so.
func WriteData(w io.Writer, output string, v any) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("internal error: -o %q is not a data format", output)
}

// WriteList prints the items of a list command as -o json|yaml asks (always an array,
// [] for none), or, when there are none, says empty on stderr when stdout is a
// terminal (a pipe gets nothing). It reports whether it printed the list: false leaves
// the table to the caller.
func WriteList[T any](ios *IOStreams, output string, items []T, empty string) (bool, error) {
	if Structured(output) {
		if items == nil {
			items = []T{}
		}
		return true, WriteData(ios.Out, output, items)
	}
	if len(items) == 0 {
		if ios.IsTerminal {
			fmt.Fprintln(ios.ErrOut, empty)
		}
		return true, nil
	}
	return false, nil
}

// FmtMS renders milliseconds for a person: 850ms, 12.3s, 4m05s, 3h20m, 2d04h.
func FmtMS(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", ms)
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// FmtTime renders a time the same way everywhere: RFC 3339 in UTC, "-" for none.
func FmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// FirstLine returns the first line of s, cut to n runes with "…".
func FirstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	r := []rune(s)
	if n > 0 && len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// EnvelopeLine summarises an envelope on one line.
func EnvelopeLine(e admin.Envelope) string {
	if e.Type == "" && e.ID == "" {
		return "-"
	}
	return fmt.Sprintf("%s  id %s  key %s  priority %d", OrDash(e.Type), OrDash(e.ID), OrDash(e.Key), e.Priority)
}

// PrettyJSON indents a JSON payload; a JSON string (a payload that was not JSON) is
// printed as its text.
func PrettyJSON(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

func CompactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

func Capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func LagCell(lag int64) string {
	if lag < 0 {
		return "?"
	}
	return strconv.FormatInt(lag, 10)
}

func MSCell(ms int64, known bool) string {
	if !known {
		return "-"
	}
	return FmtMS(ms)
}

// IndentRest indents every line of s after the first.
func IndentRest(s, indent string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+indent)
}

func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
