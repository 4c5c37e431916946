package cmdutil

import (
	"errors"
	"fmt"
	"testing"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"plain error", errors.New("boom"), ExitFailure},
		{"explicit not found", &ExitError{Code: ExitNotFound, Err: errors.New("no such partition")}, ExitNotFound},
		{"explicit conflict, wrapped", fmt.Errorf("skip: %w", &ExitError{Code: ExitConflict, Err: errors.New("head moved")}), ExitConflict},
		{"silent exit", &ExitError{Code: ExitFailure}, ExitFailure},
		{"usage", UsageErrorf("seqctl", "bad flag"), ExitUsage},
		{"config error", &config.Error{File: "d.toml"}, ExitUsage},
		{"wrapped config error", fmt.Errorf("load: %w", &config.Error{File: "d.toml"}), ExitUsage},
		{"incorrect usage", &engine.IncorrectUsageError{Problems: []string{"x"}}, ExitUsage},
		{"explicit code wins over the wrapped type", &ExitError{Code: ExitFailure, Err: &config.Error{}}, ExitFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ExitCode(tt.err); got != tt.want {
				t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

func TestExitErrorMessage(t *testing.T) {
	if got := (&ExitError{Code: 3}).Error(); got != "exit status 3" {
		t.Errorf("silent ExitError message = %q", got)
	}
	inner := errors.New("head moved")
	ee := &ExitError{Code: 4, Err: inner}
	if ee.Error() != "head moved" || !errors.Is(ee, inner) {
		t.Errorf("ExitError does not present or unwrap its error: %q", ee.Error())
	}
}
