// Package dlq is 'seqctl dlq': list, replay and purge dead-letter entries.
package dlq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// NewCmd returns the 'seqctl dlq' command with its subcommands.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	return cmdutil.GroupOf(&cobra.Command{
		Use:   "dlq <command>",
		Short: "List, replay and purge dead-letter entries",
		Long: `List and replay the entries of a partition's dead-letter stream,
{category}:{key}:dlq. Only an operator's 'seqctl head dlq' writes it: each entry is the
original envelope plus why the partition halted on it (error, attempts, since, lane),
the handler, who moved it, when and why.`,
		Example: `  $ seqctl dlq list
  $ seqctl dlq list order:client-123
  $ seqctl dlq replay order:client-123 --id 1718000000123-0 --yes
  $ seqctl dlq replay order:client-123 --all --rate 50/s --yes
  $ seqctl dlq purge order:client-123 --yes`,
	}, newCmdDLQList(f, nil), newCmdDLQReplay(f, nil), newCmdDLQPurge(f, nil))
}

// DLQListOptions are the inputs of 'seqctl dlq list'.
type DLQListOptions struct {
	cmdutil.OpsOptions
	Stream string
}

func newCmdDLQList(f *cmdutil.Factory, runF func(*DLQListOptions) error) *cobra.Command {
	opts := &DLQListOptions{OpsOptions: f.OpsOptions()}
	cmd := &cobra.Command{
		Use:   "list [STREAM]",
		Short: "List every DLQ with its length, or a partition's dead-letter entries with their errors",
		Long: `Without STREAM, list every partition that has dead-letter entries: the partition,
the number of entries, the oldest and newest entry ids and the age of the oldest.

With STREAM, list the entries of that partition's dead-letter stream, oldest first: the
DLQ entry id, the original entry id, the handler that halted on it, the event type and
id, the attempts, when and by whom it was moved, and the error. -o wide adds the lane
and the reason; -o json prints everything, the envelope and payload included.

STREAM is the partition ({category}:{key}) or its DLQ ({category}:{key}:dlq).`,
		Example: `  # every DLQ, longest first in a pipe: sort -t$'\t' -k2 -nr
  $ seqctl dlq list

  $ seqctl dlq list order:client-123

  # the payloads, for a script
  $ seqctl dlq list order:client-123 -o json | jq '.[].envelope.data'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return cmdutil.UsageErrorf(cmd.CommandPath(), "unexpected argument %q: %s takes at most one STREAM", args[1], cmd.CommandPath())
			}
			return nil
		},
		ValidArgsFunction: cmdutil.CompleteStreams(f),
		RunE: cmdutil.OpsRunE(f, opts, func(_ *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Stream = args[0]
			}
			return nil
		}, runF, dlqListRun),
	}
	return cmd
}

func dlqListRun(ctx context.Context, adm cmdutil.Admin, opts *DLQListOptions) error {
	if opts.Stream == "" {
		return printDLQs(ctx, adm, opts)
	}
	entries, err := adm.DLQ(ctx, opts.Stream)
	if err != nil {
		return cmdutil.ExitFor(err)
	}
	ios := opts.IO
	if done, err := cmdutil.WriteList(ios, opts.Output, entries, fmt.Sprintf("The DLQ of %s is empty.", opts.Stream)); done {
		return err
	}
	header := []string{"ID", "ORIGINAL ID", "HANDLER", "TYPE", "EVENT ID", "ATTEMPTS", "MOVED AT", "MOVED BY"}
	if opts.Output == "wide" {
		header = append(header, "LANE", "REASON")
	}
	t := cmdutil.NewTable(ios, opts.Layout(), append(header, "ERROR")...)
	for _, e := range entries {
		row := []string{e.ID, cmdutil.OrDash(e.OriginalID), cmdutil.OrDash(e.Handler), cmdutil.OrDash(e.Envelope.Type), cmdutil.OrDash(e.Envelope.ID),
			strconv.Itoa(e.Attempts), cmdutil.FmtTime(e.MovedAt), cmdutil.OrDash(e.MovedBy)}
		if opts.Output == "wide" {
			row = append(row, cmdutil.OrDash(e.Lane), cmdutil.OrDash(e.Reason))
		}
		t.AddRow(append(row, cmdutil.FirstLine(cmdutil.OrDash(e.Error), 80))...)
	}
	return t.Render(ios.Out)
}

// printDLQs lists every non-empty DLQ.
func printDLQs(ctx context.Context, adm cmdutil.Admin, opts *DLQListOptions) error {
	ios := opts.IO
	ds, err := adm.DLQs(ctx)
	if err != nil {
		return cmdutil.ExitFor(err)
	}
	if done, err := cmdutil.WriteList(ios, opts.Output, ds, "No DLQ has entries."); done {
		return err
	}
	t := cmdutil.NewTable(ios, opts.Layout(), "STREAM", "ENTRIES", "OLDEST", "NEWEST", "OLDEST AGE")
	for _, d := range ds {
		t.AddRow(d.Stream, strconv.FormatInt(d.Length, 10), cmdutil.OrDash(d.OldestID), cmdutil.OrDash(d.NewestID), cmdutil.MSCell(d.OldestAgeMS, d.OldestID != ""))
	}
	return t.Render(ios.Out)
}

// DLQReplayOptions are the inputs of 'seqctl dlq replay'.
type DLQReplayOptions struct {
	cmdutil.GuardedOptions
	Stream string
	ID     string
	// All replays every entry of the DLQ, oldest first.
	All bool
	// Rate paces All: at most Rate.N replays in any one Rate.Per (the zero Rate: as fast
	// as Redis answers).
	Rate cmdutil.Rate
	// ProgressTTY says stderr is a terminal: a long All redraws its progress there.
	ProgressTTY bool
}

func newCmdDLQReplay(f *cmdutil.Factory, runF func(*DLQReplayOptions) error) *cobra.Command {
	opts := &DLQReplayOptions{GuardedOptions: f.GuardedOptions()}
	var rate string
	cmd := &cobra.Command{
		Use:   "replay STREAM --id ID|--all [--rate N/s] [--yes] [--dry-run]",
		Short: "Re-publish a DLQ entry at the tail of its partition, then remove it from the DLQ",
		Long: `Re-publish the event of a DLQ entry at the TAIL of its partition, then remove the
entry from the DLQ.

This changes the event's position: it was before every later event of its key, and now
comes after everything published before the replay. Replay only an event whose order
no longer matters. It keeps its event id (so idempotent handlers recognise it) and goes
to the lane it halted on (the backfill lane for a backfill event). It is a new entry of
the partition stream, so EVERY handler of the category receives it again, not only the
one that halted on it.

The publish and the removal are one script: an entry is re-published once, even when
two operators replay it at the same time, and a replayed entry has left the DLQ. On a
terminal you are asked to confirm; without one, --yes is required (otherwise exit
status 2 and nothing changes). Exit status 3 when the entry is not in the DLQ.

--all replays every entry the DLQ holds when you confirm, oldest first, one at a time
(each is its own compare-and-act and audit record); an entry added after the listing is
left alone, and the replay stops at the first failure, saying how many were replayed.

--rate paces --all for a downstream that cannot take everything at once: 50/s (or 50,
per second) or 30/m (per minute) replays at most that many entries in any second or
minute, evenly spaced, and does not catch up with a burst after a slow one. Without it,
--all replays as fast as Redis answers. On a terminal, stderr shows how far it is:
"replayed 120/500 (50/s, about 8s left)".

Ctrl-C stops --all between two entries, never in the middle of one: it says how many
were replayed, records the stop in the audit log (outcome stopped, with the count) and
exits with status 1. Every replayed entry has left the DLQ, so running the same command
again replays the rest, and no entry twice.`,
		Example: `  $ seqctl dlq list order:client-123
  $ seqctl dlq replay order:client-123 --id 1718000000123-0 --yes

  # where it would go, changing nothing
  $ seqctl dlq replay order:client-123 --id 1718000000123-0 --dry-run

  # everything, after the fix is deployed
  $ seqctl dlq replay order:client-123 --all --yes

  # everything, at most 50 a second; Ctrl-C stops, the same command again does the rest
  $ seqctl dlq replay order:client-123 --all --rate 50/s --yes`,
		Args:              cmdutil.StreamArg,
		ValidArgsFunction: cmdutil.CompleteStreams(f),
		RunE: cmdutil.OpsRunE(f, opts, func(cmd *cobra.Command, args []string) error {
			opts.Stream = args[0]
			return opts.check(cmd, rate)
		}, runF, dlqReplayRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.ID, "id", "", "the DLQ entry id to replay")
	fl.BoolVar(&opts.All, "all", false, "replay every entry of the DLQ, oldest first")
	fl.StringVar(&rate, "rate", "", "with --all, replay at most N entries a second or a minute: N/s, N/m or N (per second) (default: as fast as Redis answers)")
	opts.AddGuardFlags(cmd, "print what would happen")
	_ = cmd.RegisterFlagCompletionFunc("id", cmdutil.CompleteDLQIDs(f))
	opts.ProgressTTY = cmdutil.StderrIsTerminal(f)
	return cmd
}

// check checks the flags of 'dlq replay' and takes --rate (given as rate) into o.Rate.
func (o *DLQReplayOptions) check(cmd *cobra.Command, rate string) error {
	command := cmd.CommandPath()
	switch {
	case o.ID == "" && !o.All:
		return cmdutil.UsageErrorf(command, "--id is required: the DLQ entry id to replay (see 'seqctl dlq list %s'), or --all for every entry", o.Stream)
	case o.ID != "" && o.All:
		return cmdutil.UsageErrorf(command, "--id and --all exclude each other: name one entry, or replay them all")
	}
	if cmd.Flags().Changed("rate") {
		r, err := cmdutil.ParseRateFlag(command, rate)
		if err != nil {
			return err
		}
		if !o.All {
			return cmdutil.UsageErrorf(command, "--rate paces --all: one entry (--id) is replayed at once")
		}
		o.Rate = r
	}
	return cmdutil.CheckEntryID(command, "--id", o.ID)
}

func dlqReplayRun(ctx context.Context, adm cmdutil.Admin, opts *DLQReplayOptions) error {
	g := opts.Guarded(ctx, adm, "dlq replay")
	g.Refusal.Stream = opts.Stream
	if opts.All {
		g.QuietAudit = true
		a := &dlqReplayAll{GuardedAction: g, opts: opts}
		return a.Run(a)
	}
	g.Refusal.EntryID = opts.ID
	g.InDoubt = fmt.Sprintf("the replay: the event may have been re-published; check 'seqctl dlq list %s' and the partition before replaying again", opts.Stream)
	r := &dlqReplayOne{GuardedAction: g, opts: opts}
	return r.Run(r)
}

// dlqReplayOne is one run of 'dlq replay --id': the steps of a GuardedAction that are
// its own.
type dlqReplayOne struct {
	cmdutil.GuardedAction
	opts   *DLQReplayOptions
	replay *admin.ReplayPlan   // read by plan
	res    *admin.ReplayResult // returned by act
}

// Plan reads the DLQ entry and where it would go.
func (r *dlqReplayOne) Plan() error {
	p, err := r.Admin.PlanReplay(r.Ctx, r.opts.Stream, r.opts.ID)
	if err != nil {
		return r.RefuseErr(admin.OutcomeOf(err), cmdutil.ExitFor(err))
	}
	r.replay = p
	return nil
}

func (r *dlqReplayOne) DryRun() error {
	p, e := r.replay, r.replay.Entry
	if cmdutil.Structured(r.Output) {
		return cmdutil.WriteData(r.IO.Out, r.Output, struct {
			*admin.ReplayPlan
			DryRun bool `json:"dry_run"`
		}{p, true})
	}
	fmt.Fprintf(r.IO.Out, "Would re-publish %s (%s, event %s, originally %s) at the tail of %s and remove it from %s. Nothing changed (--dry-run).\n",
		e.ID, cmdutil.OrDash(e.Envelope.Type), cmdutil.OrDash(e.Envelope.ID), cmdutil.OrDash(e.OriginalID), p.Stream, e.DLQStream)
	return nil
}

func (r *dlqReplayOne) Confirmation() cmdutil.Confirmation {
	p, e := r.replay, r.replay.Entry
	refused := cmdutil.UsageErrorf("seqctl dlq replay",
		"refusing to replay %s without confirmation: stdin is not a terminal, pass --yes; nothing changed", e.ID)
	return cmdutil.Confirmation{
		Refused: refused, RefusedDetail: refused.Error(),
		Before: func() error {
			fmt.Fprintf(r.IO.ErrOut, "%s (%s, event %s) goes to the TAIL of %s: after everything published before now, and every handler of %s receives it again.\n",
				e.ID, cmdutil.OrDash(e.Envelope.Type), cmdutil.OrDash(e.Envelope.ID), p.Stream, cmdutil.OrDash(e.Envelope.Category))
			return nil
		},
		Question:       "Replay it?",
		DeclinedDetail: cmdutil.CancelledText,
	}
}

func (r *dlqReplayOne) Act() (any, string, error) {
	res, err := r.Admin.Replay(r.Ctx, r.opts.Stream, r.opts.ID, r.Who)
	if err != nil {
		return nil, "", err
	}
	r.res = res
	return res, res.Warning, nil
}

func (r *dlqReplayOne) Done() string {
	res := r.res
	s := fmt.Sprintf("Replayed %s as %s at the tail of %s (event %s): its position changed, it now follows everything published before the replay.\n",
		res.DLQID, res.EntryID, res.Stream, res.EventID)
	if res.Removed {
		return s + fmt.Sprintf("  Removed %s from %s.", res.DLQID, res.DLQStream)
	}
	return s + fmt.Sprintf("  %s is still in %s: do not replay it again.", res.DLQID, res.DLQStream)
}

// dlqReplayAll is one run of 'dlq replay --all': it replays every entry listed when
// the operator confirms, oldest first.
type dlqReplayAll struct {
	cmdutil.GuardedAction
	opts    *DLQReplayOptions
	entries []admin.DLQEntry      // listed by plan
	results []*admin.ReplayResult // of act, one per entry replayed
}

// Plan lists the entries; an empty DLQ is not found.
func (r *dlqReplayAll) Plan() error {
	entries, err := r.Admin.DLQ(r.Ctx, r.opts.Stream)
	if err != nil {
		return cmdutil.ExitFor(err)
	}
	if len(entries) == 0 {
		return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Err: fmt.Errorf("the DLQ of %s is empty: nothing to replay", r.opts.Stream)}
	}
	r.entries = entries
	return nil
}

func (r *dlqReplayAll) DryRun() error {
	entries := r.entries
	if cmdutil.Structured(r.Output) {
		return cmdutil.WriteData(r.IO.Out, r.Output, struct {
			Entries []admin.DLQEntry `json:"entries"`
			DryRun  bool             `json:"dry_run"`
		}{entries, true})
	}
	fmt.Fprintf(r.IO.Out, "Would re-publish %d entries (%s to %s) at the tail of %s, oldest first%s, and remove them from its DLQ. Nothing changed (--dry-run).\n",
		len(entries), entries[0].ID, entries[len(entries)-1].ID, r.opts.Stream, r.pace())
	return nil
}

// pace says how fast --rate replays the entries: ", at most 50/s (about 10s)"; "" without
// --rate.
func (r *dlqReplayAll) pace() string { return cmdutil.PaceText(r.opts.Rate, len(r.entries)) }

func (r *dlqReplayAll) Confirmation() cmdutil.Confirmation {
	n := len(r.entries)
	return cmdutil.Confirmation{
		Refused:       cmdutil.UsageErrorf("seqctl dlq replay", "refusing to replay %d entries without confirmation: stdin is not a terminal, pass --yes; nothing changed", n),
		RefusedDetail: fmt.Sprintf("--all: %d entries; no terminal and no --yes", n),
		Before: func() error {
			fmt.Fprintf(r.IO.ErrOut, "%d entries of %s go to the TAIL of the partition, oldest first%s: after everything published before now, and every handler of the category receives them again.\n",
				n, r.opts.Stream, r.pace())
			return nil
		},
		Question:       fmt.Sprintf("Replay all %d?", n),
		DeclinedDetail: fmt.Sprintf("--all: %d entries", n),
	}
}

// Act replays the entries one at a time, each its own compare-and-act, at most
// --rate of them a second (or minute). It stops at the first failure, and between two
// entries when the operator stops it (Ctrl-C, or the command's context ends): an entry
// under way is always finished, on a context that is not cancelled.
func (r *dlqReplayAll) Act() (any, string, error) {
	rd := cmdutil.StartRedrive(r.Ctx, r.opts.Rate, cmdutil.NewReplayProgress(r.IO.ErrOut, r.opts.ProgressTTY && !cmdutil.Structured(r.Output), len(r.entries), time.Now))
	defer rd.End()
	for i, e := range r.entries {
		if !rd.Next() {
			return nil, "", r.stopped(rd)
		}
		res, err := r.Admin.Replay(rd.Work, r.opts.Stream, e.ID, r.Who)
		if err != nil {
			return nil, "", fmt.Errorf("replayed %d of %d entries; %s failed: %w", i, len(r.entries), e.ID, err)
		}
		if res.Warning != "" {
			rd.Printf(r.IO.ErrOut, "warning: %s: %s\n", e.ID, res.Warning)
		}
		r.results = append(r.results, res)
		rd.Progress(len(r.results))
	}
	return r.results, "", nil
}

// stopped records in the audit log that the operator stopped the replay after the
// entries replayed so far, and returns the error that says so (exit status 1).
func (r *dlqReplayAll) stopped(rd *cmdutil.Redrive) error {
	done, n := len(r.results), len(r.entries)
	flags := "--all"
	if r.opts.Rate.N > 0 {
		flags += " --rate " + r.opts.Rate.String()
	}
	detail := fmt.Sprintf("%s: stopped by the operator after %d of %d entries; %d left in the DLQ", flags, done, n, n-done)
	return rd.Stopped(r.Admin, r.IO, r.Refusal, detail, done, n, "replay the rest (each entry is replayed once)")
}

func (r *dlqReplayAll) Done() string {
	return fmt.Sprintf("Replayed %d entries of %s at the tail of the partition, oldest first, and removed them from its DLQ.", len(r.results), r.opts.Stream)
}

// DLQPurgeOptions are the inputs of 'seqctl dlq purge'.
type DLQPurgeOptions struct {
	cmdutil.GuardedOptions
	Stream string
	// Through is the newest entry to delete; "" means the newest entry shown.
	Through string
}

func newCmdDLQPurge(f *cmdutil.Factory, runF func(*DLQPurgeOptions) error) *cobra.Command {
	opts := &DLQPurgeOptions{GuardedOptions: f.GuardedOptions()}
	cmd := &cobra.Command{
		Use:   "purge STREAM [--through ID] [--yes] [--dry-run]",
		Short: "Delete a partition's dead-letter entries, up to the newest one you saw",
		Long: `Delete the entries of a partition's DLQ, for good: the events are not published
again (use 'seqctl dlq replay' for that).

It is a compare-and-act: it deletes the entries up to and including the newest one shown
when you confirm (or --through ID), and keeps any entry moved to the DLQ after that, so
nothing is deleted unseen. The purge is recorded in the audit log.

On a terminal you are asked to confirm; without one, --yes is required (otherwise exit
status 2 and nothing changes). --dry-run prints what would be deleted. Exit status 3
when the DLQ is empty.`,
		Example: `  $ seqctl dlq list order:client-123
  $ seqctl dlq purge order:client-123 --through 1718000000123-0 --yes`,
		Args:              cmdutil.StreamArg,
		ValidArgsFunction: cmdutil.CompleteStreams(f),
		RunE: cmdutil.OpsRunE(f, opts, func(cmd *cobra.Command, args []string) error {
			opts.Stream = args[0]
			return cmdutil.CheckRangeEnd(cmd.CommandPath(), "--through", opts.Through)
		}, runF, dlqPurgeRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Through, "through", "", "delete entries up to and including this id (default: the newest entry, shown first)")
	opts.AddGuardFlags(cmd, "print what would be deleted")
	_ = cmd.RegisterFlagCompletionFunc("through", cmdutil.CompleteDLQIDs(f))
	return cmd
}

func dlqPurgeRun(ctx context.Context, adm cmdutil.Admin, opts *DLQPurgeOptions) error {
	p := &dlqPurge{GuardedAction: opts.Guarded(ctx, adm, "dlq purge"), opts: opts}
	p.Refusal.Stream, p.Refusal.EntryID = opts.Stream, opts.Through
	return p.Run(p)
}

// dlqPurge is one run of 'dlq purge': the steps of a GuardedAction that are its own.
type dlqPurge struct {
	cmdutil.GuardedAction
	opts *DLQPurgeOptions
	// listed is the number of entries in the DLQ, n those up to through (the newest
	// entry listed without --through), as plan found them.
	listed, n int
	through   string
	res       *admin.PurgeResult // returned by act
}

// Plan counts the entries the purge would delete; none is not found.
func (p *dlqPurge) Plan() error {
	opts := p.opts
	entries, err := p.Admin.DLQ(p.Ctx, opts.Stream)
	if err != nil {
		return cmdutil.ExitFor(err)
	}
	p.listed, p.through = len(entries), opts.Through
	end, _ := keyspace.ParseRangeEnd(opts.Through) // checked: "5" ends with every entry of 5
	for _, e := range entries {
		if p.through == "" || !end.Less(keyspace.ParseStreamID(e.ID)) {
			p.n++
		}
	}
	if p.through == "" && len(entries) > 0 {
		p.through = entries[len(entries)-1].ID
	}
	if p.n == 0 {
		return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Err: fmt.Errorf("the DLQ of %s has no entry up to %s: nothing to purge", opts.Stream, cmdutil.OrDash(opts.Through))}
	}
	return nil
}

// DryRun says what would be deleted, as text even with -o json|yaml.
func (p *dlqPurge) DryRun() error {
	fmt.Fprintf(p.IO.Out, "Would delete %d entries of the DLQ of %s, through %s (of %d). Nothing changed (--dry-run).\n", p.n, p.opts.Stream, p.through, p.listed)
	return nil
}

func (p *dlqPurge) Confirmation() cmdutil.Confirmation {
	return cmdutil.Confirmation{
		Refused: cmdutil.UsageErrorf("seqctl dlq purge",
			"refusing to delete %d DLQ entries without confirmation: stdin is not a terminal, pass --yes (and --through %s to be sure of the entries); nothing changed", p.n, p.through),
		RefusedDetail: "no terminal and no --yes",
		Question:      fmt.Sprintf("Delete %d entries of the DLQ of %s, through %s, for good?", p.n, p.opts.Stream, p.through),
	}
}

func (p *dlqPurge) Act() (any, string, error) {
	res, err := p.Admin.PurgeDLQ(p.Ctx, p.opts.Stream, p.through, p.Who)
	if err != nil {
		return nil, "", err
	}
	p.res = res
	return res, res.Warning, nil
}

func (p *dlqPurge) Done() string {
	return fmt.Sprintf("Deleted %d entries of %s, through %s; %d left.", p.res.Removed, p.res.DLQStream, p.res.Through, p.res.Left)
}
