package cli

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// BuildInfo is the version stamped into the binary (see internal/buildinfo and the
// Makefile's LDFLAGS).
type BuildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Date    string `json:"date"`
}

// VersionOptions are the inputs of 'seqctl version'.
type VersionOptions struct {
	IO     *IOStreams
	Build  BuildInfo
	Output string // "" or "json"
	// GoVersion and Platform default to the running binary's.
	GoVersion string
	Platform  string
}

func newCmdVersion(f *Factory, runF func(*VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{IO: f.IOStreams, Build: f.Build}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the seqctl version",
		Long: `Print the version, commit and build date of this seqctl binary, and the Go
version and platform it was built for. Include it in bug reports.`,
		Example: `  $ seqctl version
  seqctl v0.3.0 (commit 1a2b3c4, built 2025-01-31T10:00:00Z, go1.26.0 linux/amd64)

  $ seqctl version -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(cmd, opts.Output); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return versionRun(opts)
		},
	}
	outputFlag(cmd, &opts.Output)
	return cmd
}

func versionRun(opts *VersionOptions) error {
	goVersion, platform := opts.GoVersion, opts.Platform
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	if platform == "" {
		platform = runtime.GOOS + "/" + runtime.GOARCH
	}
	if opts.Output == "json" {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			BuildInfo
			Go       string `json:"go"`
			Platform string `json:"platform"`
		}{opts.Build, goVersion, platform})
	}
	_, err := fmt.Fprintf(opts.IO.Out, "seqctl %s (commit %s, built %s, %s %s)\n",
		opts.Build.Version, opts.Build.Commit, opts.Build.Date, goVersion, platform)
	return err
}
