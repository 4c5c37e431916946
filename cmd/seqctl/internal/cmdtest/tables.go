// Package cmdtest is what the tests of the seqctl commands share: seqctl run in process
// over buffers (RunCLI, RunOps) under the root command a test package sets
// (SetCommands), a fake operator API (FakeAdmin) and its fixtures, the parse and run
// tables, the domain.toml fixtures under its testdata, golden files, and a live engine
// for the end-to-end tests.
package cmdtest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
)

// TestBuild is the build info every test factory carries.
var TestBuild = cmdutil.BuildInfo{Version: "v1.2.3", Commit: "abc1234", Date: "2025-01-31T10:00:00Z"}

// Result is what one seqctl invocation produced.
type Result struct {
	Stdout string
	Stderr string
	Code   int
}

// TestRoot builds the root command RunRoot runs: the test package sets it to one with
// its commands.
var TestRoot func(f *cmdutil.Factory) *cobra.Command

// SetCommands makes TestRoot a root command with the commands cmds builds: what the
// tests of a command's package run.
func SetCommands(cmds func(f *cmdutil.Factory) []*cobra.Command) {
	TestRoot = func(f *cmdutil.Factory) *cobra.Command { return cmdutil.NewRoot(f, cmds(f)...) }
}

// RunRoot runs the root command of TestRoot with args, the way Main does, and returns
// the exit code.
func RunRoot(ctx context.Context, f *cmdutil.Factory, args []string) int {
	return cmdutil.Execute(ctx, f, TestRoot(f), args)
}

// RunCLI runs seqctl in process with buffers for its streams; tty sets whether stdout is
// a terminal (colour stays off).
func RunCLI(t testing.TB, tty bool, args ...string) Result {
	t.Helper()
	ios, _, out, errOut := cmdutil.NewTestIOStreams()
	ios.IsTerminal = tty
	code := RunRoot(context.Background(), &cmdutil.Factory{IOStreams: ios, Build: TestBuild}, args)
	return Result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

// TTYMode describes the test's terminal: stdout and stdin.
type TTYMode struct{ Out, in bool }

var (
	OnTTY  = TTYMode{Out: true, in: true}
	InPipe = TTYMode{}
)

// RunOps runs seqctl in process against a fake admin.
func RunOps(t testing.TB, fa *FakeAdmin, tm TTYMode, stdin string, args ...string) Result {
	t.Helper()
	ios, in, out, errOut := cmdutil.NewTestIOStreams()
	ios.IsTerminal, ios.InIsTerminal = tm.Out, tm.in
	in.WriteString(stdin)
	f := &cmdutil.Factory{IOStreams: ios, Build: TestBuild, OpenAdmin: fa.Opener()}
	code := RunRoot(context.Background(), f, args)
	return Result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

// NewFactory returns a factory over buffers, with TestBuild.
func NewFactory() *cmdutil.Factory {
	ios, _, _, _ := cmdutil.NewTestIOStreams()
	return &cmdutil.Factory{IOStreams: ios, Build: TestBuild}
}

// ParseCmd runs argv through a root command holding only cmd, the way Main would, and
// returns the error (the command's runF captures the options).
func ParseCmd(t testing.TB, cmd *cobra.Command, argv ...string) error {
	t.Helper()
	root := cmdutil.NewRootCommand()
	root.AddCommand(cmd)
	return executeSilently(root, append([]string{cmd.Name()}, argv...))
}

// ParseOps runs argv through a root holding the global flags, parent (when not "") and
// cmd, the way Main would; the command's runF captures the options.
func ParseOps(t testing.TB, f *cmdutil.Factory, parent string, cmd *cobra.Command, argv ...string) error {
	t.Helper()
	root := cmdutil.NewRootCommand()
	cmdutil.AddGlobalFlags(root, f)
	path := []string{cmd.Name()}
	if parent != "" {
		p := &cobra.Command{Use: parent}
		p.AddCommand(cmd)
		root.AddCommand(p)
		path = []string{parent, cmd.Name()}
	} else {
		root.AddCommand(cmd)
	}
	return executeSilently(root, append(path, argv...))
}

// executeSilently runs root with args, its output thrown away.
func executeSilently(root *cobra.Command, args []string) error {
	root.SetArgs(args)
	var sink bytes.Buffer
	root.SetOut(&sink)
	root.SetErr(&sink)
	return root.Execute()
}

// ParseCase is a row of a parse table: a command line, and the options it gives or a
// fragment of the *UsageError that refuses it.
type ParseCase[O any] struct {
	Name    string
	Argv    []string
	Want    O
	WantErr string
}

// ParseTable runs the cases of a parse table: each argv through the command newCmd builds,
// under parent ("" for none) and the global flags, the way Main would. It compares the
// options the command's run function gets with want (opts say what to leave out), or the
// error with WantErr.
func ParseTable[O any](t *testing.T, parent string, newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, cases []ParseCase[O], opts ...cmp.Option) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			f := NewFactory()
			var got *O
			err := ParseOps(t, f, parent, newCmd(f, func(o *O) error { got = o; return nil }), tt.Argv...)
			CheckParsed(t, err, got, tt.Want, tt.WantErr, opts...)
		})
	}
}

// CheckParsed checks the outcome of a parse: a *UsageError containing WantErr when it
// is set, else the options got, compared with want.
func CheckParsed[O any](t *testing.T, err error, got *O, want O, wantErr string, opts ...cmp.Option) {
	t.Helper()
	if wantErr != "" {
		var ue *cmdutil.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error = %v, want a *UsageError containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("the command's run function was not called")
	}
	if diff := cmp.Diff(want, *got, opts...); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

// IgnoreOpsInputs leaves out of a comparison of an operator command's options what the
// factory and the command set: the streams, the admin opener and the context.
func IgnoreOpsInputs(typ any) cmp.Option { return cmpopts.IgnoreFields(typ, "IO", "Admin", "Ctx") }

// RunCase is a row of a run table: a command line run against a fake admin, on a
// terminal or in a pipe, and all it must do: its exit code and output, every change it
// asks of the admin (none unless the row names it) and the refusal it records itself.
type RunCase struct {
	Name  string
	Args  []string
	TTY   TTYMode
	Stdin string
	FA    *FakeAdmin // nil: the table's
	Code  int
	// Golden is the file that holds stdout exactly; StdoutHas and StderrHas are
	// fragments, StdoutLacks fragments stdout must not hold.
	Golden      string
	StdoutHas   []string
	StdoutLacks []string
	StderrHas   []string

	WantAct    *admin.Action        // the one head action (actor left out); nil: none
	Replayed   []string             // the DLQ entries replayed, in order
	Purges     []string             // the --through of each DLQ purge
	WantRemove []admin.GroupRemoval // the group removals, dry runs included (Actor left out)
	WantFilter admin.Filter         // what partitions list asked for
	Query      admin.AuditQuery     // what audit asked for
	WantRecord string               // the outcome of the one refusal the command records itself
}

// RunTable runs the cases of a run table, each against its fake admin or a new one from
// fa.
func RunTable(t *testing.T, fa func() *FakeAdmin, cases []RunCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			f := tt.FA
			if f == nil {
				f = fa()
			}
			r := RunOps(t, f, tt.TTY, tt.Stdin, tt.Args...)
			CheckResult(t, r, tt.Code, tt.Golden, tt.StdoutHas, tt.StderrHas)
			for _, s := range tt.StdoutLacks {
				if strings.Contains(r.Stdout, s) {
					t.Errorf("stdout holds %q:\n%s", s, r.Stdout)
				}
			}
			tt.checkAdmin(t, f)
		})
	}
}

// checkAdmin checks what the run asked of the admin, and that every change names the
// command and the user that asked for it.
func (tt RunCase) checkAdmin(t *testing.T, fa *FakeAdmin) {
	t.Helper()
	switch {
	case tt.WantAct == nil && len(fa.Actions) > 0:
		t.Errorf("an action ran: %+v", fa.Actions)
	case tt.WantAct != nil && len(fa.Actions) != 1:
		t.Errorf("%d actions ran, want 1", len(fa.Actions))
	case tt.WantAct != nil:
		if diff := cmp.Diff(*tt.WantAct, fa.Actions[0], cmpopts.IgnoreFields(admin.Action{}, "Actor")); diff != "" {
			t.Errorf("action (-want +got):\n%s", diff)
		}
		if a := fa.Actions[0].Actor; a.Command != "head "+string(tt.WantAct.Kind) || a.User == "" {
			t.Errorf("actor = %+v, want the command and the user", a)
		}
	}
	if diff := cmp.Diff(tt.Replayed, fa.Replayed); diff != "" {
		t.Errorf("replayed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.Purges, fa.purges); diff != "" {
		t.Errorf("purges (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.WantRemove, fa.removals, cmpopts.IgnoreFields(admin.GroupRemoval{}, "Actor")); diff != "" {
		t.Errorf("removals (-want +got):\n%s", diff)
	}
	for _, rm := range fa.removals {
		if rm.Actor.Command != "groups remove" || rm.Actor.User == "" {
			t.Errorf("actor = %+v, want the command and the user", rm.Actor)
		}
	}
	if diff := cmp.Diff(tt.WantFilter, fa.Filter); diff != "" {
		t.Errorf("filter (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.Query, fa.AuditQuery); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
	var outcomes, want []string
	for _, rec := range fa.Records {
		outcomes = append(outcomes, rec.Outcome)
	}
	if tt.WantRecord != "" {
		want = []string{tt.WantRecord}
	}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("audit records the command wrote itself (-want +got):\n%s", diff)
	}
}

// CheckResult compares a run's exit code and checks stdout and stderr: against a golden
// file when golden is set, else for fragments.
func CheckResult(t *testing.T, r Result, code int, goldenPath string, stdoutHas, stderrHas []string) {
	t.Helper()
	if r.Code != code {
		t.Errorf("exit code = %d, want %d\nstdout:\n%s\nstderr:\n%s", r.Code, code, r.Stdout, r.Stderr)
	}
	if goldenPath != "" {
		Golden(t, goldenPath, r.Stdout)
	}
	for _, s := range stdoutHas {
		if !strings.Contains(r.Stdout, s) {
			t.Errorf("stdout lacks %q:\n%s", s, r.Stdout)
		}
	}
	for _, s := range stderrHas {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.Stderr)
		}
	}
}

// checkUsageError checks that err is a usage error (exit status 2) that mentions each
// fragment.
func checkUsageError(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil || cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Fatalf("err = %v (exit %d), want a usage error", err, cmdutil.ExitCode(err))
	}
	for _, w := range fragments {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}
