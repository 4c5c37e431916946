package root

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/config"
)

func TestRootRun(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // fragment; "" means empty
		wantStderr string // exact
	}{
		{name: "no arguments prints help", args: nil, wantStdout: "Start with 'seqctl validate'"},
		{name: "help flag", args: []string{"--help"}, wantStdout: "Exit codes:"},
		{name: "help command", args: []string{"help", "validate"}, wantStdout: "seqctl validate --config deploy/domain.toml"},
		{name: "command help", args: []string{"validate", "--help"}, wantStdout: "FILE:LINE: KEY PATH: message"},
		{
			name: "unknown command", args: []string{"valdate"}, wantCode: cmdutil.ExitUsage,
			wantStderr: "seqctl: unknown command \"valdate\" for \"seqctl\"\n\nDid you mean this?\n\tvalidate\nRun 'seqctl --help' for usage.\n",
		},
		{
			name: "unknown flag", args: []string{"validate", "--strict"}, wantCode: cmdutil.ExitUsage,
			wantStderr: "seqctl: unknown flag: --strict\nRun 'seqctl validate --help' for usage.\n",
		},
		{
			name: "unknown root flag", args: []string{"--verbose"}, wantCode: cmdutil.ExitUsage,
			wantStderr: "seqctl: unknown flag: --verbose\nRun 'seqctl --help' for usage.\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cmdtest.RunCLI(t, false, tt.args...)
			if r.Code != tt.wantCode {
				t.Errorf("exit code = %d, want %d", r.Code, tt.wantCode)
			}
			if tt.wantStdout == "" && r.Stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.Stdout)
			}
			if !strings.Contains(r.Stdout, tt.wantStdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantStdout, r.Stdout)
			}
			if diff := cmp.Diff(tt.wantStderr, r.Stderr); diff != "" {
				t.Errorf("stderr mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryCommandTeaches checks that every seqctl command has a short line, a long
// description and an example in its --help.
func TestEveryCommandTeaches(t *testing.T) {
	ios, _, _, _ := cmdutil.NewTestIOStreams()
	root := newCmdRoot(&cmdutil.Factory{IOStreams: ios})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		t.Run(c.CommandPath(), func(t *testing.T) {
			if c.Short == "" || c.Long == "" || c.Example == "" {
				t.Errorf("%s: Short %q, Long %d bytes, Example %d bytes; all three are required", c.CommandPath(), c.Short, len(c.Long), len(c.Example))
			}
			if c != root && c.RunE == nil {
				t.Errorf("%s has no RunE", c.CommandPath())
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func TestErrorsPrintedOnce(t *testing.T) {
	path := cmdtest.WriteConfig(t, "name = \"x\"\n[broker]\nkind = \"kafka\"\n")
	r := cmdtest.RunCLI(t, false, "validate", "--config", path)
	if n := strings.Count(r.Stderr, `unknown broker kind "kafka"`); n != 1 {
		t.Errorf("problem printed %d times, want once:\n%s", n, r.Stderr)
	}
	if r.Code != cmdutil.ExitUsage {
		t.Errorf("exit code = %d, want %d", r.Code, cmdutil.ExitUsage)
	}
}

func TestPrintError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", errors.New("redis: connection refused"), "seqctl: redis: connection refused\n"},
		{"wrapped plain", fmt.Errorf("connect: %w", errors.New("refused")), "seqctl: connect: refused\n"},
		{"silent exit", &cmdutil.ExitError{Code: 3}, ""},
		{"exit error with message", &cmdutil.ExitError{Code: 3, Err: errors.New(`partition "order:c-1" not found`)}, "seqctl: partition \"order:c-1\" not found\n"},
		{"usage", cmdutil.UsageErrorf("seqctl head", "missing --partition"), "seqctl: missing --partition\nRun 'seqctl head --help' for usage.\n"},
		{
			"config error",
			&config.Error{File: "d.toml", Problems: []config.Problem{{Path: "name", Line: 1, Message: "must be a string"}, {Message: "other"}}},
			"d.toml:1: name: must be a string\nd.toml: other\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			cmdutil.PrintError(&b, tt.err)
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("printError mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMainUsesTheGivenStreams(t *testing.T) {
	ios, _, out, errOut := cmdutil.NewTestIOStreams()
	if code := Main([]string{"version"}, ios); code != 0 {
		t.Fatalf("Main(version) = %d, want 0; stderr %q", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "seqctl ") {
		t.Errorf("stdout = %q, want the version line", out.String())
	}
}

// The tests of this package run the whole command line.
func init() { cmdtest.TestRoot = newCmdRoot }
