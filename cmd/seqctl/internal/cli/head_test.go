package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestHeadShowParse(t *testing.T) {
	testParse(t, "head", newCmdHeadShow, []parseCase[HeadShowOptions]{
		{name: "stream only", argv: []string{"order:client-1"}, want: HeadShowOptions{Stream: "order:client-1"}},
		{name: "everything", argv: []string{"order:client-1", "--handler", "P", "--full", "-o", "json"},
			want: HeadShowOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Stream: "order:client-1", Handler: "P", Full: true}},
		{name: "no stream", wantErr: "missing the STREAM argument"},
		{name: "bad output", argv: []string{"a:b", "-o", "csv"}, wantErr: `invalid value "csv" for --output`},
	}, ignoreOpsInputs(HeadShowOptions{}))
}

func TestHeadShowRun(t *testing.T) {
	long := sampleHead()
	long.LastError = strings.Repeat("x", 700)
	long.Envelope.Data = []byte(`{"items":[` + strings.Repeat(`1,`, 60) + `1]}`)
	long.Envelope.Fields = map[string]string{"trace": "abc"}
	testRun(t, func() *fakeAdmin { return &fakeAdmin{head: sampleHead()} }, []runCase{
		{name: "terminal", args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector"}, tm: onTTY, golden: "testdata/ops/head-show.tty.golden"},
		{name: "pipe", args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector"}, tm: inPipe, golden: "testdata/ops/head-show.pipe.golden"},
		{name: "json", args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector", "-o", "json"}, tm: inPipe, golden: "testdata/ops/head-show.json.golden"},
		{
			name: "long payload is cut", args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector"}, tm: onTTY,
			fa: &fakeAdmin{head: long}, stdoutHas: []string{"more lines; --full prints it all", "100 more bytes; --full prints it all"},
		},
		{
			name: "--full prints everything", args: []string{"head", "show", "order:client-1", "--handler", "OrderProjector", "--full"}, tm: onTTY,
			fa: &fakeAdmin{head: long}, stdoutHas: []string{"trace       abc", strings.Repeat("x", 700)},
		},
		{
			name: "the only handler is taken", args: []string{"head", "show", "order:client-1"}, tm: inPipe,
			fa: &fakeAdmin{head: sampleHead(), handlers: []string{"OrderProjector"}}, stdoutHas: []string{"handler\tOrderProjector"},
		},
		{
			name: "several handlers need --handler", args: []string{"head", "show", "order:client-1"}, tm: inPipe, code: cmdutil.ExitUsage,
			fa: &fakeAdmin{handlers: []string{"A", "B"}}, stderrHas: []string{"order:client-1 has 2 handlers (A, B): pass --handler"},
		},
		{
			name: "caught up", args: []string{"head", "show", "order:client-1", "--handler", "P"}, tm: inPipe, code: cmdutil.ExitNotFound,
			fa:        &fakeAdmin{headErr: &admin.NotFoundError{What: "head", Name: "of order:client-1 for P", Hint: "the handler is caught up"}},
			stderrHas: []string{"head of order:client-1 for P not found: the handler is caught up"},
		},
	})
}

func TestHeadActionParse(t *testing.T) {
	for kind, cases := range map[admin.ActionKind][]parseCase[HeadActionOptions]{
		admin.ActionSkip: {
			{name: "skip", argv: []string{"order:c", "--handler", "P", "--expect-id", "1-0", "--yes"},
				want: HeadActionOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Kind: admin.ActionSkip, Stream: "order:c", Handler: "P", ExpectID: "1-0"}},
			{name: "handler may be left out", argv: []string{"order:c", "--yes"},
				want: HeadActionOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Kind: admin.ActionSkip, Stream: "order:c"}},
			{name: "malformed --expect-id", argv: []string{"order:c", "--expect-id", "garbage"},
				wantErr: `invalid value "garbage" for --expect-id: an entry id is MILLISECONDS-SEQUENCE`},
		},
		admin.ActionDLQ: {
			{name: "dlq with everything", argv: []string{"order:c", "--handler", "P", "-y", "--dry-run", "--force", "--reason", "OPS-1", "-o", "json"},
				want: HeadActionOptions{GuardedOptions: cmdutil.GuardedOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Yes: true, DryRun: true}, Kind: admin.ActionDLQ, Stream: "order:c", Handler: "P", Force: true, Reason: "OPS-1"}},
			{name: "--expect-id with a bad sequence", argv: []string{"order:c", "--expect-id", "1-x"}, wantErr: `invalid value "1-x" for --expect-id`},
			{name: "stream required", argv: []string{"--handler", "P"}, wantErr: "missing the STREAM argument"},
		},
		admin.ActionRetry: {
			{name: "retry", argv: []string{"order:c", "--handler", "P", "--expect-id", "1-0"},
				want: HeadActionOptions{Kind: admin.ActionRetry, Stream: "order:c", Handler: "P", ExpectID: "1-0"}},
			{name: "retry has no --force", argv: []string{"order:c", "--handler", "P", "--force"}, wantErr: "unknown flag: --force"},
			{name: "--expect-id with a sign", argv: []string{"order:c", "--expect-id", "+1-0"}, wantErr: `invalid value "+1-0" for --expect-id`},
			// A bare millisecond names every entry of it, not the one head to compare with.
			{name: "--expect-id milliseconds only", argv: []string{"order:c", "--expect-id", "1718000000000"},
				wantErr: `invalid value "1718000000000" for --expect-id: an entry id is MILLISECONDS-SEQUENCE, e.g. 1718000000000-0; "1718000000000" names a millisecond, not one entry`},
		},
	} {
		t.Run(string(kind), func(t *testing.T) {
			newCmd := func(f *cmdutil.Factory, runF func(*HeadActionOptions) error) *cobra.Command {
				return newCmdHeadAction(f, kind, runF)
			}
			testParse(t, "head", newCmd, cases, ignoreOpsInputs(HeadActionOptions{}))
		})
	}
}

func TestHeadActionRun(t *testing.T) {
	pending := sampleHead()
	pending.Status, pending.HaltedSince, pending.LastError = admin.HeadPending, nil, ""
	undelivered := sampleHead()
	undelivered.Status, undelivered.HaltedSince, undelivered.LastError, undelivered.Attempts = admin.HeadUndelivered, nil, "", 0
	skip := []string{"head", "skip", "order:client-1", "--handler", "OrderProjector"}
	with := func(base []string, more ...string) []string { return append(append([]string(nil), base...), more...) }
	testRun(t, func() *fakeAdmin { return &fakeAdmin{head: sampleHead()} }, []runCase{
		{
			name: "skip the expected head", args: with(skip, "--expect-id", poisonID, "--yes", "--reason", "OPS-42"), tm: inPipe,
			stdoutHas: []string{"Skipped 1738317600000-0 on order:client-1 for OrderProjector: acknowledged without handling"},
			wantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID, Reason: "OPS-42"},
		},
		{
			name: "json result", args: with(skip, "--expect-id", poisonID, "--yes", "-o", "json"), tm: inPipe, golden: "testdata/ops/head-skip.json.golden",
			wantAct: &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID},
		},
		{
			name: "the only handler is inferred", args: []string{"head", "skip", "order:client-1", "--yes"}, tm: inPipe,
			fa:        &fakeAdmin{head: sampleHead(), handlers: []string{"OrderProjector"}},
			stdoutHas: []string{"Skipped 1738317600000-0 on order:client-1 for OrderProjector"},
			wantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID},
		},
		{
			name: "several handlers: exit 2 listing them", args: []string{"head", "dlq", "order:client-1", "--yes"}, tm: inPipe, code: cmdutil.ExitUsage,
			fa:        &fakeAdmin{head: sampleHead(), handlers: []string{"Billing", "OrderProjector"}},
			stderrHas: []string{"order:client-1 has 2 handlers (Billing, OrderProjector): pass --handler", "Run 'seqctl head dlq --help'"},
		},
		{
			name: "no handler: exit 3", args: []string{"head", "retry", "order:client-1", "--yes"}, tm: inPipe, code: cmdutil.ExitNotFound,
			fa: &fakeAdmin{head: sampleHead()}, stderrHas: []string{"no handler reads order:client-1"},
		},
		{
			name: "malformed --expect-id: exit 2, nothing read", args: with(skip, "--expect-id", "garbage", "--yes"), tm: inPipe, code: cmdutil.ExitUsage,
			stderrHas: []string{`invalid value "garbage" for --expect-id`},
		},
		{
			// The head is 1738317600000-0: its millisecond alone is no entry id, rather than
			// a head that "moved" (exit 4).
			name: "the head's millisecond as --expect-id: exit 2, nothing read", args: with(skip, "--expect-id", "1738317600000", "--yes"), tm: inPipe,
			code: cmdutil.ExitUsage, stderrHas: []string{`invalid value "1738317600000" for --expect-id`, "names a millisecond, not one entry"},
		},
		{
			name: "dlq", args: []string{"head", "dlq", "order:client-1", "--handler", "OrderProjector", "--yes"}, tm: inPipe,
			stdoutHas: []string{"to order:client-1:dlq with its error", "seqctl dlq list order:client-1"},
			stderrHas: []string{"Current head of order:client-1 for OrderProjector:", "total must be positive"},
			wantAct:   &admin.Action{Kind: admin.ActionDLQ, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID},
		},
		{
			name: "retry says it may halt again", args: []string{"head", "retry", "order:client-1", "--handler", "OrderProjector", "--yes"}, tm: inPipe,
			stdoutHas: []string{"tries 1738317600000-0 once more now. If it fails again, the partition halts again"},
			wantAct:   &admin.Action{Kind: admin.ActionRetry, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID},
		},
		{
			name: "no terminal and no --yes: exit 2, nothing changes", args: skip, tm: inPipe, code: cmdutil.ExitUsage,
			stderrHas:  []string{"Current head of order:client-1", "refusing to skip 1738317600000-0 without confirmation: stdin is not a terminal, pass --yes"},
			wantRecord: admin.OutcomeRefused,
		},
		{
			name: "confirmed on a terminal", args: skip, tm: onTTY, stdin: "y\n",
			stderrHas: []string{"Skip 1738317600000-0 on order:client-1 for OrderProjector? [y/N]"},
			wantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID},
		},
		{
			name: "declined on a terminal", args: skip, tm: onTTY, stdin: "n\n", code: cmdutil.ExitFailure,
			stderrHas: []string{"cancelled; nothing changed"}, wantRecord: admin.OutcomeDeclined,
		},
		{
			name: "end of input on a terminal declines", args: skip, tm: onTTY, stdin: "", code: cmdutil.ExitFailure,
			stderrHas: []string{"cancelled; nothing changed"}, wantRecord: admin.OutcomeDeclined,
		},
		{
			name: "stale --expect-id: exit 4, nothing changes", args: with(skip, "--expect-id", "1-1", "--yes"), tm: inPipe, code: cmdutil.ExitConflict,
			stderrHas:  []string{"head moved: expected 1-1, the head is now 1738317600000-0; nothing was changed"},
			wantRecord: admin.OutcomeHeadMoved,
		},
		{
			name: "the head moves under the script: exit 4", args: with(skip, "--expect-id", poisonID, "--yes"), tm: inPipe, code: cmdutil.ExitConflict,
			fa:        &fakeAdmin{head: sampleHead(), actErr: &engine.HeadMovedError{Expected: poisonID, Head: "1738317601000-0"}},
			stderrHas: []string{"head moved"},
			wantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID},
		},
		{
			name: "the connection fails during the script", args: with(skip, "--expect-id", poisonID, "--yes"), tm: inPipe, code: cmdutil.ExitFailure,
			fa:        &fakeAdmin{head: sampleHead(), actErr: fmt.Errorf("%w: connection reset", engine.ErrRedisUnavailable)},
			stderrHas: []string{"it may or may not have been applied; check with 'seqctl head show order:client-1 --handler OrderProjector'"},
			wantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID},
		},
		{
			name: "too few replicas acknowledged the skip: exit 1, says it may be lost", args: with(skip, "--expect-id", poisonID, "--yes"), tm: inPipe, code: cmdutil.ExitFailure,
			fa:        &fakeAdmin{head: sampleHead(), actErr: &engine.ReplicaShortfallError{Write: "skip", Want: 1, Got: 0, Timeout: time.Second}},
			stderrHas: []string{"the skip is done on the Redis primary, but only 0 of the 1 required replicas acknowledged it within 1s, so a failover may lose it"},
			wantAct:   &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID},
		},
		{
			name: "caught up with --expect-id: exit 4", args: with(skip, "--expect-id", poisonID, "--yes"), tm: inPipe, code: cmdutil.ExitConflict,
			fa:         &fakeAdmin{headErr: &admin.NotFoundError{What: "head", Name: "of order:client-1 for OrderProjector"}},
			stderrHas:  []string{"the partition has no head now"},
			wantRecord: admin.OutcomeHeadMoved,
		},
		{
			name: "caught up without --expect-id: exit 3", args: with(skip, "--yes"), tm: inPipe, code: cmdutil.ExitNotFound,
			fa:         &fakeAdmin{headErr: &admin.NotFoundError{What: "head", Name: "of order:client-1 for OrderProjector"}},
			wantRecord: admin.OutcomeNotFound,
		},
		{
			name: "unknown handler: exit 3", args: with(skip, "--expect-id", "1-0", "--yes"), tm: inPipe, code: cmdutil.ExitNotFound,
			fa:         &fakeAdmin{headErr: &admin.NotFoundError{What: "handler", Name: `"X" of order`}},
			stderrHas:  []string{`handler "X" of order not found`},
			wantRecord: admin.OutcomeNotFound,
		},
		{
			name: "a running head is refused without --force", args: with(skip, "--yes"), tm: inPipe, code: cmdutil.ExitFailure,
			fa: &fakeAdmin{head: pending}, stderrHas: []string{"is pending, not halted; pass --force"}, wantRecord: admin.OutcomeNotHalted,
		},
		{
			name: "--force acts on a running head", args: with(skip, "--yes", "--force"), tm: inPipe, fa: &fakeAdmin{head: pending},
			wantAct: &admin.Action{Kind: admin.ActionSkip, Stream: "order:client-1", Handler: "OrderProjector", ExpectID: poisonID, Force: true},
		},
		{
			name: "retry of a running head is refused", args: []string{"head", "retry", "order:client-1", "--handler", "OrderProjector", "--yes"}, tm: inPipe,
			code: cmdutil.ExitFailure, fa: &fakeAdmin{head: pending}, stderrHas: []string{"only a halted head can be retried"}, wantRecord: admin.OutcomeNotHalted,
		},
		{
			name: "an undelivered head is refused even with --force", args: with(skip, "--yes", "--force"), tm: inPipe, code: cmdutil.ExitFailure,
			fa: &fakeAdmin{head: undelivered}, stderrHas: []string{"has not been delivered to OrderProjector yet"}, wantRecord: admin.OutcomeNotPending,
		},
		{
			name: "dry run changes nothing and needs no --yes", args: with(skip, "--dry-run"), tm: inPipe,
			stdoutHas: []string{"Would skip 1738317600000-0 on order:client-1 for OrderProjector (halted, 3 attempts). Nothing changed (--dry-run)."},
		},
		{
			name: "dry run as json", args: with(skip, "--dry-run", "--expect-id", poisonID, "-o", "json"), tm: inPipe, golden: "testdata/ops/head-skip-dry-run.json.golden",
		},
		{
			name: "dry run with a stale id: exit 4", args: with(skip, "--dry-run", "--expect-id", "1-1"), tm: inPipe, code: cmdutil.ExitConflict,
		},
	})
}
