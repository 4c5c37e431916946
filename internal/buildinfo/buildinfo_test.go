package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(version string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/seqctl/seqctl", Version: version}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	tests := []struct {
		name                  string
		version, commit, date string
		read                  func() (*debug.BuildInfo, bool)
		want                  Info
	}{
		{name: "ldflags win", version: "v0.3.0", commit: "1a2b3c4", date: "2025-01-31T10:00:00Z",
			read: vcs("v9.9.9", "vcs.revision", "ffffffffffffffffffff"),
			want: Info{Version: "v0.3.0", Commit: "1a2b3c4", Date: "2025-01-31T10:00:00Z"}},
		{name: "go install module@version", version: "dev", commit: "none", date: "unknown",
			read: vcs("v0.4.1"), want: Info{Version: "v0.4.1", Commit: "unknown", Date: "unknown"}},
		{name: "go build in a clone: pseudo-version and VCS stamp", version: "dev", commit: "none", date: "unknown",
			read: vcs("v0.0.0-20261201023649-8088f6268a0c", "vcs", "git", "vcs.revision", "8088f6268a0c8b59bfeaff6745e3ad61ddd97dc7",
				"vcs.time", "2026-12-01T02:36:49Z", "vcs.modified", "false"),
			want: Info{Version: "v0.0.0-20261201023649-8088f6268a0c", Commit: "8088f6268a0c", Date: "2026-12-01T02:36:49Z"}},
		{name: "dirty tree, devel version", version: "dev", commit: "none", date: "unknown",
			read: vcs("(devel)", "vcs.revision", "8088f6268a0c8b59", "vcs.modified", "true"),
			want: Info{Version: "dev", Commit: "8088f6268a0c-dirty", Date: "unknown"}},
		{name: "nothing recorded", version: "dev", commit: "none", date: "unknown", read: none,
			want: Info{Version: "dev", Commit: "unknown", Date: "unknown"}},
		{name: "ldflags version only: VCS fills the rest", version: "v1.0.0", commit: "none", date: "unknown",
			read: vcs("(devel)", "vcs.revision", "abcdef012345678", "vcs.time", "2026-01-01T00:00:00Z"),
			want: Info{Version: "v1.0.0", Commit: "abcdef012345", Date: "2026-01-01T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolve(tt.version, tt.commit, tt.date, tt.read); got != tt.want {
				t.Errorf("resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}
