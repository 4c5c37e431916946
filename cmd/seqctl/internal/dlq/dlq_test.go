package dlq

import (
	"testing"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
)

func TestDLQParse(t *testing.T) {
	t.Run("list", func(t *testing.T) {
		cmdtest.ParseTable(t, "dlq", newCmdDLQList, []cmdtest.ParseCase[DLQListOptions]{
			{Name: "stream", Argv: []string{"order:c"}, Want: DLQListOptions{Stream: "order:c"}},
			{Name: "dlq stream and json", Argv: []string{"order:c:dlq", "-o", "json"}, Want: DLQListOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Stream: "order:c:dlq"}},
			{Name: "no stream lists every DLQ", Want: DLQListOptions{}},
			{Name: "two streams", Argv: []string{"a:b", "c:d"}, WantErr: `unexpected argument "c:d"`},
		}, cmdtest.IgnoreOpsInputs(DLQListOptions{}))
	})
	t.Run("replay", func(t *testing.T) {
		cmdtest.ParseTable(t, "dlq", newCmdDLQReplay, []cmdtest.ParseCase[DLQReplayOptions]{
			{Name: "id and yes", Argv: []string{"order:c", "--id", "1-0", "--yes"}, Want: DLQReplayOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Stream: "order:c", ID: "1-0"}},
			{Name: "dry run", Argv: []string{"order:c", "--id", "1-0", "--dry-run"}, Want: DLQReplayOptions{GuardedOptions: cmdutil.GuardedOptions{DryRun: true}, Stream: "order:c", ID: "1-0"}},
			{Name: "id required", Argv: []string{"order:c", "--yes"}, WantErr: "--id is required"},
			{Name: "malformed id", Argv: []string{"order:c", "--id", "garbage", "--yes"}, WantErr: `invalid value "garbage" for --id`},
			// Redis would read "1718000000000" as the first entry of that millisecond, and
			// the replay then deletes 1718000000000-0, which may not be the entry replayed.
			{Name: "a millisecond is no entry id", Argv: []string{"order:c", "--id", "1718000000000", "--yes"},
				WantErr: `invalid value "1718000000000" for --id: an entry id is MILLISECONDS-SEQUENCE, e.g. 1718000000000-0; "1718000000000" names a millisecond, not one entry`},
		}, cmdtest.IgnoreOpsInputs(DLQReplayOptions{}))
	})
}

func TestDLQListRun(t *testing.T) {
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{DLQEntries: cmdtest.SampleDLQ()} }, []cmdtest.RunCase{
		{Name: "terminal", Args: []string{"dlq", "list", "order:client-1"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/dlq-list.tty.golden"},
		{Name: "wide", Args: []string{"dlq", "list", "order:client-1", "-o", "wide"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/dlq-list.wide.golden"},
		{Name: "pipe", Args: []string{"dlq", "list", "order:client-1"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/dlq-list.pipe.golden"},
		{Name: "json", Args: []string{"dlq", "list", "order:client-1", "-o", "json"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/dlq-list.json.golden"},
		{Name: "empty", Args: []string{"dlq", "list", "order:client-1"}, TTY: cmdtest.OnTTY, FA: &cmdtest.FakeAdmin{DLQEntries: []admin.DLQEntry{}}, StderrHas: []string{"The DLQ of order:client-1 is empty."}},
		{
			Name: "not a partition", Args: []string{"dlq", "list", "order"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			FA: &cmdtest.FakeAdmin{DLQErr: admin.ErrInvalidStream}, StderrHas: []string{"invalid stream name"},
		},
	})
}

func TestDLQReplayRun(t *testing.T) {
	plan := &admin.ReplayPlan{Entry: cmdtest.SampleDLQ()[0], Stream: "order:client-1"}
	done := &admin.ReplayResult{DLQID: "1738318000000-0", DLQStream: "order:client-1:dlq", EventID: cmdtest.SampleEnvelope().ID,
		Stream: "order:client-1", EntryID: "1738318100000-0", Removed: true, Outcome: admin.OutcomeOK}
	notRemoved := *done
	notRemoved.Removed, notRemoved.Warning = false, "re-published, but the DLQ entry was not removed: connection reset"
	replay := []string{"dlq", "replay", "order:client-1", "--id", "1738318000000-0"}
	with := func(more ...string) []string { return append(append([]string(nil), replay...), more...) }
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{Plan: plan, ReplayResult: done} }, []cmdtest.RunCase{
		{
			Name: "replay with --yes", Args: with("--yes"), TTY: cmdtest.InPipe, Replayed: []string{"1738318000000-0"},
			StdoutHas: []string{"at the tail of order:client-1", "its position changed", "Removed 1738318000000-0 from order:client-1:dlq."},
		},
		{Name: "json", Args: with("--yes", "-o", "json"), TTY: cmdtest.InPipe, Replayed: []string{"1738318000000-0"}, Golden: "testdata/ops/dlq-replay.json.golden"},
		{
			Name: "not removed", Args: with("--yes"), TTY: cmdtest.InPipe, Replayed: []string{"1738318000000-0"}, FA: &cmdtest.FakeAdmin{Plan: plan, ReplayResult: &notRemoved},
			StdoutHas: []string{"is still in order:client-1:dlq: do not replay it again"}, StderrHas: []string{"warning: re-published, but"},
		},
		{
			Name: "no terminal and no --yes: exit 2", Args: replay, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			StderrHas: []string{"refusing to replay 1738318000000-0 without confirmation"}, WantRecord: admin.OutcomeRefused,
		},
		{
			Name: "confirmed on a terminal", Args: replay, TTY: cmdtest.OnTTY, Stdin: "yes\n", Replayed: []string{"1738318000000-0"},
			StderrHas: []string{"goes to the TAIL of order:client-1", "every handler of order receives it again", "Replay it? [y/N]"},
		},
		{Name: "declined", Args: replay, TTY: cmdtest.OnTTY, Stdin: "no\n", Code: cmdutil.ExitFailure, WantRecord: admin.OutcomeDeclined},
		{Name: "dry run", Args: with("--dry-run"), TTY: cmdtest.InPipe, StdoutHas: []string{"Would re-publish 1738318000000-0", "Nothing changed (--dry-run)."}},
		{
			Name: "unknown entry: exit 3", Args: with("--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitNotFound,
			FA:         &cmdtest.FakeAdmin{PlanErr: &admin.NotFoundError{What: "DLQ entry", Name: "1-0 in order:client-1:dlq"}},
			StderrHas:  []string{"DLQ entry 1-0 in order:client-1:dlq not found"},
			WantRecord: admin.OutcomeNotFound,
		},
	})
}

func TestDLQListAll(t *testing.T) {
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{DLQSummaries: cmdtest.SampleDLQs()} }, []cmdtest.RunCase{
		{Name: "terminal", Args: []string{"dlq", "list"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/dlq-list-all.tty.golden"},
		{Name: "pipe", Args: []string{"dlq", "list"}, TTY: cmdtest.InPipe, StdoutHas: []string{"order:client-1\t2\t1738318000000-0\t1738318060000-0\t1h00m\n"}},
		{Name: "json", Args: []string{"dlq", "list", "-o", "json"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/dlq-list-all.json.golden"},
		{Name: "yaml", Args: []string{"dlq", "list", "-o", "yaml"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/dlq-list-all.yaml.golden"},
		{Name: "none", Args: []string{"dlq", "list"}, TTY: cmdtest.OnTTY, FA: &cmdtest.FakeAdmin{}, StderrHas: []string{"No DLQ has entries."}},
		{Name: "two streams", Args: []string{"dlq", "list", "a:b", "c:d"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage, StderrHas: []string{`unexpected argument "c:d"`}},
	})
}

func TestDLQReplayAll(t *testing.T) {
	two := append(cmdtest.SampleDLQ(), cmdtest.SampleDLQ()[0])
	two[1].ID = "1738318060000-0"
	done := &admin.ReplayResult{DLQStream: "order:client-1:dlq", Stream: "order:client-1", Removed: true, Outcome: admin.OutcomeOK}
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{DLQEntries: two, ReplayResult: done} }, []cmdtest.RunCase{
		{Name: "--all --yes replays every entry, oldest first", Args: []string{"dlq", "replay", "order:client-1", "--all", "--yes"}, TTY: cmdtest.InPipe,
			Replayed: []string{"1738318000000-0", "1738318060000-0"}, StdoutHas: []string{"Replayed 2 entries of order:client-1"}},
		{Name: "confirmed once on a terminal", Args: []string{"dlq", "replay", "order:client-1", "--all"}, TTY: cmdtest.OnTTY, Stdin: "y\n",
			Replayed: []string{"1738318000000-0", "1738318060000-0"}, StderrHas: []string{"2 entries of order:client-1 go to the TAIL", "Replay all 2? [y/N]"}},
		{Name: "declined", Args: []string{"dlq", "replay", "order:client-1", "--all"}, TTY: cmdtest.OnTTY, Stdin: "n\n", Code: cmdutil.ExitFailure,
			WantRecord: admin.OutcomeDeclined},
		{Name: "no terminal, no --yes", Args: []string{"dlq", "replay", "order:client-1", "--all"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			StderrHas: []string{"refusing to replay 2 entries without confirmation"}, WantRecord: admin.OutcomeRefused},
		{Name: "dry run", Args: []string{"dlq", "replay", "order:client-1", "--all", "--dry-run"}, TTY: cmdtest.InPipe,
			StdoutHas: []string{"Would re-publish 2 entries (1738318000000-0 to 1738318060000-0)"}},
		{Name: "empty DLQ: exit 3", Args: []string{"dlq", "replay", "order:client-1", "--all", "--yes"}, TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{},
			Code: cmdutil.ExitNotFound, StderrHas: []string{"the DLQ of order:client-1 is empty"}},
		{Name: "stops at the first failure", Args: []string{"dlq", "replay", "order:client-1", "--all", "--yes"}, TTY: cmdtest.InPipe,
			FA:   &cmdtest.FakeAdmin{DLQEntries: two, ReplayErr: &admin.NotFoundError{What: "DLQ entry", Name: "1738318000000-0"}},
			Code: cmdutil.ExitNotFound, Replayed: []string{"1738318000000-0"}, StderrHas: []string{"replayed 0 of 2 entries; 1738318000000-0 failed"}},
		{Name: "--id and --all", Args: []string{"dlq", "replay", "order:client-1", "--all", "--id", "1-0"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			StderrHas: []string{"--id and --all exclude each other"}},
	})
}

func TestDLQPurge(t *testing.T) {
	two := append(cmdtest.SampleDLQ(), cmdtest.SampleDLQ()[0])
	two[1].ID = "1738318060000-0"
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{DLQEntries: two} }, []cmdtest.RunCase{
		{Name: "through the newest entry shown", Args: []string{"dlq", "purge", "order:client-1", "--yes"}, TTY: cmdtest.InPipe,
			Purges: []string{"1738318060000-0"}, StdoutHas: []string{"Deleted 2 entries of order:client-1:dlq, through 1738318060000-0"}},
		{Name: "through an id", Args: []string{"dlq", "purge", "order:client-1", "--through", "1738318000000-0", "--yes"}, TTY: cmdtest.InPipe,
			Purges: []string{"1738318000000-0"}},
		{Name: "confirmed on a terminal", Args: []string{"dlq", "purge", "order:client-1"}, TTY: cmdtest.OnTTY, Stdin: "y\n",
			Purges: []string{"1738318060000-0"}, StderrHas: []string{"Delete 2 entries of the DLQ of order:client-1, through 1738318060000-0, for good? [y/N]"}},
		{Name: "the count follows --through", Args: []string{"dlq", "purge", "order:client-1", "--through", "1738318000000-0"}, TTY: cmdtest.OnTTY, Stdin: "n\n",
			Code: cmdutil.ExitFailure, StderrHas: []string{"Delete 1 entries"}, WantRecord: admin.OutcomeDeclined},
		{Name: "no terminal, no --yes", Args: []string{"dlq", "purge", "order:client-1"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			StderrHas: []string{"refusing to delete 2 DLQ entries without confirmation"}, WantRecord: admin.OutcomeRefused},
		{Name: "dry run", Args: []string{"dlq", "purge", "order:client-1", "--dry-run"}, TTY: cmdtest.InPipe,
			StdoutHas: []string{"Would delete 2 entries of the DLQ of order:client-1, through 1738318060000-0 (of 2)"}},
		{Name: "empty: exit 3", Args: []string{"dlq", "purge", "order:client-1", "--yes"}, TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{}, Code: cmdutil.ExitNotFound,
			StderrHas: []string{"nothing to purge"}},
		{Name: "malformed --through: exit 2", Args: []string{"dlq", "purge", "order:client-1", "--through", "yesterday", "--yes"}, TTY: cmdtest.InPipe,
			Code: cmdutil.ExitUsage, StderrHas: []string{`invalid value "yesterday" for --through`}},
	})
}

// --through is the end of a range: a bare millisecond takes in every entry of it, as the
// purge itself (Admin.PurgeDLQ) does, so the count confirmed is the count deleted.
func TestDLQPurgeThroughAMillisecond(t *testing.T) {
	three := append(cmdtest.SampleDLQ(), cmdtest.SampleDLQ()[0], cmdtest.SampleDLQ()[0])
	three[1].ID, three[2].ID = "1738318000000-1", "1738318000001-0"
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{DLQEntries: three} }, []cmdtest.RunCase{
		{Name: "every entry of the millisecond", Args: []string{"dlq", "purge", "order:client-1", "--through", "1738318000000"}, TTY: cmdtest.OnTTY, Stdin: "n\n",
			Code: cmdutil.ExitFailure, StderrHas: []string{"Delete 2 entries of the DLQ of order:client-1, through 1738318000000, for good?"}, WantRecord: admin.OutcomeDeclined},
		{Name: "nothing before it", Args: []string{"dlq", "purge", "order:client-1", "--through", "1738317999999", "--yes"}, TTY: cmdtest.InPipe,
			Code: cmdutil.ExitNotFound, StderrHas: []string{"has no entry up to 1738317999999"}},
	})
}
