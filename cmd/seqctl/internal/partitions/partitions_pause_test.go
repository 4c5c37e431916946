package partitions

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// pauseAdmin is a fake admin with the sample partitions (order:client-1 halted), one
// handler per category, and order:client-3 paused.
func pauseAdmin() *cmdtest.FakeAdmin {
	ps := cmdtest.SamplePartitions()
	rec := &engine.PauseRecord{Reason: "tenant migration", By: "bob@ops-2", Since: cmdtest.T0}
	for i := range ps {
		if ps[i].Stream == "order:client-3" {
			ps[i].State, ps[i].Pause = admin.StatePaused, rec
		}
	}
	return &cmdtest.FakeAdmin{Partitions: ps, HandlerNames: []string{"OrderProjector"},
		PauseRecs: map[string]*engine.PauseRecord{"order:client-3": rec}}
}

var (
	errHaltedClient1 = fmt.Errorf("%w: order:client-1 is halted for OrderProjector; resolve its head first ('seqctl head show')", engine.ErrHalted)
	errNotPaused     = fmt.Errorf("%w: order:client-2 for OrderProjector", engine.ErrNotPaused)
)

// pauseCase is one run of 'partitions pause|resume' against a fake admin.
type pauseCase struct {
	name      string
	args      []string
	tm        cmdtest.TTYMode
	stdin     string
	fa        func(*cmdtest.FakeAdmin) // changes the fake before the run
	code      int
	stdoutHas []string
	stderrHas []string
	// calls are the Pause and Resume calls, as "pause STREAM HANDLER"; nil: none.
	calls []string
	// records are the refusals and declines the command recorded itself, as "OUTCOME
	// STREAM DETAIL".
	records []string
}

func runPauseCases(t *testing.T, cases []pauseCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			fa := pauseAdmin()
			if tt.fa != nil {
				tt.fa(fa)
			}
			r := cmdtest.RunOps(t, fa, tt.tm, tt.stdin, tt.args...)
			cmdtest.CheckResult(t, r, tt.code, "", tt.stdoutHas, tt.stderrHas)
			var calls []string
			for _, c := range fa.PauseCalls {
				calls = append(calls, c.Action+" "+c.Req.Stream+" "+c.Req.Handler)
			}
			if diff := cmp.Diff(tt.calls, calls); diff != "" {
				t.Errorf("pause and resume calls (-want +got):\n%s", diff)
			}
			var records []string
			for _, e := range fa.Records {
				records = append(records, e.Outcome+" "+e.Stream+" "+e.Detail)
			}
			if diff := cmp.Diff(tt.records, records); diff != "" {
				t.Errorf("audit records written by the command (-want +got):\n%s", diff)
			}
		})
	}
}

// Mistakes on the command line are usage errors (exit 2) that change nothing and say
// what is accepted.
func TestPartitionsPauseFlags(t *testing.T) {
	const forWant = "want a duration of at least 1ms, a number and a unit (ms, s, m, h), e.g. 90s, 30m, 2h or 1h30m"
	pause := []string{"partitions", "pause", "order:client-2", "--yes"}
	with := func(extra ...string) []string { return append(append([]string(nil), pause...), extra...) }
	runPauseCases(t, []pauseCase{
		{name: "no reason", args: pause, code: cmdutil.ExitUsage, stderrHas: []string{"--reason is required", "partitions pause --help"}},
		{name: "a blank reason", args: with("--reason", "  "), code: cmdutil.ExitUsage, stderrHas: []string{"--reason is required"}},
		{name: "garbage --for", args: with("--reason", "r", "--for", "soon"), code: cmdutil.ExitUsage, stderrHas: []string{`invalid value "soon" for --for: ` + forWant}},
		{name: "zero --for", args: with("--reason", "r", "--for", "0s"), code: cmdutil.ExitUsage, stderrHas: []string{`invalid value "0s" for --for`}},
		{name: "negative --for", args: with("--reason", "r", "--for", "-5m"), code: cmdutil.ExitUsage, stderrHas: []string{`invalid value "-5m" for --for`}},
		{name: "--for under a millisecond", args: with("--reason", "r", "--for", "500us"), code: cmdutil.ExitUsage, stderrHas: []string{`invalid value "500us" for --for`}},
		{name: "STREAM and --key", args: with("--reason", "r", "--key", "client-*"), code: cmdutil.ExitUsage,
			stderrHas: []string{"STREAM arguments and --key/--category exclude each other"}},
		{name: "STREAM and --category", args: with("--reason", "r", "--category", "order"), code: cmdutil.ExitUsage,
			stderrHas: []string{"exclude each other"}},
		{name: "nothing named", args: []string{"partitions", "resume", "--yes"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"name the partitions to resume: STREAM arguments"}},
		{name: "a bad glob", args: []string{"partitions", "pause", "--key", "client-[1", "--reason", "r", "--yes"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"invalid value for --key"}},
		{name: "several handlers", args: with("--reason", "r"), fa: func(f *cmdtest.FakeAdmin) { f.HandlerNames = []string{"OrderProjector", "Mailer"} },
			code: cmdutil.ExitUsage, stderrHas: []string{"order:client-2 has 2 handlers (OrderProjector, Mailer): pass --handler"}},
		{name: "several handlers in a selected category", args: []string{"partitions", "pause", "--category", "order", "--reason", "r", "--yes"},
			fa:   func(f *cmdtest.FakeAdmin) { f.HandlerNames = []string{"OrderProjector", "Mailer"} },
			code: cmdutil.ExitUsage, stderrHas: []string{"order has 2 handlers (OrderProjector, Mailer): pass --handler"}},
	})
}

// The handler is the category's only one when --handler is left out; the request
// carries the reason, the duration and who runs the command.
func TestPartitionsPauseOne(t *testing.T) {
	fa := pauseAdmin()
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "partitions", "pause", "order:client-2", "--reason", "repair, OPS-42", "--for", "90s", "--yes")
	cmdtest.CheckResult(t, r, 0, "", []string{"✓ Paused order:client-2 for OrderProjector until 2025-01-31T10:01:30Z (1m30s), when it ends by itself",
		"Resume it with 'seqctl partitions resume order:client-2 --handler OrderProjector'"}, nil)
	if len(fa.PauseCalls) != 1 {
		t.Fatalf("calls = %+v", fa.PauseCalls)
	}
	req := fa.PauseCalls[0].Req
	if req.Stream != "order:client-2" || req.Handler != "OrderProjector" || req.Reason != "repair, OPS-42" || req.For != 90*time.Second ||
		req.Actor.Command != "partitions pause" || req.Actor.User == "" {
		t.Errorf("request = %+v", req)
	}

	r = cmdtest.RunOps(t, pauseAdmin(), cmdtest.InPipe, "", "partitions", "pause", "order:client-3", "--handler", "OrderProjector", "--reason", "r", "--yes")
	cmdtest.CheckResult(t, r, 0, "", []string{"Paused order:client-3 for OrderProjector until resumed", "It replaced the previous pause."}, nil)

	r = cmdtest.RunOps(t, pauseAdmin(), cmdtest.InPipe, "", "partitions", "resume", "order:client-3", "--yes")
	cmdtest.CheckResult(t, r, 0, "", []string{"✓ Resumed order:client-3 for OrderProjector: its owner starts its next event at once."}, nil)
}

// Confirmation as for 'head skip': without a terminal and --yes nothing changes, exit 2,
// and the refusal is recorded; on a terminal the partitions are shown and a no is
// recorded as declined.
func TestPartitionsPauseConfirmation(t *testing.T) {
	runPauseCases(t, []pauseCase{
		{name: "no terminal, no --yes", args: []string{"partitions", "pause", "order:client-2", "--reason", "r"}, code: cmdutil.ExitUsage,
			stderrHas: []string{"refusing to pause order:client-2 for OrderProjector without confirmation: stdin is not a terminal, pass --yes"},
			records:   []string{"refused order:client-2 no terminal and no --yes"}},
		{name: "no terminal, several", args: []string{"partitions", "resume", "--category", "order"}, code: cmdutil.ExitUsage,
			fa:        func(f *cmdtest.FakeAdmin) { f.Partitions[0].Pause = &engine.PauseRecord{Reason: "x"} }, // client-2 paused too
			stderrHas: []string{"refusing to resume 2 partitions without confirmation"},
			records:   []string{"refused  2 partitions (order:client-2, order:client-3); no terminal and no --yes"}},
		{name: "terminal, yes", args: []string{"partitions", "pause", "order:client-2", "--reason", "r"}, tm: cmdtest.OnTTY, stdin: "y\n",
			stderrHas: []string{"order:client-2 for OrderProjector (running, backlog 121)", "The event in flight finishes and no other starts, until resumed",
				"Pause order:client-2 for OrderProjector? [y/N]"},
			calls: []string{"pause order:client-2 OrderProjector"}},
		{name: "terminal, no", args: []string{"partitions", "pause", "order:client-2", "--reason", "r"}, tm: cmdtest.OnTTY, stdin: "n\n", code: cmdutil.ExitFailure,
			stderrHas: []string{cmdutil.CancelledText}, records: []string{"declined order:client-2 " + cmdutil.CancelledText}},
	})
}

// --dry-run lists what would be done and changes and records nothing; the partitions
// the listing shows would be refused are marked.
func TestPartitionsPauseDryRun(t *testing.T) {
	runPauseCases(t, []pauseCase{
		{name: "pause by selector", args: []string{"partitions", "pause", "--category", "order", "--key", "client-*", "--for", "30m", "--reason", "ERP down", "--dry-run"},
			stdoutHas: []string{
				`Would pause 4 partitions for 30m0s, reason "ERP down":`,
				"  refused  order:client-1 for OrderProjector: halted: resolve its head first ('seqctl head show order:client-1 --handler OrderProjector')\n",
				"  pause    order:client-2 for OrderProjector (running, backlog 121)\n",
				"  re-pause order:client-3 for OrderProjector (paused, backlog 0; paused by bob@ops-2 since 2025-01-31T10:00:00Z, until resumed: tenant migration)\n",
				"  pause    order:client-10 for OrderProjector (idle, backlog 0)\n",
				"Nothing changed (--dry-run).",
			}},
		{name: "resume by name", args: []string{"partitions", "resume", "order:client-3", "order:client-2", "--dry-run"},
			stdoutHas: []string{"Would resume 2 partitions:", "  resume   order:client-3 for OrderProjector (paused", "  refused  order:client-2 for OrderProjector: not paused"}},
	})
	fa := pauseAdmin()
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "partitions", "pause", "order:client-1", "order:client-2", "--reason", "r", "--dry-run", "-o", "json")
	cmdtest.CheckResult(t, r, 0, "", nil, nil)
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, r.Stdout)
	}
	want := []map[string]any{
		{"action": "pause", "stream": "order:client-1", "handler": "OrderProjector", "outcome": "halted", "dry_run": true, "state": "halted",
			"error": "halted: resolve its head first ('seqctl head show order:client-1 --handler OrderProjector')"},
		{"action": "pause", "stream": "order:client-2", "handler": "OrderProjector", "outcome": "dry_run", "dry_run": true, "state": "running"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dry run -o json (-want +got):\n%s", diff)
	}
	if len(fa.PauseCalls) != 0 || len(fa.Records) != 0 {
		t.Errorf("the dry run acted or recorded: %+v %+v", fa.PauseCalls, fa.Records)
	}
}

// Several partitions are acted on one at a time, each reported; a refusal does not stop
// the others and the command exits with the status of the first refusal: 4 for a halted
// partition, 3 for one not paused or an unknown handler.
func TestPartitionsPauseMany(t *testing.T) {
	halted := func(f *cmdtest.FakeAdmin) { f.PauseErrs = map[string]error{"order:client-1": errHaltedClient1} }
	unknown := &admin.NotFoundError{What: "handler", Name: `"Nope" of order`, Hint: "the handlers of order are OrderProjector"}
	runPauseCases(t, []pauseCase{
		{name: "by selector, one halted", args: []string{"partitions", "pause", "--key", "client-*", "--reason", "r", "--yes"}, fa: halted, code: cmdutil.ExitConflict,
			stdoutHas: []string{
				"refused  order:client-1 for OrderProjector: engine: partition halted: order:client-1 is halted for OrderProjector",
				"paused   order:client-2 for OrderProjector, until resumed\n",
				"paused   order:client-3 for OrderProjector, until resumed; replaced the previous pause\n",
				"paused   order:client-10 for OrderProjector, until resumed\n",
				"✓ Paused 3 of 4 partitions; 1 refused (above).",
			},
			stderrHas: []string{"1 of 4 partitions were not paused; the first: order:client-1 for OrderProjector: engine: partition halted"},
			calls: []string{"pause order:client-1 OrderProjector", "pause order:client-2 OrderProjector", "pause order:client-3 OrderProjector",
				"pause order:client-10 OrderProjector"}},
		{name: "one halted", args: []string{"partitions", "pause", "order:client-1", "--reason", "r", "--yes"}, fa: halted, code: cmdutil.ExitConflict,
			stderrHas: []string{"seqctl: engine: partition halted: order:client-1 is halted"}, calls: []string{"pause order:client-1 OrderProjector"}},
		{name: "not paused", args: []string{"partitions", "resume", "order:client-2", "order:client-3", "--yes"}, code: cmdutil.ExitNotFound,
			fa:        func(f *cmdtest.FakeAdmin) { f.PauseErrs = map[string]error{"order:client-2": errNotPaused} },
			stdoutHas: []string{"refused  order:client-2 for OrderProjector: engine: partition is not paused", "resumed  order:client-3 for OrderProjector\n", "✓ Resumed 1 of 2 partitions"},
			stderrHas: []string{"1 of 2 partitions were not resumed"},
			calls:     []string{"resume order:client-2 OrderProjector", "resume order:client-3 OrderProjector"}},
		{name: "unknown handler", args: []string{"partitions", "pause", "order:client-2", "--handler", "Nope", "--reason", "r", "--yes"}, code: cmdutil.ExitNotFound,
			fa: func(f *cmdtest.FakeAdmin) { f.PauseErrs = map[string]error{"order:client-2": unknown} }, stderrHas: []string{`handler "Nope" of order not found`},
			calls: []string{"pause order:client-2 Nope"}},
		{name: "a selection of nothing", args: []string{"partitions", "resume", "--key", "client-2*", "--yes"}, code: cmdutil.ExitNotFound,
			stderrHas: []string{"no paused partition matches --key client-2*: nothing to resume"}},
		{name: "Redis gone half-way stops", args: []string{"partitions", "pause", "order:client-2", "order:client-3", "order:client-10", "--reason", "r", "--yes"},
			fa: func(f *cmdtest.FakeAdmin) {
				f.PauseErrs = map[string]error{"order:client-3": fmt.Errorf("%w: EOF", engine.ErrRedisUnavailable)}
			},
			code: cmdutil.ExitFailure, stdoutHas: []string{"paused   order:client-2"},
			stderrHas: []string{"paused 1 of 3 partitions (0 refused); order:client-3 for OrderProjector failed", "the connection failed during the pause"},
			calls:     []string{"pause order:client-2 OrderProjector", "pause order:client-3 OrderProjector"}},
	})
}

// -o json prints one object per partition, refused ones with their outcome and error,
// whether or not any was done.
func TestPartitionsPauseJSON(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"some done", []string{"order:client-1", "order:client-2"}, cmdutil.ExitConflict, `[
  {
    "action": "pause",
    "stream": "order:client-1",
    "handler": "OrderProjector",
    "outcome": "halted",
    "error": "engine: partition halted: order:client-1 is halted for OrderProjector; resolve its head first ('seqctl head show')"
  },
  {
    "action": "pause",
    "stream": "order:client-2",
    "handler": "OrderProjector",
    "pause": {
      "reason": "r",
      "by": "alice@ops-1",
      "since": "2025-01-31T10:00:00Z",
      "until": null
    },
    "outcome": "ok"
  }
]
`},
		{"none done", []string{"order:client-1"}, cmdutil.ExitConflict, `[
  {
    "action": "pause",
    "stream": "order:client-1",
    "handler": "OrderProjector",
    "outcome": "halted",
    "error": "engine: partition halted: order:client-1 is halted for OrderProjector; resolve its head first ('seqctl head show')"
  }
]
`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fa := pauseAdmin()
			fa.PauseErrs = map[string]error{"order:client-1": errHaltedClient1}
			r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", append(append([]string{"partitions", "pause"}, tt.args...), "--reason", "r", "--yes", "-o", "json")...)
			cmdtest.CheckResult(t, r, tt.code, "", nil, []string{"engine: partition halted"})
			if diff := cmp.Diff(tt.want, r.Stdout); diff != "" {
				t.Errorf("-o json (-want +got):\n%s", diff)
			}
		})
	}
}

// partitions list -o wide shows who paused, until when and why; inspect shows the pause
// of each handler, as text and as JSON.
func TestPartitionsListAndInspectShowPause(t *testing.T) {
	fa := pauseAdmin()
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "partitions", "list", "--state", "paused", "-o", "wide", "--no-headers")
	cmdtest.CheckResult(t, r, 0, "", []string{"  paused  order:client-3  -  -  -  bob@ops-2  resumed  tenant migration  -\n"}, nil)
	if strings.Count(r.Stdout, "\n") != 1 || fa.Filter.States[0] != admin.StatePaused {
		t.Errorf("--state paused: filter %+v, rows:\n%s", fa.Filter, r.Stdout)
	}

	in := cmdtest.SampleInspection()
	in.Stream = "order:client-3"
	fa.Inspection = in
	fa.PauseRecs["order:client-3"].Until = cmdtest.T1
	r = cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "partitions", "inspect", "order:client-3")
	cmdtest.CheckResult(t, r, 0, "", []string{
		"  paused      by bob@ops-2 since 2025-01-31T10:00:00Z, until 2025-01-31T10:05:00Z\n",
		"  why         tenant migration\n",
	}, nil)
	r = cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "partitions", "inspect", "order:client-3", "-o", "json")
	var got struct {
		Handlers []struct {
			Handler string              `json:"handler"`
			Pause   *engine.PauseRecord `json:"pause"`
		} `json:"handlers"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil || len(got.Handlers) != 1 || got.Handlers[0].Pause == nil ||
		got.Handlers[0].Pause.Reason != "tenant migration" || !got.Handlers[0].Pause.Until.Equal(cmdtest.T1) {
		t.Errorf("inspect -o json: %v %+v\n%s", err, got, r.Stdout)
	}
}
