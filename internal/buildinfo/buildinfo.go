// Package buildinfo holds the version stamped into the binary at build time with
// -ldflags "-X github.com/seqctl/seqctl/internal/buildinfo.Version=...".
package buildinfo

// Set by the linker; the defaults mark a development build.
var (
	Version = "dev"
	Commit  = "none"
	Date    = "unknown"
)
