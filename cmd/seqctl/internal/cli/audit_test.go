package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestAuditParse(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		want    AuditOptions
		wantErr string
	}{
		{name: "everything", want: AuditOptions{}},
		{name: "hours", argv: []string{"--since", "12h"}, want: AuditOptions{Since: 12 * time.Hour}},
		{name: "days and json", argv: []string{"--since", "7d", "-o", "json"}, want: AuditOptions{Since: 7 * 24 * time.Hour, Output: "json"}},
		{name: "bad duration", argv: []string{"--since", "yesterday"}, wantErr: `invalid value "yesterday" for --since`},
		{name: "negative", argv: []string{"--since", "-1h"}, wantErr: "must be positive"},
		{name: "argument", argv: []string{"order:c"}, wantErr: `unexpected argument "order:c"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testFactory()
			var got *AuditOptions
			err := parseOps(t, f, "", newCmdAudit(f, func(o *AuditOptions) error { got = o; return nil }), tt.argv...)
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
			if diff := cmp.Diff(tt.want, *got, cmpopts.IgnoreFields(AuditOptions{}, "IO", "Admin", "Ctx")); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAuditRun(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		tm        ttyMode
		fa        *fakeAdmin
		golden    string
		stderrHas []string
		since     time.Duration
	}{
		{name: "terminal", args: []string{"audit"}, tm: onTTY, golden: "testdata/ops/audit.tty.golden"},
		{name: "wide", args: []string{"audit", "-o", "wide"}, tm: onTTY, golden: "testdata/ops/audit.wide.golden"},
		{name: "pipe", args: []string{"audit"}, tm: inPipe, golden: "testdata/ops/audit.pipe.golden"},
		{name: "json since", args: []string{"audit", "--since", "90m", "-o", "json"}, tm: inPipe, golden: "testdata/ops/audit.json.golden", since: 90 * time.Minute},
		{name: "nothing", args: []string{"audit"}, tm: onTTY, fa: &fakeAdmin{}, stderrHas: []string{"No operator actions recorded."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa := tt.fa
			if fa == nil {
				fa = &fakeAdmin{audit: sampleAudit()}
			}
			r := runOps(t, fa, tt.tm, "", tt.args...)
			checkResult(t, r, 0, tt.golden, nil, tt.stderrHas)
			if fa.auditSince != tt.since {
				t.Errorf("since = %v, want %v", fa.auditSince, tt.since)
			}
		})
	}
}
