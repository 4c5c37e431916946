package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seqctl/seqctl/pkg/admin"
)

func TestDLQParse(t *testing.T) {
	t.Run("list", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			argv    []string
			want    DLQListOptions
			wantErr string
		}{
			{name: "stream", argv: []string{"order:c"}, want: DLQListOptions{Stream: "order:c"}},
			{name: "dlq stream and json", argv: []string{"order:c:dlq", "-o", "json"}, want: DLQListOptions{Stream: "order:c:dlq", Output: "json"}},
			{name: "no stream", wantErr: "missing the STREAM argument"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				f := testFactory()
				var got *DLQListOptions
				err := parseOps(t, f, "dlq", newCmdDLQList(f, func(o *DLQListOptions) error { got = o; return nil }), tt.argv...)
				if tt.wantErr != "" {
					var ue *UsageError
					if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("error = %v, want a *UsageError containing %q", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, *got, cmpopts.IgnoreFields(DLQListOptions{}, "IO", "Admin", "Ctx")); diff != "" {
					t.Errorf("options (-want +got):\n%s", diff)
				}
			})
		}
	})
	t.Run("replay", func(t *testing.T) {
		for _, tt := range []struct {
			name    string
			argv    []string
			want    DLQReplayOptions
			wantErr string
		}{
			{name: "id and yes", argv: []string{"order:c", "--id", "1-0", "--yes"}, want: DLQReplayOptions{Stream: "order:c", ID: "1-0", Yes: true}},
			{name: "dry run", argv: []string{"order:c", "--id", "1-0", "--dry-run"}, want: DLQReplayOptions{Stream: "order:c", ID: "1-0", DryRun: true}},
			{name: "id required", argv: []string{"order:c", "--yes"}, wantErr: "--id is required"},
			{name: "malformed id", argv: []string{"order:c", "--id", "garbage", "--yes"}, wantErr: `invalid value "garbage" for --id`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				f := testFactory()
				var got *DLQReplayOptions
				err := parseOps(t, f, "dlq", newCmdDLQReplay(f, func(o *DLQReplayOptions) error { got = o; return nil }), tt.argv...)
				if tt.wantErr != "" {
					var ue *UsageError
					if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("error = %v, want a *UsageError containing %q", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, *got, cmpopts.IgnoreFields(DLQReplayOptions{}, "IO", "Admin", "Ctx")); diff != "" {
					t.Errorf("options (-want +got):\n%s", diff)
				}
			})
		}
	})
}

func TestDLQListRun(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		tm        ttyMode
		fa        *fakeAdmin
		code      int
		golden    string
		stderrHas []string
	}{
		{name: "terminal", args: []string{"dlq", "list", "order:client-1"}, tm: onTTY, golden: "testdata/ops/dlq-list.tty.golden"},
		{name: "wide", args: []string{"dlq", "list", "order:client-1", "-o", "wide"}, tm: onTTY, golden: "testdata/ops/dlq-list.wide.golden"},
		{name: "pipe", args: []string{"dlq", "list", "order:client-1"}, tm: inPipe, golden: "testdata/ops/dlq-list.pipe.golden"},
		{name: "json", args: []string{"dlq", "list", "order:client-1", "-o", "json"}, tm: inPipe, golden: "testdata/ops/dlq-list.json.golden"},
		{name: "empty", args: []string{"dlq", "list", "order:client-1"}, tm: onTTY, fa: &fakeAdmin{dlq: []admin.DLQEntry{}}, stderrHas: []string{"The DLQ of order:client-1 is empty."}},
		{
			name: "not a partition", args: []string{"dlq", "list", "order"}, tm: inPipe, code: ExitUsage,
			fa: &fakeAdmin{dlqErr: admin.ErrInvalidStream}, stderrHas: []string{"invalid stream name"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa := tt.fa
			if fa == nil {
				fa = &fakeAdmin{dlq: sampleDLQ()}
			}
			r := runOps(t, fa, tt.tm, "", tt.args...)
			checkResult(t, r, tt.code, tt.golden, nil, tt.stderrHas)
		})
	}
}

func TestDLQReplayRun(t *testing.T) {
	plan := &admin.ReplayPlan{Entry: sampleDLQ()[0], Stream: "order:client-1"}
	done := &admin.ReplayResult{DLQID: "1738318000000-0", DLQStream: "order:client-1:dlq", EventID: sampleEnvelope().ID,
		Stream: "order:client-1", EntryID: "1738318100000-0", Removed: true, Outcome: admin.OutcomeOK}
	notRemoved := *done
	notRemoved.Removed, notRemoved.Warning = false, "re-published, but the DLQ entry was not removed: connection reset"
	replay := []string{"dlq", "replay", "order:client-1", "--id", "1738318000000-0"}
	with := func(more ...string) []string { return append(append([]string(nil), replay...), more...) }
	tests := []struct {
		name       string
		args       []string
		tm         ttyMode
		stdin      string
		fa         *fakeAdmin
		code       int
		golden     string
		stdoutHas  []string
		stderrHas  []string
		replays    int
		wantRecord string
	}{
		{
			name: "replay with --yes", args: with("--yes"), tm: inPipe, replays: 1,
			stdoutHas: []string{"at the tail of order:client-1", "its position changed", "Removed 1738318000000-0 from order:client-1:dlq."},
		},
		{name: "json", args: with("--yes", "-o", "json"), tm: inPipe, replays: 1, golden: "testdata/ops/dlq-replay.json.golden"},
		{
			name: "not removed", args: with("--yes"), tm: inPipe, replays: 1, fa: &fakeAdmin{plan: plan, replay: &notRemoved},
			stdoutHas: []string{"is still in order:client-1:dlq: do not replay it again"}, stderrHas: []string{"warning: re-published, but"},
		},
		{
			name: "no terminal and no --yes: exit 2", args: replay, tm: inPipe, code: ExitUsage,
			stderrHas: []string{"refusing to replay 1738318000000-0 without confirmation"}, wantRecord: admin.OutcomeRefused,
		},
		{
			name: "confirmed on a terminal", args: replay, tm: onTTY, stdin: "yes\n", replays: 1,
			stderrHas: []string{"goes to the TAIL of order:client-1", "every handler of order receives it again", "Replay it? [y/N]"},
		},
		{name: "declined", args: replay, tm: onTTY, stdin: "no\n", code: ExitFailure, wantRecord: admin.OutcomeDeclined},
		{name: "dry run", args: with("--dry-run"), tm: inPipe, stdoutHas: []string{"Would re-publish 1738318000000-0", "Nothing changed (--dry-run)."}},
		{
			name: "unknown entry: exit 3", args: with("--yes"), tm: inPipe, code: ExitNotFound,
			fa:         &fakeAdmin{planErr: &admin.NotFoundError{What: "DLQ entry", Name: "1-0 in order:client-1:dlq"}},
			stderrHas:  []string{"DLQ entry 1-0 in order:client-1:dlq not found"},
			wantRecord: admin.OutcomeNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa := tt.fa
			if fa == nil {
				fa = &fakeAdmin{plan: plan, replay: done}
			}
			r := runOps(t, fa, tt.tm, tt.stdin, tt.args...)
			checkResult(t, r, tt.code, tt.golden, tt.stdoutHas, tt.stderrHas)
			if fa.replays != tt.replays {
				t.Errorf("%d replays, want %d", fa.replays, tt.replays)
			}
			var outcomes []string
			for _, rec := range fa.records {
				outcomes = append(outcomes, rec.Outcome)
			}
			var want []string
			if tt.wantRecord != "" {
				want = []string{tt.wantRecord}
			}
			if diff := cmp.Diff(want, outcomes); diff != "" {
				t.Errorf("audit records (-want +got):\n%s", diff)
			}
		})
	}
}
