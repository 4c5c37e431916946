package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/pkg/admin"
)

// testBuild is the build info every test factory carries.
var testBuild = cmdutil.BuildInfo{Version: "v1.2.3", Commit: "abc1234", Date: "2025-01-31T10:00:00Z"}

// result is what one seqctl invocation produced.
type result struct {
	Stdout string
	Stderr string
	Code   int
}

// runCLI runs seqctl in process with buffers for its streams; tty sets whether stdout is
// a terminal (colour stays off).
func runCLI(t testing.TB, tty bool, args ...string) result {
	t.Helper()
	ios, _, out, errOut := cmdutil.NewTestIOStreams()
	ios.IsTerminal = tty
	code := run(context.Background(), &cmdutil.Factory{IOStreams: ios, Build: testBuild}, args)
	return result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

// ttyMode describes the test's terminal: stdout and stdin.
type ttyMode struct{ out, in bool }

var (
	onTTY  = ttyMode{out: true, in: true}
	inPipe = ttyMode{}
)

// runOps runs seqctl in process against a fake admin.
func runOps(t testing.TB, fa *fakeAdmin, tm ttyMode, stdin string, args ...string) result {
	t.Helper()
	ios, in, out, errOut := cmdutil.NewTestIOStreams()
	ios.IsTerminal, ios.InIsTerminal = tm.out, tm.in
	in.WriteString(stdin)
	f := &cmdutil.Factory{IOStreams: ios, Build: testBuild, OpenAdmin: fa.opener()}
	code := run(context.Background(), f, args)
	return result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

func testFactory() *cmdutil.Factory {
	ios, _, _, _ := cmdutil.NewTestIOStreams()
	return &cmdutil.Factory{IOStreams: ios, Build: testBuild}
}

// parseCmd runs argv through a root command holding only cmd, the way Main would, and
// returns the error (the command's runF captures the options).
func parseCmd(t testing.TB, cmd *cobra.Command, argv ...string) error {
	t.Helper()
	root := cmdutil.NewRootCommand()
	root.AddCommand(cmd)
	return executeSilently(root, append([]string{cmd.Name()}, argv...))
}

// parseOps runs argv through a root holding the global flags, parent (when not "") and
// cmd, the way Main would; the command's runF captures the options.
func parseOps(t testing.TB, f *cmdutil.Factory, parent string, cmd *cobra.Command, argv ...string) error {
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

// parseCase is a row of a parse table: a command line, and the options it gives or a
// fragment of the *UsageError that refuses it.
type parseCase[O any] struct {
	name    string
	argv    []string
	want    O
	wantErr string
}

// testParse runs the cases of a parse table: each argv through the command newCmd builds,
// under parent ("" for none) and the global flags, the way Main would. It compares the
// options the command's run function gets with want (opts say what to leave out), or the
// error with wantErr.
func testParse[O any](t *testing.T, parent string, newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, cases []parseCase[O], opts ...cmp.Option) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			f := testFactory()
			var got *O
			err := parseOps(t, f, parent, newCmd(f, func(o *O) error { got = o; return nil }), tt.argv...)
			checkParsed(t, err, got, tt.want, tt.wantErr, opts...)
		})
	}
}

// checkParsed checks the outcome of a parse: a *UsageError containing wantErr when it
// is set, else the options got, compared with want.
func checkParsed[O any](t *testing.T, err error, got *O, want O, wantErr string, opts ...cmp.Option) {
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

// ignoreOpsInputs leaves out of a comparison of an operator command's options what the
// factory and the command set: the streams, the admin opener and the context.
func ignoreOpsInputs(typ any) cmp.Option { return cmpopts.IgnoreFields(typ, "IO", "Admin", "Ctx") }

// runCase is a row of a run table: a command line run against a fake admin, on a
// terminal or in a pipe, and all it must do: its exit code and output, every change it
// asks of the admin (none unless the row names it) and the refusal it records itself.
type runCase struct {
	name  string
	args  []string
	tm    ttyMode
	stdin string
	fa    *fakeAdmin // nil: the table's
	code  int
	// golden is the file that holds stdout exactly; stdoutHas and stderrHas are
	// fragments.
	golden    string
	stdoutHas []string
	stderrHas []string

	wantAct    *admin.Action        // the one head action (actor left out); nil: none
	replayed   []string             // the DLQ entries replayed, in order
	purges     []string             // the --through of each DLQ purge
	wantRemove []admin.GroupRemoval // the group removals, dry runs included (Actor left out)
	wantFilter admin.Filter         // what partitions list asked for
	query      admin.AuditQuery     // what audit asked for
	wantRecord string               // the outcome of the one refusal the command records itself
}

// testRun runs the cases of a run table, each against its fake admin or a new one from
// fa.
func testRun(t *testing.T, fa func() *fakeAdmin, cases []runCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fa
			if f == nil {
				f = fa()
			}
			r := runOps(t, f, tt.tm, tt.stdin, tt.args...)
			checkResult(t, r, tt.code, tt.golden, tt.stdoutHas, tt.stderrHas)
			tt.checkAdmin(t, f)
		})
	}
}

// checkAdmin checks what the run asked of the admin, and that every change names the
// command and the user that asked for it.
func (tt runCase) checkAdmin(t *testing.T, fa *fakeAdmin) {
	t.Helper()
	switch {
	case tt.wantAct == nil && len(fa.actions) > 0:
		t.Errorf("an action ran: %+v", fa.actions)
	case tt.wantAct != nil && len(fa.actions) != 1:
		t.Errorf("%d actions ran, want 1", len(fa.actions))
	case tt.wantAct != nil:
		if diff := cmp.Diff(*tt.wantAct, fa.actions[0], cmpopts.IgnoreFields(admin.Action{}, "Actor")); diff != "" {
			t.Errorf("action (-want +got):\n%s", diff)
		}
		if a := fa.actions[0].Actor; a.Command != "head "+string(tt.wantAct.Kind) || a.User == "" {
			t.Errorf("actor = %+v, want the command and the user", a)
		}
	}
	if diff := cmp.Diff(tt.replayed, fa.replayed); diff != "" {
		t.Errorf("replayed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.purges, fa.purges); diff != "" {
		t.Errorf("purges (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.wantRemove, fa.removals, cmpopts.IgnoreFields(admin.GroupRemoval{}, "Actor")); diff != "" {
		t.Errorf("removals (-want +got):\n%s", diff)
	}
	for _, rm := range fa.removals {
		if rm.Actor.Command != "groups remove" || rm.Actor.User == "" {
			t.Errorf("actor = %+v, want the command and the user", rm.Actor)
		}
	}
	if diff := cmp.Diff(tt.wantFilter, fa.filter); diff != "" {
		t.Errorf("filter (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.query, fa.auditQuery); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
	var outcomes, want []string
	for _, rec := range fa.records {
		outcomes = append(outcomes, rec.Outcome)
	}
	if tt.wantRecord != "" {
		want = []string{tt.wantRecord}
	}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("audit records the command wrote itself (-want +got):\n%s", diff)
	}
}

// checkResult compares a run's exit code and checks stdout and stderr: against a golden
// file when golden is set, else for fragments.
func checkResult(t *testing.T, r result, code int, goldenPath string, stdoutHas, stderrHas []string) {
	t.Helper()
	if r.Code != code {
		t.Errorf("exit code = %d, want %d\nstdout:\n%s\nstderr:\n%s", r.Code, code, r.Stdout, r.Stderr)
	}
	if goldenPath != "" {
		golden(t, goldenPath, r.Stdout)
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
