// Package cmdutil is what the seqctl commands share: the Factory a command is built with,
// its IOStreams, the global flags, the operator API (Admin), output formats and tables,
// exit codes, the guarded action with its confirmation and audit records, the selection
// of partitions, pacing and progress, and the shell completions of streams, handlers and
// categories. Each command lives in a package of its own under cmd/seqctl/internal.
package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/pkg/config"
)

// Factory is what commands get from the outside world. Main builds the real one; tests
// build one over buffers.
type Factory struct {
	IOStreams *IOStreams
	// Build is the version stamped into the binary.
	Build BuildInfo
	// Global holds the global flags (--config, --redis-url, -o, --no-color), bound by
	// AddGlobalFlags.
	Global GlobalOptions
	// OpenAdmin connects the operator API; nil connects to Redis as the global flags
	// say. Tests set a fake.
	OpenAdmin AdminOpener
}

// Execute runs root, a root command built by f, with args (without the program name) and
// returns the process exit code. Errors are printed here, once, to f's ErrOut.
func Execute(ctx context.Context, f *Factory, root *cobra.Command, args []string) int {
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
	PrintError(f.IOStreams.ErrOut, err)
	return ExitCode(err)
}

// PrintError prints err for a person: a config error as its "FILE:LINE: PATH: message"
// lines, a usage error with a pointer to --help, anything else prefixed with "seqctl:".
func PrintError(w io.Writer, err error) {
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
	case redisconn.PermissionProblem(err) != "" && !strings.Contains(err.Error(), redisconn.SecurityDoc): // else explained already
		fmt.Fprintf(w, "seqctl: %s\n", redisconn.PermissionProblem(err))
	case redisconn.TLSProblem(err, "") != "":
		fmt.Fprintf(w, "seqctl: %s\n", redisconn.TLSProblem(err, ""))
	case redisconn.ClusterNodeProblem(err, "") != "":
		fmt.Fprintf(w, "seqctl: %s\n", redisconn.ClusterNodeProblem(err, ""))
	default:
		fmt.Fprintf(w, "seqctl: %s\n", err)
	}
}

// NewRootCommand is the bare "seqctl" command: help text, silenced cobra output (run
// prints errors, once) and flag errors turned into usage errors.
func NewRootCommand() *cobra.Command {
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

// NewRoot is the root command with the global flags and cmds, the commands of seqctl.
func NewRoot(f *Factory, cmds ...*cobra.Command) *cobra.Command {
	cmd := NewRootCommand()
	cmd.AddCommand(cmds...)
	AddGlobalFlags(cmd, f)
	return cmd
}

// RunE is the RunE of a command whose inputs are opts and whose run function takes the
// command's context: prepare takes the command line into opts and checks it (an error
// stops the command), then runF runs when a test set it, else run.
func RunE[O any](opts O, prepare func(cmd *cobra.Command, args []string) error,
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

// NoArgs rejects positional arguments as a usage error.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return UsageErrorf(cmd.CommandPath(), "unexpected argument %q: %s takes no arguments", args[0], cmd.CommandPath())
}

// OutputFlag registers -o/--output; "" is the human format.
func OutputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", "", "output format: json or yaml")
}

// CheckOutput validates the -o value.
func CheckOutput(cmd *cobra.Command, v string) error {
	if v != "" && !Structured(v) {
		return UsageErrorf(cmd.CommandPath(), "invalid value %q for --output: want json or yaml (omit -o for text)", v)
	}
	return nil
}

// BuildInfo is the version stamped into the binary (see internal/buildinfo and the
// Makefile's LDFLAGS).
type BuildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Date    string `json:"date"`
}

// OrBackground is ctx, or context.Background() when ctx is nil.
func OrBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// StreamArg checks the single STREAM argument.
var StreamArg = OneArg("STREAM", "", "order:client-123")

// OneArg checks that a command gets exactly one argument, name: a missing one is a usage
// error that says what it is (what, when not "") and shows the command with example
// (when not "").
func OneArg(name, what, example string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch len(args) {
		case 1:
			return nil
		case 0:
			msg := "missing the " + name + " argument"
			if what != "" {
				msg += ": " + what
			}
			if example != "" {
				msg += ", e.g. " + cmd.CommandPath() + " " + example
			}
			return UsageErrorf(cmd.CommandPath(), "%s", msg)
		}
		return UsageErrorf(cmd.CommandPath(), "unexpected argument %q: %s takes one %s", args[1], cmd.CommandPath(), name)
	}
}

// GroupOf makes cmd a command that only groups subs: any arguments reach its RunE,
// groupCommand.
func GroupOf(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.Args, cmd.RunE = cobra.ArbitraryArgs, groupCommand
	cmd.AddCommand(subs...)
	return cmd
}

// groupCommand is the RunE of a command that only groups subcommands: help without
// arguments, a usage error for an unknown subcommand.
func groupCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	names := []string{}
	for _, c := range cmd.Commands() {
		names = append(names, c.Name())
	}
	return UsageErrorf(cmd.CommandPath(), "unknown command %q for %q (commands: %s)", args[0], cmd.CommandPath(), strings.Join(names, ", "))
}

func CmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
