// Package cli is the seqctl command line: one file per command (an options struct, a
// newCmdX constructor and an xRun function), all output through IOStreams, one exit-code
// table (exitcodes.go).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/pkg/config"
)

// Factory is what commands get from the outside world. Main builds the real one; tests
// build one over buffers.
type Factory struct {
	IOStreams *IOStreams
	// Build is the version stamped into the binary.
	Build BuildInfo
	// Global holds the global flags (--config, --redis-url, -o, --no-color), bound by
	// newCmdRoot.
	Global GlobalOptions
	// OpenAdmin connects the operator API; nil connects to Redis as the global flags
	// say. Tests set a fake.
	OpenAdmin AdminOpener
}

// Main runs seqctl with args (without the program name) and returns the process exit
// code. Errors are printed here, once, to ios.ErrOut.
func Main(args []string, ios *IOStreams) int {
	f := &Factory{IOStreams: ios, Build: linkedBuildInfo()}
	return run(context.Background(), f, args)
}

func run(ctx context.Context, f *Factory, args []string) int {
	root := newCmdRoot(f)
	if args == nil {
		args = []string{} // cobra reads os.Args for nil
	}
	root.SetArgs(args)
	root.SetIn(f.IOStreams.In)
	root.SetOut(f.IOStreams.Out)
	root.SetErr(f.IOStreams.ErrOut)
	err := root.ExecuteContext(ctx)
	if err != nil && strings.HasPrefix(err.Error(), "unknown command ") {
		err = &UsageError{Command: root.Name(), Err: err}
	}
	printError(f.IOStreams.ErrOut, err)
	return ExitCode(err)
}

// printError prints err for a person: a config error as its "FILE:LINE: PATH: message"
// lines, a usage error with a pointer to --help, anything else prefixed with "seqctl:".
func printError(w io.Writer, err error) {
	if err == nil {
		return
	}
	var ee *ExitError
	if errors.As(err, &ee) && ee.Err == nil {
		return
	}
	var ce *config.Error
	if errors.As(err, &ce) {
		fmt.Fprintln(w, ce.Error())
		return
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "seqctl: %s\nRun '%s --help' for usage.\n", strings.TrimRight(ue.Error(), "\n"), ue.Command)
		return
	}
	switch {
	case permissionProblem(err) != "" && !strings.Contains(err.Error(), securityDoc): // else explained already
		fmt.Fprintf(w, "seqctl: %s\n", permissionProblem(err))
	case tlsProblem(err, "") != "":
		fmt.Fprintf(w, "seqctl: %s\n", tlsProblem(err, ""))
	case clusterNodeProblem(err, "") != "":
		fmt.Fprintf(w, "seqctl: %s\n", clusterNodeProblem(err, ""))
	default:
		fmt.Fprintf(w, "seqctl: %s\n", err)
	}
}

func newCmdRoot(f *Factory) *cobra.Command {
	cmd := newRootCommand()
	cmd.AddCommand(
		newCmdValidate(f, nil),
		newCmdVersion(f, nil),
		newCmdRun(f, nil),
		newCmdPublish(f, nil),
		newCmdPartitions(f),
		newCmdHead(f),
		newCmdDLQ(f),
		newCmdAudit(f, nil),
		newCmdGroups(f),
		newCmdLimits(f),
		newCmdCompletion(f, nil),
		newCmdTop(f, nil),
		newCmdDev(f, nil),
		newCmdOutbox(f),
		newCmdInbox(f),
		newCmdRelay(f),
		newCmdExporter(f, nil),
	)
	addGlobalFlags(cmd, f)
	addVersionFlag(cmd, f)
	return cmd
}

// newRootCommand is the bare "seqctl" command: help text, silenced cobra output (run
// prints errors, once) and flag errors turned into usage errors.
func newRootCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "seqctl <command> [flags]",
		Short: "Per-key ordered event processing on Redis Streams",
		Long: `seqctl runs and operates per-key ordered event processing on Redis Streams.

A handler declared with sequential_by gets a per-key ordering guarantee: two events
with the same partition key are never processed at the same time, and their effects
land in publish order; events with different keys run in parallel. The domain (events,
commands, handlers, process managers, broker and timing) is declared in domain.toml.

Start with 'seqctl validate' to check a domain.toml and see how each category is
partitioned.

Exit codes:
  0  ok
  1  error
  2  usage error, or an invalid domain.toml
  3  not found (partition, head entry, DLQ entry)
  4  conflict (the head moved since you looked, or the caller was fenced)`,
		Example: `  # check a domain.toml and show its partitioning
  $ seqctl validate --config domain.toml

  # print the version as JSON
  $ seqctl version -o json`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// No Args: cobra's own check reports "unknown command" for a stray word, which
		// run turns into a usage error.
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Command: c.CommandPath(), Err: err}
	})
	return cmd
}

// runE is the RunE of a command whose inputs are opts and whose run function takes the
// command's context: prepare takes the command line into opts and checks it (an error
// stops the command), then runF runs when a test set it, else run.
func runE[O any](opts O, prepare func(cmd *cobra.Command, args []string) error,
	runF func(O) error, run func(context.Context, O) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := prepare(cmd, args); err != nil {
			return err
		}
		if runF != nil {
			return runF(opts)
		}
		return run(cmd.Context(), opts)
	}
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return usageErrorf(cmd.CommandPath(), "unexpected argument %q: %s takes no arguments", args[0], cmd.CommandPath())
}

// outputFlag registers -o/--output; "" is the human format.
func outputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", "", "output format: json or yaml")
}

// checkOutput validates the -o value.
func checkOutput(cmd *cobra.Command, v string) error {
	if v != "" && !structured(v) {
		return usageErrorf(cmd.CommandPath(), "invalid value %q for --output: want json or yaml (omit -o for text)", v)
	}
	return nil
}
