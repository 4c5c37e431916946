package limits

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestLimitsSetParse(t *testing.T) {
	set := func(more ...string) []string { return append([]string{"acme", "--reason", "r"}, more...) }
	cmdtest.ParseTable(t, "limits", newCmdLimitsSet, []cmdtest.ParseCase[LimitsSetOptions]{
		{Name: "concurrency", Argv: set("--concurrency", "8"),
			Want: LimitsSetOptions{Action: admin.ActionLimitSet, LimitRequest: admin.LimitRequest{Value: "acme", Concurrency: 8, Reason: "r"}}},
		{Name: "rate per minute, a handler, --yes", Argv: set("--rate", "600/m", "--handler", "H", "--yes"),
			Want: LimitsSetOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Action: admin.ActionLimitSet, LimitRequest: admin.LimitRequest{Handler: "H", Value: "acme", Rate: 600, Per: time.Minute, Reason: "r"}}},
		{Name: "both caps, dry run as json", Argv: set("--concurrency", "3", "--rate", "20/s", "--dry-run", "-o", "json"),
			Want: LimitsSetOptions{GuardedOptions: cmdutil.GuardedOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, DryRun: true}, Action: admin.ActionLimitSet, LimitRequest: admin.LimitRequest{Value: "acme", Concurrency: 3, Rate: 20, Per: time.Second, Reason: "r"}}},
		{Name: "off", Argv: set("--off"), Want: LimitsSetOptions{Action: admin.ActionLimitSet, LimitRequest: admin.LimitRequest{Value: "acme", Off: true, Reason: "r"}}},
		{Name: "no value", Argv: []string{"--concurrency", "8", "--reason", "r"}, WantErr: "missing the VALUE argument"},
		{Name: "two values", Argv: set("globex", "--concurrency", "8"), WantErr: `unexpected argument "globex"`},
		{Name: "no cap", Argv: set(), WantErr: "say what the override sets: --concurrency N (runs at once), --rate N/s or N/m (starts), or --off"},
		{Name: "off and a cap", Argv: set("--off", "--rate", "5/s"), WantErr: "--off takes every cap off the value: it excludes --concurrency and --rate"},
		{Name: "zero concurrency", Argv: set("--concurrency", "0"), WantErr: "invalid value 0 for --concurrency: want a positive number"},
		{Name: "a rate without a unit", Argv: set("--rate", "20"), WantErr: `invalid value for --rate: rate "20": write it as N/s, N/m or N/h`},
		{Name: "a rate in days", Argv: set("--rate", "20/d"), WantErr: `the window "d" is not s, m, h or a duration`},
		{Name: "a rate of nothing", Argv: set("--rate", "0/s"), WantErr: `"0" is not a positive whole number`},
		{Name: "no reason", Argv: []string{"acme", "--concurrency", "8"}, WantErr: "--reason is required"},
		{Name: "bad output", Argv: set("--off", "-o", "csv"), WantErr: `invalid value "csv" for --output`},
	}, cmdtest.IgnoreOpsInputs(LimitsSetOptions{}))
}

func TestLimitsOtherParse(t *testing.T) {
	cmdtest.ParseTable(t, "limits", newCmdLimitsClear, []cmdtest.ParseCase[LimitsSetOptions]{
		{Name: "minimal", Argv: []string{"acme"}, Want: LimitsSetOptions{Action: admin.ActionLimitClear, LimitRequest: admin.LimitRequest{Value: "acme"}}},
		{Name: "everything", Argv: []string{"acme", "--handler", "H", "--reason", "done", "-y", "--dry-run"},
			Want: LimitsSetOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true, DryRun: true}, Action: admin.ActionLimitClear, LimitRequest: admin.LimitRequest{Handler: "H", Value: "acme", Reason: "done"}}},
		{Name: "no value", WantErr: "missing the VALUE argument"},
		{Name: "no caps to clear", Argv: []string{"acme", "--off"}, WantErr: "unknown flag: --off"},
	}, cmdtest.IgnoreOpsInputs(LimitsSetOptions{}))
	cmdtest.ParseTable(t, "limits", newCmdLimitsGet, []cmdtest.ParseCase[LimitsGetOptions]{
		{Name: "value", Argv: []string{"acme", "-o", "yaml"}, Want: LimitsGetOptions{OpsOptions: cmdutil.OpsOptions{Output: "yaml"}, Value: "acme"}},
		{Name: "no value", WantErr: "missing the VALUE argument"},
	}, cmdtest.IgnoreOpsInputs(LimitsGetOptions{}))
	cmdtest.ParseTable(t, "limits", newCmdLimitsList, []cmdtest.ParseCase[LimitsListOptions]{
		{Name: "everything", Want: LimitsListOptions{}},
		{Name: "waiting of one handler", Argv: []string{"--waiting", "--handler", "H"}, Want: LimitsListOptions{Handler: "H", Waiting: true}},
		{Name: "no arguments", Argv: []string{"acme"}, WantErr: `unexpected argument "acme"`},
	}, cmdtest.IgnoreOpsInputs(LimitsListOptions{}))
}

func TestLimitsListAndGet(t *testing.T) {
	cmdtest.RunTable(t, cmdtest.LimitsAdmin, []cmdtest.RunCase{
		{Name: "terminal", Args: []string{"limits", "list", "--waiting"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/limits-list.tty.golden"},
		{Name: "wide", Args: []string{"limits", "list", "--waiting", "-o", "wide"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/limits-list.wide.golden"},
		{Name: "pipe: overrides only", Args: []string{"limits", "list"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/limits-list.pipe.golden"},
		{Name: "json", Args: []string{"limits", "list", "--waiting", "-o", "json"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/limits-list.json.golden"},
		{Name: "nothing", Args: []string{"limits", "list"}, TTY: cmdtest.OnTTY, FA: &cmdtest.FakeAdmin{}, StderrHas: []string{"No limit overrides."}},
		{Name: "nothing as json is an array", Args: []string{"limits", "list", "-o", "json"}, TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{}, StdoutHas: []string{"[]"}},
		{Name: "get: the labelled view", Args: []string{"limits", "get", "acme"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/limits-get.pipe.golden"},
		{Name: "get: json", Args: []string{"limits", "get", "acme", "--handler", "OrderProjector", "-o", "json"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/limits-get.json.golden"},
		{Name: "get: a value at the domain's caps, as a table", Args: []string{"limits", "get", "umbrella", "-o", "table"}, TTY: cmdtest.InPipe,
			StdoutHas: []string{"OrderProjector  umbrella  2            20/s  0     -       0        -\n"}},
	})
}

// Without --config nothing says which handlers have a limit key: the domain's caps show
// as "?" and --handler is required.
func TestLimitsWithoutConfig(t *testing.T) {
	fa := cmdtest.LimitsAdmin()
	fa.LimitsByHandler = nil
	fa.LimitList[0].Default, fa.LimitList[0].Effective = nil, nil
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "limits", "list", "-o", "table")
	cmdtest.CheckResult(t, r, 0, "", []string{"OrderProjector  acme      8            ?     8     14      3        concurrency 8\n"}, nil)
	r = cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "limits", "get", "acme")
	cmdtest.CheckResult(t, r, cmdutil.ExitUsage, "", nil, []string{"--handler is required without --config", "limits get --help"})
	r = cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "limits", "get", "acme", "--handler", "OrderProjector")
	cmdtest.CheckResult(t, r, 0, "", []string{"  caps        concurrency 8, rate ?\n", "  domain      unknown without --config\n"}, nil)
}

// Errors name what to do and exit with their status: a handler without limit_by and a
// value that could not be one are usage errors (2), an unknown handler is not found (3),
// and --handler is needed when the config has several handlers with limit_by or none.
func TestLimitsErrors(t *testing.T) {
	noLimit := &admin.NoLimitError{Handler: "Mailer", Limited: []string{"OrderProjector"}}
	unknown := &admin.NotFoundError{What: "handler", Name: "Nope", Hint: "the handlers with a limit key are OrderProjector"}
	badValue := fmt.Errorf("invalid limit value: %w", &engine.InvalidKeyError{Key: "a:b", Rule: engine.KeyHasColon})
	for _, tt := range []struct {
		name      string
		args      []string
		fa        func(*cmdtest.FakeAdmin)
		code      int
		stderrHas string
	}{
		{"a handler without limit_by", []string{"limits", "get", "acme", "--handler", "Mailer"},
			func(f *cmdtest.FakeAdmin) { f.LimitErrs = map[string]error{"acme": noLimit} }, cmdutil.ExitUsage,
			"seqctl: handler Mailer has no limit_by: an override caps nothing until its [[handlers]] entry in domain.toml sets limit_by"},
		{"an unknown handler", []string{"limits", "set", "acme", "--handler", "Nope", "--concurrency", "3", "--reason", "r", "--yes"},
			func(f *cmdtest.FakeAdmin) { f.LimitErrs = map[string]error{"acme": unknown} }, cmdutil.ExitNotFound, "handler Nope not found"},
		{"a bad value", []string{"limits", "clear", "a:b", "--yes"},
			func(f *cmdtest.FakeAdmin) { f.LimitErrs = map[string]error{"a:b": badValue} }, cmdutil.ExitUsage, "invalid limit value: engine: invalid partition key"},
		{"several handlers with limit_by", []string{"limits", "get", "acme"},
			func(f *cmdtest.FakeAdmin) { f.LimitsByHandler["Mailer"] = cmdtest.SampleLimit }, cmdutil.ExitUsage,
			"the config declares 2 handlers with limit_by (Mailer, OrderProjector): pass --handler"},
		{"none", []string{"limits", "list", "--waiting"}, nil, 0, ""},
		{"no handler with limit_by", []string{"limits", "set", "acme", "--off", "--reason", "r", "--yes"},
			func(f *cmdtest.FakeAdmin) { f.LimitsByHandler = map[string]engine.HandlerLimit{} }, cmdutil.ExitUsage,
			"the config declares no handler with limit_by, so there is no limit key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fa := cmdtest.LimitsAdmin()
			if tt.fa != nil {
				tt.fa(fa)
			}
			r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", tt.args...)
			var has []string
			if tt.stderrHas != "" {
				has = []string{tt.stderrHas}
			}
			cmdtest.CheckResult(t, r, tt.code, "", nil, has)
			if len(fa.LimitCalls) != 0 {
				t.Errorf("the admin was asked to change a limit: %+v", fa.LimitCalls)
			}
		})
	}
}

// limitCase is one run of 'limits set|clear' against cmdtest.LimitsAdmin.
type limitCase struct {
	name      string
	args      []string
	tm        cmdtest.TTYMode
	stdin     string
	code      int
	stdoutHas []string
	stderrHas []string
	// calls are the SetLimit and ClearLimit calls, as "set HANDLER VALUE"; records the
	// refusals the command recorded itself, as "OUTCOME HANDLER VALUE DETAIL".
	calls, records []string
}

func runLimitCases(t *testing.T, cases []limitCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			fa := cmdtest.LimitsAdmin()
			r := cmdtest.RunOps(t, fa, tt.tm, tt.stdin, tt.args...)
			cmdtest.CheckResult(t, r, tt.code, "", tt.stdoutHas, tt.stderrHas)
			if diff := cmp.Diff(tt.calls, fa.LimitActions); diff != "" {
				t.Errorf("limit calls (-want +got):\n%s", diff)
			}
			var records []string
			for _, e := range fa.Records {
				records = append(records, strings.Join([]string{e.Outcome, e.Handler, e.Value, e.Detail}, " "))
				if e.Command != "limits "+tt.args[1] || e.User == "" {
					t.Errorf("record %+v does not name the command and the user", e)
				}
			}
			if diff := cmp.Diff(tt.records, records); diff != "" {
				t.Errorf("audit records written by the command (-want +got):\n%s", diff)
			}
		})
	}
}

// A set asks for confirmation on a terminal after showing the caps now and after, needs
// --yes without one (the refusal is recorded), and --dry-run changes and records nothing.
func TestLimitsSet(t *testing.T) {
	runLimitCases(t, []limitCase{
		{name: "--yes", args: []string{"limits", "set", "globex", "--rate", "5/s", "--reason", "floods billing", "--yes"},
			stdoutHas: []string{"✓ Set the override of globex for OrderProjector: concurrency 2, rate 5/s now (was concurrency 2, rate 20/s); every running instance applies it at once. " +
				"Clear it with 'seqctl limits clear globex --handler OrderProjector'."},
			calls: []string{"set OrderProjector globex"}},
		{name: "no terminal, no --yes", args: []string{"limits", "set", "acme", "--off", "--reason", "r"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"refusing to set the override of acme for OrderProjector without confirmation: stdin is not a terminal, pass --yes"},
			records:   []string{"refused OrderProjector acme no terminal and no --yes"}},
		{name: "terminal, yes", args: []string{"limits", "set", "acme", "--concurrency", "4", "--reason", "r"}, tm: cmdtest.OnTTY, stdin: "y\n",
			stderrHas: []string{
				"acme of OrderProjector: override concurrency 8 -> concurrency 4\n",
				"  now    concurrency 8, rate 20/s; 8 permits held, 3 partitions waiting\n",
				"  after  concurrency 4, rate 20/s\n",
				"Every running instance applies it at once.\n",
				"Set the override of acme for OrderProjector? [y/N]"},
			calls: []string{"set OrderProjector acme"}},
		{name: "terminal, no", args: []string{"limits", "set", "acme", "--concurrency", "4", "--reason", "r"}, tm: cmdtest.OnTTY, stdin: "n\n", code: cmdutil.ExitFailure,
			stderrHas: []string{cmdutil.CancelledText}, records: []string{"declined OrderProjector acme " + cmdutil.CancelledText}},
		{name: "dry run", args: []string{"limits", "set", "umbrella", "--concurrency", "1", "--rate", "30/m", "--reason", "trial tenant", "--dry-run"},
			stdoutHas: []string{
				`Would set the override of umbrella for OrderProjector to concurrency 1, rate 30/m, reason "trial tenant":` + "\n",
				"  now    concurrency 2, rate 20/s; 0 permits held, 0 partitions waiting\n",
				"  after  concurrency 1, rate 30/m\n",
				"Nothing changed (--dry-run).\n"}},
	})
	fa := cmdtest.LimitsAdmin()
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "limits", "set", "acme", "--rate", "50/s", "--reason", "import", "--yes")
	cmdtest.CheckResult(t, r, 0, "", nil, nil)
	want := []admin.LimitRequest{{Handler: "OrderProjector", Value: "acme", Rate: 50, Per: time.Second, Reason: "import"}}
	if diff := cmp.Diff(want, fa.LimitCalls, cmpopts.IgnoreFields(admin.LimitRequest{}, "Actor")); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if a := fa.LimitCalls[0].Actor; a.Command != "limits set" || a.User == "" {
		t.Errorf("actor = %+v", a)
	}
}

// The JSON of a set is the admin's result; the dry run's is the result it would have.
func TestLimitsSetJSON(t *testing.T) {
	r := cmdtest.RunOps(t, cmdtest.LimitsAdmin(), cmdtest.InPipe, "", "limits", "set", "acme", "--rate", "50/s", "--reason", "import", "--yes", "-o", "json")
	cmdtest.CheckResult(t, r, 0, "testdata/ops/limits-set.json.golden", nil, nil)
	r = cmdtest.RunOps(t, cmdtest.LimitsAdmin(), cmdtest.InPipe, "", "limits", "clear", "acme", "--dry-run", "-o", "json")
	cmdtest.CheckResult(t, r, 0, "", nil, nil)
	var got map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, r.Stdout)
	}
	if got["dry_run"] != true || got["outcome"] != "dry_run" || got["new"] != nil || got["action"] != "clear" ||
		!cmp.Equal(got["after"], map[string]any{"concurrency": 2.0, "rate": "20/s"}) {
		t.Errorf("clear --dry-run -o json = %s", r.Stdout)
	}
}

// A clear of a value without an override changes nothing and exits 3, recorded; a clear
// of one with says what applies again.
func TestLimitsClear(t *testing.T) {
	runLimitCases(t, []limitCase{
		{name: "an override", args: []string{"limits", "clear", "acme", "--reason", "import done", "--yes"},
			stdoutHas: []string{"✓ Cleared the override of acme for OrderProjector: the domain's caps apply again (concurrency 2, rate 20/s), at once in every running instance."},
			calls:     []string{"clear OrderProjector acme"}},
		{name: "no override", args: []string{"limits", "clear", "globex", "--yes"}, code: cmdutil.ExitNotFound,
			stderrHas: []string{"seqctl: engine: no override of the limit for this value: globex of OrderProjector has none to clear ('seqctl limits list' shows the overrides); nothing changed"},
			records: []string{"not_found OrderProjector globex engine: no override of the limit for this value: globex of OrderProjector has none to clear " +
				"('seqctl limits list' shows the overrides); nothing changed"}},
		{name: "dry run", args: []string{"limits", "clear", "internal", "--dry-run"},
			stdoutHas: []string{"Would clear the override of internal for OrderProjector (off):\n", "  now    no cap; 0 permits held", "  after  concurrency 2, rate 20/s\n"}},
	})
}

// 'seqctl audit' names the value a limits command acted on in the STREAM column.
func TestAuditShowsLimitValue(t *testing.T) {
	fa := &cmdtest.FakeAdmin{Audit: []admin.AuditEntry{{ID: "1738317900000-0", Time: cmdtest.T1, User: "alice", RedisUser: "ops", Host: "ops-1",
		Command: "limits set", Handler: "OrderProjector", Value: "acme", Outcome: admin.OutcomeOK,
		Detail: "override none -> concurrency 8", Reason: "acme import"}}}
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "audit", "-o", "wide", "--no-headers")
	cmdtest.CheckResult(t, r, 0, "", []string{"limits set  value acme  OrderProjector  -  acme import  override none -> concurrency 8  ok\n"}, nil)
}
