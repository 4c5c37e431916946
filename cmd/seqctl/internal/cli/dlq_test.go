package cli

import (
	"testing"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"

	"github.com/seqctl/seqctl/pkg/admin"
)

func TestDLQParse(t *testing.T) {
	t.Run("list", func(t *testing.T) {
		testParse(t, "dlq", newCmdDLQList, []parseCase[DLQListOptions]{
			{name: "stream", argv: []string{"order:c"}, want: DLQListOptions{Stream: "order:c"}},
			{name: "dlq stream and json", argv: []string{"order:c:dlq", "-o", "json"}, want: DLQListOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Stream: "order:c:dlq"}},
			{name: "no stream lists every DLQ", want: DLQListOptions{}},
			{name: "two streams", argv: []string{"a:b", "c:d"}, wantErr: `unexpected argument "c:d"`},
		}, ignoreOpsInputs(DLQListOptions{}))
	})
	t.Run("replay", func(t *testing.T) {
		testParse(t, "dlq", newCmdDLQReplay, []parseCase[DLQReplayOptions]{
			{name: "id and yes", argv: []string{"order:c", "--id", "1-0", "--yes"}, want: DLQReplayOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Stream: "order:c", ID: "1-0"}},
			{name: "dry run", argv: []string{"order:c", "--id", "1-0", "--dry-run"}, want: DLQReplayOptions{GuardedOptions: cmdutil.GuardedOptions{DryRun: true}, Stream: "order:c", ID: "1-0"}},
			{name: "id required", argv: []string{"order:c", "--yes"}, wantErr: "--id is required"},
			{name: "malformed id", argv: []string{"order:c", "--id", "garbage", "--yes"}, wantErr: `invalid value "garbage" for --id`},
			// Redis would read "1718000000000" as the first entry of that millisecond, and
			// the replay then deletes 1718000000000-0, which may not be the entry replayed.
			{name: "a millisecond is no entry id", argv: []string{"order:c", "--id", "1718000000000", "--yes"},
				wantErr: `invalid value "1718000000000" for --id: an entry id is MILLISECONDS-SEQUENCE, e.g. 1718000000000-0; "1718000000000" names a millisecond, not one entry`},
		}, ignoreOpsInputs(DLQReplayOptions{}))
	})
}

func TestDLQListRun(t *testing.T) {
	testRun(t, func() *fakeAdmin { return &fakeAdmin{dlq: sampleDLQ()} }, []runCase{
		{name: "terminal", args: []string{"dlq", "list", "order:client-1"}, tm: onTTY, golden: "testdata/ops/dlq-list.tty.golden"},
		{name: "wide", args: []string{"dlq", "list", "order:client-1", "-o", "wide"}, tm: onTTY, golden: "testdata/ops/dlq-list.wide.golden"},
		{name: "pipe", args: []string{"dlq", "list", "order:client-1"}, tm: inPipe, golden: "testdata/ops/dlq-list.pipe.golden"},
		{name: "json", args: []string{"dlq", "list", "order:client-1", "-o", "json"}, tm: inPipe, golden: "testdata/ops/dlq-list.json.golden"},
		{name: "empty", args: []string{"dlq", "list", "order:client-1"}, tm: onTTY, fa: &fakeAdmin{dlq: []admin.DLQEntry{}}, stderrHas: []string{"The DLQ of order:client-1 is empty."}},
		{
			name: "not a partition", args: []string{"dlq", "list", "order"}, tm: inPipe, code: cmdutil.ExitUsage,
			fa: &fakeAdmin{dlqErr: admin.ErrInvalidStream}, stderrHas: []string{"invalid stream name"},
		},
	})
}

func TestDLQReplayRun(t *testing.T) {
	plan := &admin.ReplayPlan{Entry: sampleDLQ()[0], Stream: "order:client-1"}
	done := &admin.ReplayResult{DLQID: "1738318000000-0", DLQStream: "order:client-1:dlq", EventID: sampleEnvelope().ID,
		Stream: "order:client-1", EntryID: "1738318100000-0", Removed: true, Outcome: admin.OutcomeOK}
	notRemoved := *done
	notRemoved.Removed, notRemoved.Warning = false, "re-published, but the DLQ entry was not removed: connection reset"
	replay := []string{"dlq", "replay", "order:client-1", "--id", "1738318000000-0"}
	with := func(more ...string) []string { return append(append([]string(nil), replay...), more...) }
	testRun(t, func() *fakeAdmin { return &fakeAdmin{plan: plan, replay: done} }, []runCase{
		{
			name: "replay with --yes", args: with("--yes"), tm: inPipe, replayed: []string{"1738318000000-0"},
			stdoutHas: []string{"at the tail of order:client-1", "its position changed", "Removed 1738318000000-0 from order:client-1:dlq."},
		},
		{name: "json", args: with("--yes", "-o", "json"), tm: inPipe, replayed: []string{"1738318000000-0"}, golden: "testdata/ops/dlq-replay.json.golden"},
		{
			name: "not removed", args: with("--yes"), tm: inPipe, replayed: []string{"1738318000000-0"}, fa: &fakeAdmin{plan: plan, replay: &notRemoved},
			stdoutHas: []string{"is still in order:client-1:dlq: do not replay it again"}, stderrHas: []string{"warning: re-published, but"},
		},
		{
			name: "no terminal and no --yes: exit 2", args: replay, tm: inPipe, code: cmdutil.ExitUsage,
			stderrHas: []string{"refusing to replay 1738318000000-0 without confirmation"}, wantRecord: admin.OutcomeRefused,
		},
		{
			name: "confirmed on a terminal", args: replay, tm: onTTY, stdin: "yes\n", replayed: []string{"1738318000000-0"},
			stderrHas: []string{"goes to the TAIL of order:client-1", "every handler of order receives it again", "Replay it? [y/N]"},
		},
		{name: "declined", args: replay, tm: onTTY, stdin: "no\n", code: cmdutil.ExitFailure, wantRecord: admin.OutcomeDeclined},
		{name: "dry run", args: with("--dry-run"), tm: inPipe, stdoutHas: []string{"Would re-publish 1738318000000-0", "Nothing changed (--dry-run)."}},
		{
			name: "unknown entry: exit 3", args: with("--yes"), tm: inPipe, code: cmdutil.ExitNotFound,
			fa:         &fakeAdmin{planErr: &admin.NotFoundError{What: "DLQ entry", Name: "1-0 in order:client-1:dlq"}},
			stderrHas:  []string{"DLQ entry 1-0 in order:client-1:dlq not found"},
			wantRecord: admin.OutcomeNotFound,
		},
	})
}

func TestDLQListAll(t *testing.T) {
	testRun(t, func() *fakeAdmin { return &fakeAdmin{dlqs: sampleDLQs()} }, []runCase{
		{name: "terminal", args: []string{"dlq", "list"}, tm: onTTY, golden: "testdata/ops/dlq-list-all.tty.golden"},
		{name: "pipe", args: []string{"dlq", "list"}, tm: inPipe, stdoutHas: []string{"order:client-1\t2\t1738318000000-0\t1738318060000-0\t1h00m\n"}},
		{name: "json", args: []string{"dlq", "list", "-o", "json"}, tm: inPipe, golden: "testdata/ops/dlq-list-all.json.golden"},
		{name: "yaml", args: []string{"dlq", "list", "-o", "yaml"}, tm: inPipe, golden: "testdata/ops/dlq-list-all.yaml.golden"},
		{name: "none", args: []string{"dlq", "list"}, tm: onTTY, fa: &fakeAdmin{}, stderrHas: []string{"No DLQ has entries."}},
		{name: "two streams", args: []string{"dlq", "list", "a:b", "c:d"}, tm: inPipe, code: cmdutil.ExitUsage, stderrHas: []string{`unexpected argument "c:d"`}},
	})
}

func TestDLQReplayAll(t *testing.T) {
	two := append(sampleDLQ(), sampleDLQ()[0])
	two[1].ID = "1738318060000-0"
	done := &admin.ReplayResult{DLQStream: "order:client-1:dlq", Stream: "order:client-1", Removed: true, Outcome: admin.OutcomeOK}
	testRun(t, func() *fakeAdmin { return &fakeAdmin{dlq: two, replay: done} }, []runCase{
		{name: "--all --yes replays every entry, oldest first", args: []string{"dlq", "replay", "order:client-1", "--all", "--yes"}, tm: inPipe,
			replayed: []string{"1738318000000-0", "1738318060000-0"}, stdoutHas: []string{"Replayed 2 entries of order:client-1"}},
		{name: "confirmed once on a terminal", args: []string{"dlq", "replay", "order:client-1", "--all"}, tm: onTTY, stdin: "y\n",
			replayed: []string{"1738318000000-0", "1738318060000-0"}, stderrHas: []string{"2 entries of order:client-1 go to the TAIL", "Replay all 2? [y/N]"}},
		{name: "declined", args: []string{"dlq", "replay", "order:client-1", "--all"}, tm: onTTY, stdin: "n\n", code: cmdutil.ExitFailure,
			wantRecord: admin.OutcomeDeclined},
		{name: "no terminal, no --yes", args: []string{"dlq", "replay", "order:client-1", "--all"}, tm: inPipe, code: cmdutil.ExitUsage,
			stderrHas: []string{"refusing to replay 2 entries without confirmation"}, wantRecord: admin.OutcomeRefused},
		{name: "dry run", args: []string{"dlq", "replay", "order:client-1", "--all", "--dry-run"}, tm: inPipe,
			stdoutHas: []string{"Would re-publish 2 entries (1738318000000-0 to 1738318060000-0)"}},
		{name: "empty DLQ: exit 3", args: []string{"dlq", "replay", "order:client-1", "--all", "--yes"}, tm: inPipe, fa: &fakeAdmin{},
			code: cmdutil.ExitNotFound, stderrHas: []string{"the DLQ of order:client-1 is empty"}},
		{name: "stops at the first failure", args: []string{"dlq", "replay", "order:client-1", "--all", "--yes"}, tm: inPipe,
			fa:   &fakeAdmin{dlq: two, replayErr: &admin.NotFoundError{What: "DLQ entry", Name: "1738318000000-0"}},
			code: cmdutil.ExitNotFound, replayed: []string{"1738318000000-0"}, stderrHas: []string{"replayed 0 of 2 entries; 1738318000000-0 failed"}},
		{name: "--id and --all", args: []string{"dlq", "replay", "order:client-1", "--all", "--id", "1-0"}, tm: inPipe, code: cmdutil.ExitUsage,
			stderrHas: []string{"--id and --all exclude each other"}},
	})
}

func TestDLQPurge(t *testing.T) {
	two := append(sampleDLQ(), sampleDLQ()[0])
	two[1].ID = "1738318060000-0"
	testRun(t, func() *fakeAdmin { return &fakeAdmin{dlq: two} }, []runCase{
		{name: "through the newest entry shown", args: []string{"dlq", "purge", "order:client-1", "--yes"}, tm: inPipe,
			purges: []string{"1738318060000-0"}, stdoutHas: []string{"Deleted 2 entries of order:client-1:dlq, through 1738318060000-0"}},
		{name: "through an id", args: []string{"dlq", "purge", "order:client-1", "--through", "1738318000000-0", "--yes"}, tm: inPipe,
			purges: []string{"1738318000000-0"}},
		{name: "confirmed on a terminal", args: []string{"dlq", "purge", "order:client-1"}, tm: onTTY, stdin: "y\n",
			purges: []string{"1738318060000-0"}, stderrHas: []string{"Delete 2 entries of the DLQ of order:client-1, through 1738318060000-0, for good? [y/N]"}},
		{name: "the count follows --through", args: []string{"dlq", "purge", "order:client-1", "--through", "1738318000000-0"}, tm: onTTY, stdin: "n\n",
			code: cmdutil.ExitFailure, stderrHas: []string{"Delete 1 entries"}, wantRecord: admin.OutcomeDeclined},
		{name: "no terminal, no --yes", args: []string{"dlq", "purge", "order:client-1"}, tm: inPipe, code: cmdutil.ExitUsage,
			stderrHas: []string{"refusing to delete 2 DLQ entries without confirmation"}, wantRecord: admin.OutcomeRefused},
		{name: "dry run", args: []string{"dlq", "purge", "order:client-1", "--dry-run"}, tm: inPipe,
			stdoutHas: []string{"Would delete 2 entries of the DLQ of order:client-1, through 1738318060000-0 (of 2)"}},
		{name: "empty: exit 3", args: []string{"dlq", "purge", "order:client-1", "--yes"}, tm: inPipe, fa: &fakeAdmin{}, code: cmdutil.ExitNotFound,
			stderrHas: []string{"nothing to purge"}},
		{name: "malformed --through: exit 2", args: []string{"dlq", "purge", "order:client-1", "--through", "yesterday", "--yes"}, tm: inPipe,
			code: cmdutil.ExitUsage, stderrHas: []string{`invalid value "yesterday" for --through`}},
	})
}

// --through is the end of a range: a bare millisecond takes in every entry of it, as the
// purge itself (Admin.PurgeDLQ) does, so the count confirmed is the count deleted.
func TestDLQPurgeThroughAMillisecond(t *testing.T) {
	three := append(sampleDLQ(), sampleDLQ()[0], sampleDLQ()[0])
	three[1].ID, three[2].ID = "1738318000000-1", "1738318000001-0"
	testRun(t, func() *fakeAdmin { return &fakeAdmin{dlq: three} }, []runCase{
		{name: "every entry of the millisecond", args: []string{"dlq", "purge", "order:client-1", "--through", "1738318000000"}, tm: onTTY, stdin: "n\n",
			code: cmdutil.ExitFailure, stderrHas: []string{"Delete 2 entries of the DLQ of order:client-1, through 1738318000000, for good?"}, wantRecord: admin.OutcomeDeclined},
		{name: "nothing before it", args: []string{"dlq", "purge", "order:client-1", "--through", "1738317999999", "--yes"}, tm: inPipe,
			code: cmdutil.ExitNotFound, stderrHas: []string{"has no entry up to 1738317999999"}},
	})
}
