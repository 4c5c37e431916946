package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func newCmdDLQ(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq <command>",
		Short: "List and replay a partition's dead-letter entries",
		Long: `List and replay the entries of a partition's dead-letter stream,
{category}:{key}:dlq. Only an operator's 'seqctl head dlq' writes it: each entry is the
original envelope plus why the partition halted on it (error, attempts, since, lane),
the handler, who moved it, when and why.`,
		Example: `  $ seqctl dlq list order:client-123
  $ seqctl dlq replay order:client-123 --id 1718000000123-0 --yes`,
		Args: cobra.ArbitraryArgs,
		RunE: groupCommand,
	}
	cmd.AddCommand(newCmdDLQList(f, nil), newCmdDLQReplay(f, nil))
	return cmd
}

// DLQListOptions are the inputs of 'seqctl dlq list'.
type DLQListOptions struct {
	IO     *IOStreams
	Admin  AdminOpener
	Output string
	// NoHeaders drops the table header (--no-headers).
	NoHeaders bool
	Stream    string
	Ctx       context.Context
}

func newCmdDLQList(f *Factory, runF func(*DLQListOptions) error) *cobra.Command {
	opts := &DLQListOptions{IO: f.IOStreams, Admin: f.openAdmin}
	cmd := &cobra.Command{
		Use:   "list STREAM",
		Short: "List a partition's dead-letter entries with their errors",
		Long: `List the entries of a partition's dead-letter stream, oldest first: the DLQ entry
id, the original entry id, the handler that halted on it, the event type and id, the
attempts, when and by whom it was moved, and the error. -o wide adds the lane and the
reason; -o json prints everything, the envelope and payload included.

STREAM is the partition ({category}:{key}) or its DLQ ({category}:{key}:dlq).`,
		Example: `  $ seqctl dlq list order:client-123

  # the payloads, for a script
  $ seqctl dlq list order:client-123 -o json | jq '.[].envelope.data'`,
		Args:              streamArg,
		ValidArgsFunction: completeStreams(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Output, opts.NoHeaders, opts.Ctx, opts.Stream = f.Global.Output, f.Global.NoHeaders, cmd.Context(), args[0]
			if err := checkFormat(cmd, opts.Output); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return dlqListRun(opts)
		},
	}
	return cmd
}

func dlqListRun(opts *DLQListOptions) error {
	ctx := orBackground(opts.Ctx)
	adm, closeAdm, err := opts.Admin(ctx)
	if err != nil {
		return exitFor(err)
	}
	defer closeAdm()
	entries, err := adm.DLQ(ctx, opts.Stream)
	if err != nil {
		return exitFor(err)
	}
	ios := opts.IO
	if structured(opts.Output) {
		if entries == nil {
			entries = []admin.DLQEntry{} // always an array
		}
		return writeData(ios.Out, opts.Output, entries)
	}
	if len(entries) == 0 {
		if ios.IsTerminal {
			fmt.Fprintf(ios.ErrOut, "The DLQ of %s is empty.\n", opts.Stream)
		}
		return nil
	}
	header := []string{"ID", "ORIGINAL ID", "HANDLER", "TYPE", "EVENT ID", "ATTEMPTS", "MOVED AT", "MOVED BY"}
	if opts.Output == "wide" {
		header = append(header, "LANE", "REASON")
	}
	t := newTable(ios, tableLayout{Output: opts.Output, NoHeaders: opts.NoHeaders}, append(header, "ERROR")...)
	for _, e := range entries {
		row := []string{e.ID, orDash(e.OriginalID), orDash(e.Handler), orDash(e.Envelope.Type), orDash(e.Envelope.ID),
			strconv.Itoa(e.Attempts), fmtTime(e.MovedAt), orDash(e.MovedBy)}
		if opts.Output == "wide" {
			row = append(row, orDash(e.Lane), orDash(e.Reason))
		}
		t.AddRow(append(row, firstLine(orDash(e.Error), 80))...)
	}
	return t.Render(ios.Out)
}

// DLQReplayOptions are the inputs of 'seqctl dlq replay'.
type DLQReplayOptions struct {
	IO     *IOStreams
	Admin  AdminOpener
	Output string
	Stream string
	ID     string
	Yes    bool
	DryRun bool
	Ctx    context.Context
}

func newCmdDLQReplay(f *Factory, runF func(*DLQReplayOptions) error) *cobra.Command {
	opts := &DLQReplayOptions{IO: f.IOStreams, Admin: f.openAdmin}
	cmd := &cobra.Command{
		Use:   "replay STREAM --id ID [--yes] [--dry-run]",
		Short: "Re-publish a DLQ entry at the tail of its partition, then remove it from the DLQ",
		Long: `Re-publish the event of a DLQ entry at the TAIL of its partition, then remove the
entry from the DLQ.

This changes the event's position: it was before every later event of its key, and now
comes after everything published before the replay. Replay only an event whose order
no longer matters. It keeps its event id (so idempotent handlers recognise it) and goes
to the lane it halted on (the backfill lane for a backfill event). It is a new entry of
the partition stream, so EVERY handler of the category receives it again, not only the
one that halted on it.

The publish and the removal are two steps: when the removal fails, the event was
re-published and the entry is still in the DLQ (you are told; do not replay it again).
On a terminal you are asked to confirm; without one, --yes is required (otherwise exit
status 2 and nothing changes). Exit status 3 when the entry is not in the DLQ.`,
		Example: `  $ seqctl dlq list order:client-123
  $ seqctl dlq replay order:client-123 --id 1718000000123-0 --yes

  # where it would go, changing nothing
  $ seqctl dlq replay order:client-123 --id 1718000000123-0 --dry-run`,
		Args:              streamArg,
		ValidArgsFunction: completeStreams(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Output, opts.Ctx, opts.Stream = f.Global.Output, cmd.Context(), args[0]
			if err := checkFormat(cmd, opts.Output); err != nil {
				return err
			}
			if opts.ID == "" {
				return usageErrorf(cmd.CommandPath(), "--id is required: the DLQ entry id to replay (see 'seqctl dlq list %s')", opts.Stream)
			}
			if err := checkEntryID(cmd.CommandPath(), "--id", opts.ID); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return dlqReplayRun(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.ID, "id", "", "the DLQ entry id to replay (required)")
	fl.BoolVarP(&opts.Yes, "yes", "y", false, "do not ask for confirmation (required without a terminal)")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "print what would happen; change nothing")
	_ = cmd.RegisterFlagCompletionFunc("id", completeDLQIDs(f))
	return cmd
}

func dlqReplayRun(opts *DLQReplayOptions) error {
	ctx := orBackground(opts.Ctx)
	ios := opts.IO
	adm, closeAdm, err := opts.Admin(ctx)
	if err != nil {
		return exitFor(err)
	}
	defer closeAdm()
	who := actor("dlq replay")
	refuse := func(outcome string, err error) error {
		if opts.DryRun {
			return err
		}
		rec := admin.AuditEntry{User: who.User, Host: who.Host, Command: who.Command, Stream: opts.Stream,
			EntryID: opts.ID, Outcome: outcome, Detail: err.Error()}
		if aerr := adm.Record(ctx, rec); aerr != nil {
			fmt.Fprintf(ios.ErrOut, "warning: the refused attempt was not recorded in the audit log: %v\n", aerr)
		}
		return err
	}
	plan, err := adm.PlanReplay(ctx, opts.Stream, opts.ID)
	if err != nil {
		return refuse(admin.OutcomeOf(err), exitFor(err))
	}
	e := plan.Entry
	if opts.DryRun {
		if structured(opts.Output) {
			return writeData(ios.Out, opts.Output, struct {
				*admin.ReplayPlan
				DryRun bool `json:"dry_run"`
			}{plan, true})
		}
		fmt.Fprintf(ios.Out, "Would re-publish %s (%s, event %s, originally %s) at the tail of %s and remove it from %s. Nothing changed (--dry-run).\n",
			e.ID, orDash(e.Envelope.Type), orDash(e.Envelope.ID), orDash(e.OriginalID), plan.Stream, e.DLQStream)
		return nil
	}
	if !opts.Yes {
		if !ios.InIsTerminal {
			return refuse(admin.OutcomeRefused, usageErrorf("seqctl dlq replay",
				"refusing to replay %s without confirmation: stdin is not a terminal, pass --yes; nothing changed", e.ID))
		}
		fmt.Fprintf(ios.ErrOut, "%s (%s, event %s) goes to the TAIL of %s: after everything published before now, and every handler of %s receives it again.\n",
			e.ID, orDash(e.Envelope.Type), orDash(e.Envelope.ID), plan.Stream, orDash(e.Envelope.Category))
		ok, err := confirm(ios, "Replay it?")
		if err != nil {
			return err
		}
		if !ok {
			return refuse(admin.OutcomeDeclined, errors.New("cancelled; nothing changed"))
		}
	}
	res, err := adm.Replay(ctx, opts.Stream, opts.ID, who)
	if errors.Is(err, engine.ErrRedisUnavailable) {
		return fmt.Errorf("%w\nthe connection failed during the replay: the event may have been re-published; check 'seqctl dlq list %s' and the partition before replaying again",
			err, opts.Stream)
	}
	if err != nil {
		return exitFor(err)
	}
	if res.Warning != "" {
		fmt.Fprintf(ios.ErrOut, "warning: %s\n", res.Warning)
	}
	if structured(opts.Output) {
		return writeData(ios.Out, opts.Output, res)
	}
	fmt.Fprintf(ios.Out, "%s Replayed %s as %s at the tail of %s (event %s): its position changed, it now follows everything published before the replay.\n",
		ios.Green("✓"), res.DLQID, res.EntryID, res.Stream, res.EventID)
	if res.Removed {
		fmt.Fprintf(ios.Out, "  Removed %s from %s.\n", res.DLQID, res.DLQStream)
	} else {
		fmt.Fprintf(ios.Out, "  %s is still in %s: do not replay it again.\n", res.DLQID, res.DLQStream)
	}
	return nil
}
