package audit

import (
	"testing"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
)

func TestAuditParse(t *testing.T) {
	cmdtest.ParseTable(t, "", NewCmd, []cmdtest.ParseCase[Options]{
		{Name: "everything", Want: Options{}},
		{Name: "hours", Argv: []string{"--since", "12h"}, Want: Options{Since: 12 * time.Hour}},
		{Name: "days and json", Argv: []string{"--since", "7d", "-o", "json"}, Want: Options{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Since: 7 * 24 * time.Hour}},
		{Name: "bad duration", Argv: []string{"--since", "yesterday"}, WantErr: `invalid value "yesterday" for --since`},
		{Name: "negative", Argv: []string{"--since", "-1h"}, WantErr: "must be positive"},
		{Name: "argument", Argv: []string{"order:c"}, WantErr: `unexpected argument "order:c"`},
		{Name: "limit, stream, outcome", Argv: []string{"--limit", "10", "--stream", "order:c", "--outcome", "head_moved"},
			Want: Options{Limit: 10, Stream: "order:c", Outcome: "head_moved"}},
		{Name: "-n", Argv: []string{"-n", "3"}, Want: Options{Limit: 3}},
		{Name: "negative limit", Argv: []string{"--limit", "-1"}, WantErr: `invalid value -1 for --limit`},
		{Name: "unknown outcome", Argv: []string{"--outcome", "moved"}, WantErr: `invalid value "moved" for --outcome: want one of ok, head_moved`},
	}, cmdtest.IgnoreOpsInputs(Options{}))
}

func TestAuditRun(t *testing.T) {
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{Audit: cmdtest.SampleAudit()} }, []cmdtest.RunCase{
		{Name: "terminal", Args: []string{"audit"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/audit.tty.golden"},
		{Name: "wide", Args: []string{"audit", "-o", "wide"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/audit.wide.golden"},
		{Name: "pipe", Args: []string{"audit"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/audit.pipe.golden"},
		{Name: "json since", Args: []string{"audit", "--since", "90m", "-o", "json"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/audit.json.golden", Query: admin.AuditQuery{Since: 90 * time.Minute}},
		{Name: "filters reach the admin", Args: []string{"audit", "--limit", "5", "--stream", "order:client-1", "--outcome", "ok"}, TTY: cmdtest.InPipe,
			Query: admin.AuditQuery{Limit: 5, Stream: "order:client-1", Outcome: "ok"}},
		{Name: "nothing", Args: []string{"audit"}, TTY: cmdtest.OnTTY, FA: &cmdtest.FakeAdmin{}, StderrHas: []string{"No operator actions recorded."}},
	})
}
