package version

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/buildinfo"
)

func TestVersionParse(t *testing.T) {
	tests := []cmdtest.ParseCase[Options]{
		{Name: "text", Argv: nil, Want: Options{Build: cmdtest.TestBuild}},
		{Name: "json", Argv: []string{"-o", "json"}, Want: Options{Build: cmdtest.TestBuild, Output: "json"}},
		{Name: "unknown output", Argv: []string{"--output", "xml"}, WantErr: `invalid value "xml" for --output`},
		{Name: "argument", Argv: []string{"now"}, WantErr: `unexpected argument "now"`},
	}
	for _, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			ios, _, _, _ := cmdutil.NewTestIOStreams()
			var got *Options
			cmd := NewCmd(&cmdutil.Factory{IOStreams: ios, Build: cmdtest.TestBuild}, func(o *Options) error { got = o; return nil })
			cmdtest.CheckParsed(t, cmdtest.ParseCmd(t, cmd, tt.Argv...), got, tt.Want, tt.WantErr, cmpopts.IgnoreFields(Options{}, "IO"))
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
			err := versionRun(&Options{IO: ios, Build: cmdtest.TestBuild, Output: tt.output, GoVersion: "go1.26.0", Platform: "linux/amd64"})
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
	r := cmdtest.RunCLI(t, false, "version")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "seqctl v1.2.3 (commit abc1234, built 2025-01-31T10:00:00Z, go") {
		t.Errorf("seqctl version: code %d, stdout %q", r.Code, r.Stdout)
	}
}

func TestVersionFlag(t *testing.T) {
	r := cmdtest.RunCLI(t, false, "--version")
	want := cmdtest.RunCLI(t, false, "version")
	if r.Code != 0 || r.Stdout != want.Stdout || r.Stderr != "" {
		t.Errorf("seqctl --version: code %d, stdout %q, stderr %q; want exit 0 and %q", r.Code, r.Stdout, r.Stderr, want.Stdout)
	}
}

func TestLinkedBuildInfo(t *testing.T) {
	saved := [3]string{buildinfo.Version, buildinfo.Commit, buildinfo.Date}
	t.Cleanup(func() { buildinfo.Version, buildinfo.Commit, buildinfo.Date = saved[0], saved[1], saved[2] })

	buildinfo.Version, buildinfo.Commit, buildinfo.Date = "v9.9.9", "deadbee", "2030-01-01"
	if diff := cmp.Diff(cmdutil.BuildInfo{Version: "v9.9.9", Commit: "deadbee", Date: "2030-01-01"}, LinkedBuildInfo()); diff != "" {
		t.Errorf("-ldflags values mismatch (-want +got):\n%s", diff)
	}
	buildinfo.Version, buildinfo.Commit, buildinfo.Date = "dev", "none", "unknown"
	if got := LinkedBuildInfo(); got.Version == "" || got.Commit == "" || got.Date == "" || got.Commit == "none" {
		t.Errorf("development build info has an empty field or the linker's placeholder: %+v", got)
	}
}
