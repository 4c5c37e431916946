package cli

import (
	"testing"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"

	"github.com/seqctl/seqctl/pkg/admin"
)

func TestAuditParse(t *testing.T) {
	testParse(t, "", newCmdAudit, []parseCase[AuditOptions]{
		{name: "everything", want: AuditOptions{}},
		{name: "hours", argv: []string{"--since", "12h"}, want: AuditOptions{Since: 12 * time.Hour}},
		{name: "days and json", argv: []string{"--since", "7d", "-o", "json"}, want: AuditOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Since: 7 * 24 * time.Hour}},
		{name: "bad duration", argv: []string{"--since", "yesterday"}, wantErr: `invalid value "yesterday" for --since`},
		{name: "negative", argv: []string{"--since", "-1h"}, wantErr: "must be positive"},
		{name: "argument", argv: []string{"order:c"}, wantErr: `unexpected argument "order:c"`},
		{name: "limit, stream, outcome", argv: []string{"--limit", "10", "--stream", "order:c", "--outcome", "head_moved"},
			want: AuditOptions{Limit: 10, Stream: "order:c", Outcome: "head_moved"}},
		{name: "-n", argv: []string{"-n", "3"}, want: AuditOptions{Limit: 3}},
		{name: "negative limit", argv: []string{"--limit", "-1"}, wantErr: `invalid value -1 for --limit`},
		{name: "unknown outcome", argv: []string{"--outcome", "moved"}, wantErr: `invalid value "moved" for --outcome: want one of ok, head_moved`},
	}, ignoreOpsInputs(AuditOptions{}))
}

func TestAuditRun(t *testing.T) {
	testRun(t, func() *fakeAdmin { return &fakeAdmin{audit: sampleAudit()} }, []runCase{
		{name: "terminal", args: []string{"audit"}, tm: onTTY, golden: "testdata/ops/audit.tty.golden"},
		{name: "wide", args: []string{"audit", "-o", "wide"}, tm: onTTY, golden: "testdata/ops/audit.wide.golden"},
		{name: "pipe", args: []string{"audit"}, tm: inPipe, golden: "testdata/ops/audit.pipe.golden"},
		{name: "json since", args: []string{"audit", "--since", "90m", "-o", "json"}, tm: inPipe, golden: "testdata/ops/audit.json.golden", query: admin.AuditQuery{Since: 90 * time.Minute}},
		{name: "filters reach the admin", args: []string{"audit", "--limit", "5", "--stream", "order:client-1", "--outcome", "ok"}, tm: inPipe,
			query: admin.AuditQuery{Limit: 5, Stream: "order:client-1", Outcome: "ok"}},
		{name: "nothing", args: []string{"audit"}, tm: onTTY, fa: &fakeAdmin{}, stderrHas: []string{"No operator actions recorded."}},
	})
}
