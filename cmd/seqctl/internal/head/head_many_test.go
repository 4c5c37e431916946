package head

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// retryAdmin is a fake admin with n halted partitions of order (order:h-01...), each
// halted on its own head, a running one (order:r-1), and payment:p-9 unowned; every
// category has one handler.
func retryAdmin(n int) *cmdtest.FakeAdmin {
	fa := &cmdtest.FakeAdmin{HandlerNames: []string{"OrderProjector"}, Heads: map[string]*admin.Head{}}
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("h-%02d", i)
		stream, id := "order:"+key, fmt.Sprintf("17383176%05d-0", i)
		halt := &engine.HaltRecord{EntryID: id, Stream: stream, Attempts: 3, Error: "downstream unavailable\nat line 3", Since: cmdtest.T0}
		fa.Partitions = append(fa.Partitions, admin.Partition{Category: "order", Key: key, Stream: stream, Handler: "OrderProjector",
			State: admin.StateHalted, HaltedEntryID: id, HeadID: id, Halt: halt})
		fa.Heads[stream] = &admin.Head{Stream: stream, Handler: "OrderProjector", ID: id, Status: admin.HeadHalted, Attempts: 3}
	}
	fa.Partitions = append(fa.Partitions,
		admin.Partition{Category: "order", Key: "r-1", Stream: "order:r-1", Handler: "OrderProjector", State: admin.StateRunning},
		admin.Partition{Category: "payment", Key: "p-9", Stream: "payment:p-9", Handler: "OrderProjector", State: admin.StateUnowned})
	return fa
}

// retryCase is one run of 'head retry' with a selector against a retryAdmin(4).
type retryCase struct {
	name      string
	args      []string
	tm        cmdtest.TTYMode
	stdin     string
	fa        func(*cmdtest.FakeAdmin) // changes the fake before the run
	code      int
	stdoutHas []string
	stderrHas []string
	// acts are the streams Act was called for, in order; records the audit records the
	// command wrote itself, as "OUTCOME STREAM DETAIL".
	acts    []string
	records []string
}

func runRetryCases(t *testing.T, cases []retryCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			fa := retryAdmin(4)
			if tt.fa != nil {
				tt.fa(fa)
			}
			r := cmdtest.RunOps(t, fa, tt.tm, tt.stdin, tt.args...)
			cmdtest.CheckResult(t, r, tt.code, "", tt.stdoutHas, tt.stderrHas)
			checkRetries(t, fa, tt.acts, tt.records)
		})
	}
}

// checkRetries checks the Act calls (each a retry of the head read, by the command and
// the user) and the audit records the command wrote itself.
func checkRetries(t *testing.T, fa *cmdtest.FakeAdmin, acts, records []string) {
	t.Helper()
	var got []string
	for _, a := range fa.Actions {
		got = append(got, a.Stream)
		if h := fa.Heads[a.Stream]; a.Kind != admin.ActionRetry || h == nil || a.ExpectID != h.ID || a.Handler != "OrderProjector" ||
			a.Actor.Command != "head retry" || a.Actor.User == "" {
			t.Errorf("action = %+v, want a retry of the head read, by the command and the user", a)
		}
	}
	if diff := cmp.Diff(acts, got); diff != "" {
		t.Errorf("retried streams (-want +got):\n%s", diff)
	}
	var recs []string
	for _, e := range fa.Records {
		recs = append(recs, e.Outcome+" "+e.Stream+" "+e.Detail)
		if e.Command != "head retry" || e.User == "" {
			t.Errorf("record %+v does not name the command and the user", e)
		}
	}
	if diff := cmp.Diff(records, recs); diff != "" {
		t.Errorf("audit records written by the command (-want +got):\n%s", diff)
	}
}

// Mistakes on the command line are usage errors (exit 2) that change nothing and say
// why: STREAM with a selector, --rate or --expect-id on the wrong form, a bad --rate.
func TestHeadRetryManyFlags(t *testing.T) {
	cases := []retryCase{
		{name: "STREAM and --category", args: []string{"head", "retry", "order:h-01", "--category", "order", "--yes"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"STREAM and --key/--category exclude each other", "Run 'seqctl head retry --help'"}},
		{name: "STREAM and --key", args: []string{"head", "retry", "order:h-01", "--key", "h-*", "--yes"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"exclude each other"}},
		{name: "--rate without a selector", args: []string{"head", "retry", "order:h-01", "--rate", "5/s", "--yes"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"--rate paces a retry of many partitions (--category/--key): one STREAM is retried at once"}},
		{name: "--expect-id with a selector", args: []string{"head", "retry", "--category", "order", "--expect-id", "1-0", "--yes"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"--expect-id names the head of one STREAM"}},
		{name: "neither STREAM nor selector", args: []string{"head", "retry", "--yes"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"missing the STREAM argument, e.g. seqctl head retry order:client-123, or select halted partitions with --category C"}},
		{name: "two streams", args: []string{"head", "retry", "order:h-01", "order:h-02", "--yes"}, code: cmdutil.ExitUsage,
			stderrHas: []string{`unexpected argument "order:h-02"`}},
		{name: "a bad glob", args: []string{"head", "retry", "--key", "h-[1", "--yes"}, code: cmdutil.ExitUsage, stderrHas: []string{"invalid value for --key"}},
		{name: "several handlers", args: []string{"head", "retry", "--category", "order", "--yes"}, code: cmdutil.ExitUsage,
			fa:        func(f *cmdtest.FakeAdmin) { f.HandlerNames = []string{"OrderProjector", "Mailer"} },
			stderrHas: []string{"order has 2 handlers (OrderProjector, Mailer): pass --handler"}},
		{name: "nothing halted", args: []string{"head", "retry", "--category", "payment", "--yes"}, code: cmdutil.ExitNotFound,
			stderrHas: []string{"no halted partition matches --category payment: nothing to retry"}},
	}
	for _, bad := range []string{"0", "-1/s", "fast", "10/h", "2.5/s"} {
		cases = append(cases, retryCase{name: "--rate " + bad, args: []string{"head", "retry", "--category", "order", "--rate", bad, "--yes"},
			code: cmdutil.ExitUsage, stderrHas: []string{fmt.Sprintf("invalid value %q for --rate", bad), "N/s, N/m or N (per second)"}})
	}
	runRetryCases(t, cases)

	cmdtest.ParseTable(t, "head", func(f *cmdutil.Factory, runF func(*HeadActionOptions) error) *cobra.Command {
		return newCmdHeadAction(f, admin.ActionRetry, runF)
	}, []cmdtest.ParseCase[HeadActionOptions]{
		{Name: "selector and rate", Argv: []string{"--category", "order", "--key", "acme-*", "--rate", "10/s", "--reason", "OPS-7", "--yes"},
			Want: HeadActionOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Kind: admin.ActionRetry, Category: "order", Key: "acme-*",
				Rate: cmdutil.Rate{N: 10, Per: time.Second}, Reason: "OPS-7"}},
		{Name: "per minute", Argv: []string{"--key", "x*", "--rate", "30/m"},
			Want: HeadActionOptions{Kind: admin.ActionRetry, Key: "x*", Rate: cmdutil.Rate{N: 30, Per: time.Minute}}},
		{Name: "one stream", Argv: []string{"order:c", "--expect-id", "1-0"},
			Want: HeadActionOptions{Kind: admin.ActionRetry, Stream: "order:c", ExpectID: "1-0"}},
	}, cmdtest.IgnoreOpsInputs(HeadActionOptions{}))
}

// --dry-run lists every halted partition with its halt and the pace, and changes and
// records nothing; -o json prints one object per partition.
func TestHeadRetryManyDryRun(t *testing.T) {
	runRetryCases(t, []retryCase{
		{name: "text", args: []string{"head", "retry", "--category", "order", "--rate", "2/s", "--dry-run"},
			stdoutHas: []string{
				"Would retry the halted head of 4 partitions, one at a time, at most 2/s (about 2s):\n",
				"  retry    order:h-01 for OrderProjector (halted on 1738317600001-0 since 2025-01-31T10:00:00Z after 3 attempts: downstream unavailable …)\n",
				"  retry    order:h-04 for OrderProjector (halted on 1738317600004-0",
				"Nothing changed (--dry-run).",
			}},
	})
	fa := retryAdmin(2)
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "head", "retry", "--key", "h-*", "--dry-run", "-o", "json")
	cmdtest.CheckResult(t, r, 0, "", nil, nil)
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, r.Stdout)
	}
	want := []map[string]any{
		{"action": "retry", "stream": "order:h-01", "handler": "OrderProjector", "entry_id": "1738317600001-0", "outcome": "dry_run", "dry_run": true},
		{"action": "retry", "stream": "order:h-02", "handler": "OrderProjector", "entry_id": "1738317600002-0", "outcome": "dry_run", "dry_run": true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dry run -o json (-want +got):\n%s", diff)
	}
	checkRetries(t, fa, nil, nil)
}

// Without a terminal and --yes nothing changes, exit 2, and the refusal is recorded; on
// a terminal at most 20 partitions are listed before the question, and a no is recorded.
func TestHeadRetryManyConfirmation(t *testing.T) {
	runRetryCases(t, []retryCase{
		{name: "no terminal, no --yes", args: []string{"head", "retry", "--category", "order"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"refusing to retry 4 partitions without confirmation: stdin is not a terminal, pass --yes"},
			records:   []string{"refused  4 partitions (order:h-01, order:h-02, order:h-03, order:h-04); no terminal and no --yes"}},
		{name: "terminal, no", args: []string{"head", "retry", "--category", "order", "--rate", "10/s"}, tm: cmdtest.OnTTY, stdin: "n\n", code: cmdutil.ExitFailure,
			stderrHas: []string{"  order:h-01 for OrderProjector (halted on 1738317600001-0", "one partition at a time, at most 10/s; a partition no longer halted by then is skipped",
				"Retry 4 partitions? [y/N]", cmdutil.CancelledText},
			records: []string{"declined  4 partitions (order:h-01, order:h-02, order:h-03, order:h-04); " + cmdutil.CancelledText}},
	})
	fa := retryAdmin(25)
	r := cmdtest.RunOps(t, fa, cmdtest.OnTTY, "y\n", "head", "retry", "--category", "order")
	cmdtest.CheckResult(t, r, 0, "", []string{"✓ Retried 25 partitions: each owner tries its head once more now."},
		[]string{"  order:h-20 for OrderProjector", "  … and 5 more (--dry-run lists them all)\n", "Retry 25 partitions? [y/N]"})
	if strings.Contains(r.Stderr, "order:h-21") {
		t.Errorf("the confirmation listed more than 20 partitions:\n%s", r.Stderr)
	}
	if len(fa.Actions) != 25 {
		t.Errorf("%d retries after a yes, want 25", len(fa.Actions))
	}
}

// A partition whose head is no longer halted when its turn comes (in flight, caught up,
// or resolved between the read and the retry) is reported as skipped and recorded, and
// the others are retried: exit 0. A partition refused does not stop the others either;
// the command exits with its status. Redis going away stops it, in doubt.
func TestHeadRetryManyGoesOn(t *testing.T) {
	notHalted := fmt.Errorf("%w: the head 1738317600003-0 of order:h-03 for OrderProjector is pending", engine.ErrNotHalted)
	runRetryCases(t, []retryCase{
		{name: "some no longer halted", args: []string{"head", "retry", "--category", "order", "--yes", "--reason", "ERP back"},
			fa: func(f *cmdtest.FakeAdmin) {
				f.Heads["order:h-02"].Status = admin.HeadPending
				f.ActErrs = map[string]error{"order:h-03": notHalted}
				delete(f.Heads, "order:h-04")
			},
			stdoutHas: []string{
				"retried  order:h-01 for OrderProjector, head 1738317600001-0\n",
				"skipped  order:h-02 for OrderProjector: no longer halted: its head 1738317600002-0 is pending\n",
				"skipped  order:h-03 for OrderProjector: no longer halted: engine: head is not halted: the head 1738317600003-0",
				"skipped  order:h-04 for OrderProjector: no longer halted: caught up: it has no head any more\n",
				"✓ Retried 1 of 4 partitions; 3 no longer halted, 0 refused (above)",
			},
			acts: []string{"order:h-01", "order:h-03"},
			records: []string{"not_halted order:h-02 no longer halted: its head 1738317600002-0 is pending; skipped",
				"not_halted order:h-04 no longer halted: caught up: it has no head any more; skipped"}},
		{name: "one refused", args: []string{"head", "retry", "--key", "h-*", "--yes"}, code: cmdutil.ExitNotFound,
			fa: func(f *cmdtest.FakeAdmin) {
				f.ActErrs = map[string]error{"order:h-02": &admin.NotFoundError{What: "handler", Name: `"OrderProjector" of order`}}
			},
			stdoutHas: []string{"refused  order:h-02 for OrderProjector: handler \"OrderProjector\" of order not found", "retried  order:h-04",
				"✓ Retried 3 of 4 partitions; 0 no longer halted, 1 refused (above)"},
			stderrHas: []string{"1 of 4 partitions were not retried; the first: order:h-02 for OrderProjector"},
			acts:      []string{"order:h-01", "order:h-02", "order:h-03", "order:h-04"}},
		{name: "Redis gone half-way", args: []string{"head", "retry", "--category", "order", "--yes"}, code: cmdutil.ExitFailure,
			fa: func(f *cmdtest.FakeAdmin) {
				f.ActErrs = map[string]error{"order:h-02": fmt.Errorf("%w: EOF", engine.ErrRedisUnavailable)}
			},
			stdoutHas: []string{"retried  order:h-01"},
			stderrHas: []string{"retried 1 of 4 partitions (0 refused); order:h-02 for OrderProjector failed", "the connection failed during the retry: it may or may not have been applied"},
			acts:      []string{"order:h-01", "order:h-02"}},
	})
}

// -o json prints one object per partition, skipped and refused ones included, and
// nothing else on stdout.
func TestHeadRetryManyJSON(t *testing.T) {
	fa := retryAdmin(3)
	fa.Heads["order:h-02"].Status = admin.HeadPending
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "head", "retry", "--category", "order", "--yes", "-o", "json")
	cmdtest.CheckResult(t, r, 0, "", nil, nil)
	want := `[
  {
    "action": "retry",
    "stream": "order:h-01",
    "handler": "OrderProjector",
    "entry_id": "1738317600001-0",
    "outcome": "ok"
  },
  {
    "action": "retry",
    "stream": "order:h-02",
    "handler": "OrderProjector",
    "entry_id": "1738317600002-0",
    "outcome": "not_halted",
    "skipped": "no longer halted: its head 1738317600002-0 is pending"
  },
  {
    "action": "retry",
    "stream": "order:h-03",
    "handler": "OrderProjector",
    "entry_id": "1738317600003-0",
    "outcome": "ok"
  }
]
`
	if diff := cmp.Diff(want, r.Stdout); diff != "" {
		t.Errorf("-o json (-want +got):\n%s", diff)
	}
}

// stoppingActs is a cmdtest.FakeAdmin whose Act number stopAt (1-based) stops the command (as a
// Ctrl-C would) while the retry is under way; it counts the acts run on a cancelled
// context.
type stoppingActs struct {
	*cmdtest.FakeAdmin
	stopAt        int
	stop          context.CancelFunc
	cancelledCtxs int
}

func (s *stoppingActs) Act(ctx context.Context, a admin.Action) (*admin.ActionResult, error) {
	if len(s.Actions)+1 == s.stopAt {
		s.stop()
	}
	if ctx.Err() != nil {
		s.cancelledCtxs++
	}
	return s.FakeAdmin.Act(ctx, a)
}

// Stopped during its second retry, the command finishes that one, starts no other, says
// how many it went through and how to go on, records the stop with the count and exits 1.
func TestHeadRetryManyStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fa := &stoppingActs{FakeAdmin: retryAdmin(5), stopAt: 2, stop: cancel}
	ios, _, out, errOut := cmdutil.NewTestIOStreams()
	f := &cmdutil.Factory{IOStreams: ios, Build: cmdtest.TestBuild, OpenAdmin: func(context.Context) (cmdutil.Admin, func(), error) { return fa, func() {}, nil }}
	code := cmdtest.RunRoot(ctx, f, []string{"head", "retry", "--category", "order", "--rate", "1000/s", "--yes"})

	r := cmdtest.Result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
	cmdtest.CheckResult(t, r, cmdutil.ExitFailure, "", []string{"retried  order:h-01", "retried  order:h-02"},
		[]string{"stopped after 2 of 5; run the same command again to retry the rest (only the partitions still halted are retried)\n"})
	if fa.cancelledCtxs != 0 {
		t.Errorf("%d retries ran on a cancelled context: the stop cut into a partition", fa.cancelledCtxs)
	}
	checkRetries(t, fa.FakeAdmin, []string{"order:h-01", "order:h-02"}, []string{
		"stopped  --category order --rate 1000/s: stopped by the operator after 2 of 5 partitions (2 retried, 0 skipped, 0 refused); 3 not tried"})
	if strings.Contains(r.Stdout, "✓") {
		t.Errorf("a stopped run reported success:\n%s", r.Stdout)
	}
}
