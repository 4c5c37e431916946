// Package buildinfo holds the version stamped into the binary at build time with
// -ldflags "-X github.com/seqctl/seqctl/internal/buildinfo.Version=...", and falls back
// to what the Go toolchain records (runtime/debug.ReadBuildInfo) for a binary built by
// 'go install' or 'go build' without those flags.
package buildinfo

import "runtime/debug"

// Set by the linker; the defaults mark a development build.
var (
	Version = "dev"
	Commit  = "none"
	Date    = "unknown"
)

// Info is the version of the running binary.
type Info struct {
	// Version is the release ("v0.3.0"), the module version of 'go install
	// module@version', a pseudo-version the toolchain derived from VCS, or "dev".
	Version string
	// Commit is the VCS revision (12 characters, "-dirty" when the tree had local
	// changes), or "unknown".
	Commit string
	// Date is the build date (-ldflags) or the commit time (VCS), RFC 3339, or "unknown".
	Date string
}

// Get returns the version of the running binary: the -ldflags values where set, else
// what debug.ReadBuildInfo recorded.
func Get() Info { return resolve(Version, Commit, Date, debug.ReadBuildInfo) }

// resolve merges the linker values with the toolchain's record; read is
// debug.ReadBuildInfo in production.
func resolve(version, commit, date string, read func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: version, Commit: commit, Date: date}
	if in.Version == "" {
		in.Version = "dev"
	}
	if in.Commit == "" || in.Commit == "none" {
		in.Commit = "unknown"
	}
	if in.Date == "" {
		in.Date = "unknown"
	}
	bi, ok := read()
	if !ok || bi == nil {
		return in
	}
	if v := bi.Main.Version; in.Version == "dev" && v != "" && v != "(devel)" {
		in.Version = v
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if in.Commit == "unknown" && rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "-dirty"
		}
		in.Commit = rev
	}
	if in.Date == "unknown" && at != "" {
		in.Date = at
	}
	return in
}
