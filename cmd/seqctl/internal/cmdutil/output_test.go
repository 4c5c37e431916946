package cmdutil

import (
	"errors"
	"fmt"
	"testing"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestMaskURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:1/0":     "redis://:xxxxx@h:1/0",
		"redis://user:pw@h:1/0": "redis://user:xxxxx@h:1/0",
		"redis://h:1/0":         "redis://h:1/0",
	} {
		if got := MaskURL(in); got != want {
			t.Errorf("maskURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExitFor(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{&admin.NotFoundError{What: "partition", Name: "x"}, ExitNotFound},
		{fmt.Errorf("x: %w", engine.ErrEntryGone), ExitNotFound},
		{&engine.HeadMovedError{Expected: "1-0"}, ExitConflict},
		{engine.ErrFenced, ExitConflict},
		{fmt.Errorf("%w: a:b:c", admin.ErrInvalidStream), ExitUsage},
		{fmt.Errorf("%w: head", engine.ErrNotHalted), ExitFailure},
		{errors.New("boom"), ExitFailure},
		{&config.Error{File: "d.toml"}, ExitUsage},
	}
	for _, tt := range tests {
		if got := ExitCode(ExitFor(tt.err)); got != tt.want {
			t.Errorf("exit code of %v = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestFmtMS(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "0ms", 850: "850ms", 12345: "12.3s", 245000: "4m05s", 3*3600000 + 20*60000: "3h20m", 2*86400000 + 4*3600000: "2d04h",
	} {
		if got := FmtMS(ms); got != want {
			t.Errorf("fmtMS(%d) = %q, want %q", ms, got, want)
		}
	}
}
