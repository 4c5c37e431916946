package head

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestHeadShowParse(t *testing.T) {
	cmdtest.ParseTable(t, "head", newCmdHeadShow, []cmdtest.ParseCase[HeadShowOptions]{
		{Name: "stream only", Argv: []string{"order:client-1"}, Want: HeadShowOptions{Stream: "order:client-1"}},
		{Name: "everything", Argv: []string{"order:client-1", "--handler", "P", "--full", "-o", "json"},
			Want: HeadShowOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Stream: "order:client-1", Handler: "P", Full: true}},
		{Name: "no stream", WantErr: "missing the STREAM argument"},
		{Name: "bad output", Argv: []string{"a:b", "-o", "csv"}, WantErr: `invalid value "csv" for --output`},
	}, cmdtest.IgnoreOpsInputs(HeadShowOptions{}))
}

func TestHeadShowRun(t *testing.T) {
	long := cmdtest.SampleHead()
	long.LastError = strings.Repeat("x", 700)
	long.Envelope.Data = []byte(`{"items":[` + strings.Repeat(`1,`, 60) + `1]}`)
	long.Envelope.Fields = map[string]string{"trace": "abc"}
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead()} }, []cmdtest.RunCase{
		{Name: "terminal", Args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/head-show.tty.golden"},
		{Name: "pipe", Args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/head-show.pipe.golden"},
		{Name: "json", Args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector", "-o", "json"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/head-show.json.golden"},
		{
			Name: "long payload is cut", Args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector"}, TTY: cmdtest.OnTTY,
			FA: &cmdtest.FakeAdmin{HeadAnswer: long}, StdoutHas: []string{"more lines; --full prints it all", "100 more bytes; --full prints it all"},
		},
		{
			Name: "--full prints everything", Args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector", "--full"}, TTY: cmdtest.OnTTY,
			FA: &cmdtest.FakeAdmin{HeadAnswer: long}, StdoutHas: []string{"trace       abc", strings.Repeat("x", 700)},
		},
		{
			Name: "the only handler is taken", Args: []string{"head", "show", "order:client-1"}, TTY: cmdtest.InPipe,
			FA: &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead(), HandlerNames: []string{"OrderProjector"}}, StdoutHas: []string{"handler\tOrderProjector"},
		},
		{
			Name: "several handlers need --handler", Args: []string{"head", "show", "order:client-1"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			FA: &cmdtest.FakeAdmin{HandlerNames: []string{"A", "B"}}, StderrHas: []string{"order:client-1 has 2 handlers (A, B): pass --handler"},
		},
		{
			Name: "caught up", Args: []string{"head", "show", "order:client-1", "--handler", "P"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitNotFound,
			FA:        &cmdtest.FakeAdmin{HeadErr: &admin.NotFoundError{What: "head", Name: "of order:client-1 for P", Hint: "the handler is caught up"}},
			StderrHas: []string{"head of order:client-1 for P not found: the handler is caught up"},
		},
	})
}

func TestHeadActionParse(t *testing.T) {
	for kind, cases := range map[admin.ActionKind][]cmdtest.ParseCase[HeadActionOptions]{
		admin.ActionSkip: {
			{Name: "skip", Argv: []string{"order:c", "--handler", "P", "--expect-id", "1-0", "--yes"},
				Want: HeadActionOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Kind: admin.ActionSkip, Stream: "order:c", Handler: "P", ExpectID: "1-0"}},
			{Name: "handler may be left out", Argv: []string{"order:c", "--yes"},
				Want: HeadActionOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Kind: admin.ActionSkip, Stream: "order:c"}},
			{Name: "malformed --expect-id", Argv: []string{"order:c", "--expect-id", "garbage"},
				WantErr: `invalid value "garbage" for --expect-id: an entry id is MILLISECONDS-SEQUENCE`},
		},
		admin.ActionDLQ: {
			{Name: "dlq with everything", Argv: []string{"order:c", "--handler", "P", "-y", "--dry-run", "--force", "--reason", "OPS-1", "-o", "json"},
				Want: HeadActionOptions{GuardedOptions: cmdutil.GuardedOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Yes: true, DryRun: true}, Kind: admin.ActionDLQ, Stream: "order:c", Handler: "P", Force: true, Reason: "OPS-1"}},
			{Name: "--expect-id with a bad sequence", Argv: []string{"order:c", "--expect-id", "1-x"}, WantErr: `invalid value "1-x" for --expect-id`},
			{Name: "stream required", Argv: []string{"--handler", "P"}, WantErr: "missing the STREAM argument"},
		},
		admin.ActionRetry: {
			{Name: "retry", Argv: []string{"order:c", "--handler", "P", "--expect-id", "1-0"},
				Want: HeadActionOptions{Kind: admin.ActionRetry, Stream: "order:c", Handler: "P", ExpectID: "1-0"}},
			{Name: "retry has no --force", Argv: []string{"order:c", "--handler", "P", "--force"}, WantErr: "unknown flag: --force"},
			{Name: "--expect-id with a sign", Argv: []string{"order:c", "--expect-id", "+1-0"}, WantErr: `invalid value "+1-0" for --expect-id`},
			// A bare millisecond names every entry of it, not the one head to compare with.
			{Name: "--expect-id milliseconds only", Argv: []string{"order:c", "--expect-id", "1718000000000"},
				WantErr: `invalid value "1718000000000" for --expect-id: an entry id is MILLISECONDS-SEQUENCE, e.g. 1718000000000-0; "1718000000000" names a millisecond, not one entry`},
		},
	} {
		t.Run(string(kind), func(t *testing.T) {
			newCmd := func(f *cmdutil.Factory, runF func(*HeadActionOptions) error) *cobra.Command {
				return newCmdHeadAction(f, kind, runF)
			}
			cmdtest.ParseTable(t, "head", newCmd, cases, cmdtest.IgnoreOpsInputs(HeadActionOptions{}))
		})
	}
}

func TestHeadActionRun(t *testing.T) {
	pending := cmdtest.SampleHead()
	pending.Status, pending.HaltedSince, pending.LastError = admin.HeadPending, nil, ""
	undelivered := cmdtest.SampleHead()
	undelivered.Status, undelivered.HaltedSince, undelivered.LastError, undelivered.Attempts = admin.HeadUndelivered, nil, "", 0
	skip := []string{"head", "skip", "order:client-1", "--handler", "OrderProjector"}
	with := func(base []string, more ...string) []string { return append(append([]string(nil), base...), more...) }
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead()} }, []cmdtest.RunCase{
		{
			Name: "skip the expected head", Args: with(skip, "--expect-id", cmdtest.PoisonID, "--yes", "--reason", "OPS-42"), TTY: cmdtest.InPipe,
			StdoutHas: []string{"Skipped 1738317600000-0 on order:client-1 for OrderProjector: acknowledged without handling"},
			WantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID, Reason: "OPS-42"},
		},
		{
			Name: "json result", Args: with(skip, "--expect-id", cmdtest.PoisonID, "--yes", "-o", "json"), TTY: cmdtest.InPipe, Golden: "testdata/ops/head-skip.json.golden",
			WantAct: &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID},
		},
		{
			Name: "the only handler is inferred", Args: []string{"head", "skip", "order:client-1", "--yes"}, TTY: cmdtest.InPipe,
			FA:        &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead(), HandlerNames: []string{"OrderProjector"}},
			StdoutHas: []string{"Skipped 1738317600000-0 on order:client-1 for OrderProjector"},
			WantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID},
		},
		{
			Name: "several handlers: exit 2 listing them", Args: []string{"head", "dlq", "order:client-1", "--yes"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			FA:        &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead(), HandlerNames: []string{"Billing", "OrderProjector"}},
			StderrHas: []string{"order:client-1 has 2 handlers (Billing, OrderProjector): pass --handler", "Run 'seqctl head dlq --help'"},
		},
		{
			Name: "no handler: exit 3", Args: []string{"head", "retry", "order:client-1", "--yes"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitNotFound,
			FA: &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead()}, StderrHas: []string{"no handler reads order:client-1"},
		},
		{
			Name: "malformed --expect-id: exit 2, nothing read", Args: with(skip, "--expect-id", "garbage", "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			StderrHas: []string{`invalid value "garbage" for --expect-id`},
		},
		{
			// The head is 1738317600000-0: its millisecond alone is no entry id, rather than
			// a head that "moved" (exit 4).
			Name: "the head's millisecond as --expect-id: exit 2, nothing read", Args: with(skip, "--expect-id", "1738317600000", "--yes"), TTY: cmdtest.InPipe,
			Code: cmdutil.ExitUsage, StderrHas: []string{`invalid value "1738317600000" for --expect-id`, "names a millisecond, not one entry"},
		},
		{
			Name: "dlq", Args: []string{"head", "dlq", "order:client-1", "--handler", "OrderProjector", "--yes"}, TTY: cmdtest.InPipe,
			StdoutHas: []string{"to order:client-1:dlq with its error", "seqctl dlq list order:client-1"},
			StderrHas: []string{"Current head of order:client-1 for OrderProjector:", "total must be positive"},
			WantAct:   &admin.Action{Kind: admin.ActionDLQ, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID},
		},
		{
			Name: "retry says it may halt again", Args: []string{"head", "retry", "order:client-1", "--handler", "OrderProjector", "--yes"}, TTY: cmdtest.InPipe,
			StdoutHas: []string{"tries 1738317600000-0 once more now. If it fails again, the partition halts again"},
			WantAct:   &admin.Action{Kind: admin.ActionRetry, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID},
		},
		{
			Name: "no terminal and no --yes: exit 2, nothing changes", Args: skip, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			StderrHas:  []string{"Current head of order:client-1", "refusing to skip 1738317600000-0 without confirmation: stdin is not a terminal, pass --yes"},
			WantRecord: admin.OutcomeRefused,
		},
		{
			Name: "confirmed on a terminal", Args: skip, TTY: cmdtest.OnTTY, Stdin: "y\n",
			StderrHas: []string{"Skip 1738317600000-0 on order:client-1 for OrderProjector? [y/N]"},
			WantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID},
		},
		{
			Name: "declined on a terminal", Args: skip, TTY: cmdtest.OnTTY, Stdin: "n\n", Code: cmdutil.ExitFailure,
			StderrHas: []string{"cancelled; nothing changed"}, WantRecord: admin.OutcomeDeclined,
		},
		{
			Name: "end of input on a terminal declines", Args: skip, TTY: cmdtest.OnTTY, Stdin: "", Code: cmdutil.ExitFailure,
			StderrHas: []string{"cancelled; nothing changed"}, WantRecord: admin.OutcomeDeclined,
		},
		{
			Name: "stale --expect-id: exit 4, nothing changes", Args: with(skip, "--expect-id", "1-1", "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
			StderrHas:  []string{"head moved: expected 1-1, the head is now 1738317600000-0; nothing was changed"},
			WantRecord: admin.OutcomeHeadMoved,
		},
		{
			Name: "the head moves under the script: exit 4", Args: with(skip, "--expect-id", cmdtest.PoisonID, "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
			FA:        &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead(), ActErr: &engine.HeadMovedError{Expected: cmdtest.PoisonID, Head: "1738317601000-0"}},
			StderrHas: []string{"head moved"},
			WantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID},
		},
		{
			Name: "the connection fails during the script", Args: with(skip, "--expect-id", cmdtest.PoisonID, "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA:        &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead(), ActErr: fmt.Errorf("%w: connection reset", engine.ErrRedisUnavailable)},
			StderrHas: []string{"it may or may not have been applied; check with 'seqctl head show order:client-1 --handler OrderProjector'"},
			WantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID},
		},
		{
			Name: "too few replicas acknowledged the skip: exit 1, says it may be lost", Args: with(skip, "--expect-id", cmdtest.PoisonID, "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA:        &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead(), ActErr: &engine.ReplicaShortfallError{Write: "skip", Want: 1, Got: 0, Timeout: time.Second}},
			StderrHas: []string{"the skip is done on the Redis primary, but only 0 of the 1 required replicas acknowledged it within 1s, so a failover may lose it"},
			WantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID},
		},
		{
			Name: "caught up with --expect-id: exit 4", Args: with(skip, "--expect-id", cmdtest.PoisonID, "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
			FA:         &cmdtest.FakeAdmin{HeadErr: &admin.NotFoundError{What: "head", Name: "of order:client-1 for OrderProjector"}},
			StderrHas:  []string{"the partition has no head now"},
			WantRecord: admin.OutcomeHeadMoved,
		},
		{
			Name: "caught up without --expect-id: exit 3", Args: with(skip, "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitNotFound,
			FA:         &cmdtest.FakeAdmin{HeadErr: &admin.NotFoundError{What: "head", Name: "of order:client-1 for OrderProjector"}},
			WantRecord: admin.OutcomeNotFound,
		},
		{
			Name: "unknown handler: exit 3", Args: with(skip, "--expect-id", "1-0", "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitNotFound,
			FA:         &cmdtest.FakeAdmin{HeadErr: &admin.NotFoundError{What: "handler", Name: `"X" of order`}},
			StderrHas:  []string{`handler "X" of order not found`},
			WantRecord: admin.OutcomeNotFound,
		},
		{
			Name: "a running head is refused without --force", Args: with(skip, "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA: &cmdtest.FakeAdmin{HeadAnswer: pending}, StderrHas: []string{"is pending, not halted; pass --force"}, WantRecord: admin.OutcomeNotHalted,
		},
		{
			Name: "--force acts on a running head", Args: with(skip, "--yes", "--force"), TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{HeadAnswer: pending},
			WantAct: &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: cmdtest.PoisonID, Force: true},
		},
		{
			Name: "retry of a running head is refused", Args: []string{"head", "retry", "order:client-1", "--handler", "OrderProjector", "--yes"}, TTY: cmdtest.InPipe,
			Code: cmdutil.ExitFailure, FA: &cmdtest.FakeAdmin{HeadAnswer: pending}, StderrHas: []string{"only a halted head can be retried"}, WantRecord: admin.OutcomeNotHalted,
		},
		{
			Name: "an undelivered head is refused even with --force", Args: with(skip, "--yes", "--force"), TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA: &cmdtest.FakeAdmin{HeadAnswer: undelivered}, StderrHas: []string{"has not been delivered to OrderProjector yet"}, WantRecord: admin.OutcomeNotPending,
		},
		{
			Name: "dry run changes nothing and needs no --yes", Args: with(skip, "--dry-run"), TTY: cmdtest.InPipe,
			StdoutHas: []string{"Would skip 1738317600000-0 on order:client-1 for OrderProjector (halted, 3 attempts). Nothing changed (--dry-run)."},
		},
		{
			Name: "dry run as json", Args: with(skip, "--dry-run", "--expect-id", cmdtest.PoisonID, "-o", "json"), TTY: cmdtest.InPipe, Golden: "testdata/ops/head-skip-dry-run.json.golden",
		},
		{
			Name: "dry run with a stale id: exit 4", Args: with(skip, "--dry-run", "--expect-id", "1-1"), TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
		},
	})
}
