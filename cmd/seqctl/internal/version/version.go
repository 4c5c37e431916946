// Package version is 'seqctl version' and the root's --version flag.
package version

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/buildinfo"
)

// Options are the inputs of 'seqctl version'.
type Options struct {
	IO     *cmdutil.IOStreams
	Build  cmdutil.BuildInfo
	Output string // "", "json" or "yaml"
	// GoVersion and Platform default to the running binary's.
	GoVersion string
	Platform  string
}

// NewCmd returns the 'seqctl version' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Build: f.Build}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the seqctl version",
		Long: `Print the version, commit and build date of this seqctl binary, and the Go
version and platform it was built for. Include it in bug reports.`,
		Example: `  $ seqctl version
  seqctl v0.3.0 (commit 1a2b3c4, built 2025-01-31T10:00:00Z, go1.26.0 linux/amd64)

  $ seqctl version -o json`,
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cmdutil.CheckOutput(cmd, opts.Output); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return versionRun(opts)
		},
	}
	cmdutil.OutputFlag(cmd, &opts.Output)
	return cmd
}

// LinkedBuildInfo returns the version stamped with -ldflags -X, else what the Go
// toolchain recorded: the module version of 'go install module@version', the VCS
// revision and time of a build from a clone (see internal/buildinfo).
func LinkedBuildInfo() cmdutil.BuildInfo {
	b := buildinfo.Get()
	return cmdutil.BuildInfo{Version: b.Version, Commit: b.Commit, Date: b.Date}
}

// AddVersionFlag gives the root command --version, printing what 'seqctl version'
// prints.
func AddVersionFlag(cmd *cobra.Command, f *cmdutil.Factory) {
	cmd.Version = versionLine(f.Build, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
	cmd.SetVersionTemplate("seqctl {{.Version}}\n")
	cmd.Flags().Bool("version", false, "print the version (as 'seqctl version' does) and exit")
}

// versionLine is the version as one line: "v0.3.0 (commit 1a2b3c4, built ..., go1.26 linux/amd64)".
func versionLine(b cmdutil.BuildInfo, goVersion, platform string) string {
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", b.Version, b.Commit, b.Date, goVersion, platform)
}

func versionRun(opts *Options) error {
	goVersion, platform := opts.GoVersion, opts.Platform
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	if platform == "" {
		platform = runtime.GOOS + "/" + runtime.GOARCH
	}
	if cmdutil.Structured(opts.Output) {
		return cmdutil.WriteData(opts.IO.Out, opts.Output, struct {
			cmdutil.BuildInfo
			Go       string `json:"go"`
			Platform string `json:"platform"`
		}{opts.Build, goVersion, platform})
	}
	_, err := fmt.Fprintf(opts.IO.Out, "seqctl %s\n", versionLine(opts.Build, goVersion, platform))
	return err
}
