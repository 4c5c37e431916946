package cmdutil

import (
	"context"

	"github.com/spf13/cobra"
)

// OpsOptions are the inputs every operator command (partitions, head, dlq, groups,
// audit) has: the streams and the admin opener it is built with, and what the global
// flags and the command line running it say. Each command's options embed them.
type OpsOptions struct {
	IO    *IOStreams
	Admin AdminOpener
	// Output is "", "table", "wide", "json" or "yaml" (-o).
	Output string
	// NoHeaders drops the table header (--no-headers).
	NoHeaders bool
	// Ctx is the command's context (tests cancel it to end a watch).
	Ctx context.Context
}

// OpsOptions returns the inputs of an operator command built by f.
func (f *Factory) OpsOptions() OpsOptions {
	return OpsOptions{IO: f.IOStreams, Admin: f.openAdmin}
}

// Ops returns o, which the options of every operator command embed.
func (o *OpsOptions) Ops() *OpsOptions { return o }

// Layout is what -o and --no-headers say about tables.
func (o *OpsOptions) Layout() tableLayout {
	return tableLayout{Output: o.Output, NoHeaders: o.NoHeaders}
}

// opsCommand is the options of an operator command.
type opsCommand interface{ Ops() *OpsOptions }

// OpsRunE is the RunE of an operator command whose options are opts. It takes -o,
// --no-headers and the command's context into them and checks -o; then prepare (nil:
// nothing to do) takes the arguments and checks the command's own flags; then runF runs
// when a test set it, else run, with the operator API connected (see RunWithAdmin).
func OpsRunE[O opsCommand](f *Factory, opts O, prepare func(cmd *cobra.Command, args []string) error,
	runF func(O) error, run func(context.Context, Admin, O) error) func(*cobra.Command, []string) error {
	return RunE(opts, func(cmd *cobra.Command, args []string) error {
		o := opts.Ops()
		o.Output, o.NoHeaders, o.Ctx = f.Global.Output, f.Global.NoHeaders, cmd.Context()
		if err := CheckFormat(cmd, o.Output); err != nil {
			return err
		}
		if prepare == nil {
			return nil
		}
		return prepare(cmd, args)
	}, runF, func(context.Context, O) error { return RunWithAdmin(opts, run) })
}

// RunWithAdmin connects the operator API in the command's context, or in
// context.Background() when it has none (a test calling RunWithAdmin), runs run with
// it and closes it. An error connecting comes with its exit code.
func RunWithAdmin[O opsCommand](opts O, run func(context.Context, Admin, O) error) error {
	o := opts.Ops()
	ctx := OrBackground(o.Ctx)
	adm, closeAdm, err := o.Admin(ctx)
	if err != nil {
		return ExitFor(err)
	}
	defer closeAdm()
	return run(ctx, adm, opts)
}

// TakeStream is the prepare step (see OpsRunE) of a command whose one argument is
// STREAM: it keeps it in stream.
func TakeStream(stream *string) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error {
		*stream = args[0]
		return nil
	}
}
