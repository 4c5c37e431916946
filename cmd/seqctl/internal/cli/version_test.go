package cli

import (
	"strings"
	"testing"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seqctl/seqctl/internal/buildinfo"
)

func TestVersionParse(t *testing.T) {
	tests := []parseCase[VersionOptions]{
		{name: "text", argv: nil, want: VersionOptions{Build: testBuild}},
		{name: "json", argv: []string{"-o", "json"}, want: VersionOptions{Build: testBuild, Output: "json"}},
		{name: "unknown output", argv: []string{"--output", "xml"}, wantErr: `invalid value "xml" for --output`},
		{name: "argument", argv: []string{"now"}, wantErr: `unexpected argument "now"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := cmdutil.NewTestIOStreams()
			var got *VersionOptions
			cmd := newCmdVersion(&cmdutil.Factory{IOStreams: ios, Build: testBuild}, func(o *VersionOptions) error { got = o; return nil })
			checkParsed(t, parseCmd(t, cmd, tt.argv...), got, tt.want, tt.wantErr, cmpopts.IgnoreFields(VersionOptions{}, "IO"))
		})
	}
}

func TestVersionRun(t *testing.T) {
	tests := []struct {
		name   string
		output string
		want   string
	}{
		{
			name: "text",
			want: "seqctl v1.2.3 (commit abc1234, built 2025-01-31T10:00:00Z, go1.26.0 linux/amd64)\n",
		},
		{
			name:   "json",
			output: "json",
			want: `{
  "version": "v1.2.3",
  "commit": "abc1234",
  "date": "2025-01-31T10:00:00Z",
  "go": "go1.26.0",
  "platform": "linux/amd64"
}
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, out, errOut := cmdutil.NewTestIOStreams()
			err := versionRun(&VersionOptions{IO: ios, Build: testBuild, Output: tt.output, GoVersion: "go1.26.0", Platform: "linux/amd64"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("stdout mismatch (-want +got):\n%s", diff)
			}
			if errOut.Len() > 0 {
				t.Errorf("stderr = %q, want nothing", errOut.String())
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	r := runCLI(t, false, "version")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "seqctl v1.2.3 (commit abc1234, built 2025-01-31T10:00:00Z, go") {
		t.Errorf("seqctl version: code %d, stdout %q", r.Code, r.Stdout)
	}
}

func TestVersionFlag(t *testing.T) {
	r := runCLI(t, false, "--version")
	want := runCLI(t, false, "version")
	if r.Code != 0 || r.Stdout != want.Stdout || r.Stderr != "" {
		t.Errorf("seqctl --version: code %d, stdout %q, stderr %q; want exit 0 and %q", r.Code, r.Stdout, r.Stderr, want.Stdout)
	}
}

func TestLinkedBuildInfo(t *testing.T) {
	saved := [3]string{buildinfo.Version, buildinfo.Commit, buildinfo.Date}
	t.Cleanup(func() { buildinfo.Version, buildinfo.Commit, buildinfo.Date = saved[0], saved[1], saved[2] })

	buildinfo.Version, buildinfo.Commit, buildinfo.Date = "v9.9.9", "deadbee", "2030-01-01"
	if diff := cmp.Diff(cmdutil.BuildInfo{Version: "v9.9.9", Commit: "deadbee", Date: "2030-01-01"}, linkedBuildInfo()); diff != "" {
		t.Errorf("-ldflags values mismatch (-want +got):\n%s", diff)
	}
	buildinfo.Version, buildinfo.Commit, buildinfo.Date = "dev", "none", "unknown"
	if got := linkedBuildInfo(); got.Version == "" || got.Commit == "" || got.Date == "" || got.Commit == "none" {
		t.Errorf("development build info has an empty field or the linker's placeholder: %+v", got)
	}
}
