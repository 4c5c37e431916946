package root

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
)

// Every command that changes something records a refusal (here: no terminal and no
// --yes) with who ran it and what it was about, and says so on stderr when the audit
// log would not take the record; 'dlq replay --all' stays silent about it.
func TestMutatingCommandsRecordRefusals(t *testing.T) {
	two := append(cmdtest.SampleDLQ(), cmdtest.SampleDLQ()[0])
	two[1].ID = "1738318060000-0"
	plan := &admin.ReplayPlan{Entry: cmdtest.SampleDLQ()[0], Stream: "order:client-1"}
	tests := []struct {
		name   string
		args   []string
		fa     *cmdtest.FakeAdmin
		want   admin.AuditEntry // User and Host are checked apart
		warned bool
	}{
		{
			name: "head skip", args: []string{"head", "skip", "order:client-1", "--handler", "OrderProjector", "--force", "--reason", "OPS-1"},
			fa: &cmdtest.FakeAdmin{HeadAnswer: cmdtest.SampleHead()},
			want: admin.AuditEntry{Command: "head skip", Stream: "order:client-1", Handler: "OrderProjector", EntryID: cmdtest.PoisonID, Outcome: admin.OutcomeRefused, Reason: "OPS-1",
				Detail: "force; refusing to skip 1738317600000-0 without confirmation: stdin is not a terminal, pass --yes (and --expect-id 1738317600000-0 to be sure of the entry); nothing changed"},
			warned: true,
		},
		{
			name: "dlq replay", args: []string{"dlq", "replay", "order:client-1", "--id", "1738318000000-0"}, fa: &cmdtest.FakeAdmin{Plan: plan},
			want: admin.AuditEntry{Command: "dlq replay", Stream: "order:client-1", EntryID: "1738318000000-0", Outcome: admin.OutcomeRefused,
				Detail: "refusing to replay 1738318000000-0 without confirmation: stdin is not a terminal, pass --yes; nothing changed"},
			warned: true,
		},
		{
			name: "dlq replay --all", args: []string{"dlq", "replay", "order:client-1", "--all"}, fa: &cmdtest.FakeAdmin{DLQEntries: two},
			want: admin.AuditEntry{Command: "dlq replay", Stream: "order:client-1", Outcome: admin.OutcomeRefused, Detail: "--all: 2 entries; no terminal and no --yes"},
		},
		{
			name: "dlq purge", args: []string{"dlq", "purge", "order:client-1", "--through", "1738318060000-0"}, fa: &cmdtest.FakeAdmin{DLQEntries: two},
			want:   admin.AuditEntry{Command: "dlq purge", Stream: "order:client-1", EntryID: "1738318060000-0", Outcome: admin.OutcomeRefused, Detail: "no terminal and no --yes"},
			warned: true,
		},
		{
			name: "groups remove", args: []string{"groups", "remove", "Mailer", "--category", "order", "--reason", "OPS-7"}, fa: &cmdtest.FakeAdmin{GroupList: cmdtest.SampleGroups()},
			want: admin.AuditEntry{Command: "groups remove", Stream: "order", Handler: "Mailer", Outcome: admin.OutcomeRefused, Reason: "OPS-7",
				Detail: "no terminal and no --yes"},
			warned: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fa.RecordErr = errors.New("NOPERM")
			r := cmdtest.RunOps(t, tt.fa, cmdtest.InPipe, "", tt.args...)
			cmdtest.CheckResult(t, r, cmdutil.ExitUsage, "", nil, []string{"without confirmation"})
			if len(tt.fa.Records) != 1 {
				t.Fatalf("%d audit records, want 1: %+v", len(tt.fa.Records), tt.fa.Records)
			}
			got := tt.fa.Records[0]
			if got.User == "" || got.Host == "" {
				t.Errorf("the record does not say who: %+v", got)
			}
			got.User, got.Host = "", ""
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("audit record (-want +got):\n%s", diff)
			}
			const warning = "warning: the refused attempt was not recorded in the audit log: NOPERM"
			if warned := strings.Contains(r.Stderr, warning); warned != tt.warned {
				t.Errorf("warned = %v, want %v; stderr:\n%s", warned, tt.warned, r.Stderr)
			}
		})
	}
}
