// Package root is the seqctl command line: the root command, which only adds the
// commands. Each command lives in a package named after its noun under
// cmd/seqctl/internal (partitions, head, dlq, publish, run, ...), with an options struct,
// a NewCmd constructor and its run function, over cmdutil (the Factory, IOStreams,
// output, exit codes, confirmation and audit, pacing) and redisconn (the connection to
// Redis).
package root

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/audit"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/completion"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/dev"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/dlq"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/exporter"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/groups"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/head"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/inbox"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/limits"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/outbox"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/partitions"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/publish"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/run"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/top"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/validate"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/verify"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/version"
)

// Main runs seqctl with args (without the program name) and returns the process exit
// code. Errors are printed here, once, to ios.ErrOut.
func Main(args []string, ios *cmdutil.IOStreams) int {
	f := &cmdutil.Factory{IOStreams: ios, Build: version.LinkedBuildInfo()}
	return execute(context.Background(), f, args)
}

func newCmdRoot(f *cmdutil.Factory) *cobra.Command {
	cmd := cmdutil.NewRoot(f,
		validate.NewCmd(f, nil),
		version.NewCmd(f, nil),
		run.NewCmd(f, nil),
		publish.NewCmd(f, nil),
		partitions.NewCmd(f),
		head.NewCmd(f),
		dlq.NewCmd(f),
		audit.NewCmd(f, nil),
		groups.NewCmd(f),
		limits.NewCmd(f),
		completion.NewCmd(f, nil),
		top.NewCmd(f, nil),
		dev.NewCmd(f, nil),
		outbox.NewCmd(f),
		inbox.NewCmd(f),
		outbox.NewCmdRelay(f),
		exporter.NewCmd(f, nil),
		verify.NewCmd(f),
	)
	version.AddVersionFlag(cmd, f)
	return cmd
}

// execute runs seqctl with args (without the program name) and returns the process exit
// code.
func execute(ctx context.Context, f *cmdutil.Factory, args []string) int {
	return cmdutil.Execute(ctx, f, newCmdRoot(f), args)
}
