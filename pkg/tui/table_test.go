package tui

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLayoutColumns(t *testing.T) {
	titles := func(w int) []string {
		var want [colCount]int
		want[colKey], want[colHandler] = 30, 10
		ws := layoutColumns(partitionCols, want[:], w)
		var out []string
		total := gutterWidth - 1
		for i, c := range partitionCols {
			if ws[i] > 0 {
				out = append(out, c.title)
				total += ws[i] + 1
			}
		}
		if total > w {
			t.Errorf("width %d: the columns take %d", w, total)
		}
		return out
	}
	all := []string{"KEY", "CATEGORY", "HANDLER", "OWNER", "GEN", "LEASE", "BACKLOG", "", "PENDING", "HEAD AGE", "STATE"}
	for _, tt := range []struct {
		width int
		want  []string
	}{
		{120, all},
		{96, all},
		{90, []string{"KEY", "CATEGORY", "HANDLER", "OWNER", "LEASE", "BACKLOG", "", "PENDING", "HEAD AGE", "STATE"}},
		{80, []string{"KEY", "CATEGORY", "HANDLER", "BACKLOG", "", "PENDING", "HEAD AGE", "STATE"}},
		{60, []string{"KEY", "CATEGORY", "HANDLER", "BACKLOG", "HEAD AGE", "STATE"}},
		{40, []string{"KEY", "BACKLOG", "HEAD AGE", "STATE"}},
	} {
		if diff := cmp.Diff(tt.want, titles(tt.width)); diff != "" {
			t.Errorf("width %d (-want +got):\n%s", tt.width, diff)
		}
	}
}
