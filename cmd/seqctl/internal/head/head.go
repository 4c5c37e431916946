// Package head is 'seqctl head': show a partition's head entry, and skip, move to the DLQ
// or retry a halted one, or retry the halted heads of many partitions
// (admin.HeadRetries).
package head

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// NewCmd returns the 'seqctl head' command with its subcommands.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	return cmdutil.GroupOf(&cobra.Command{
		Use:   "head <command>",
		Short: "Show a partition's head entry and unwedge a halted partition",
		Long: `Show and resolve the head entry of a partition for one handler.

When a handler fails an entry max_retries times, its partition halts: the entry stays
the head and nothing after it is handled (moving it aside automatically would reorder
the key). Inspect it with 'head show', then resolve it:

  head skip   acknowledge it without handling it; the partition resumes
  head dlq    copy it with its error to {category}:{key}:dlq and acknowledge it
  head retry  let the owner try it once more now (after fixing the cause)

Every resolve is a compare-and-act: it names the entry you inspected (--expect-id, or
the head shown when you confirm) and changes nothing, exit status 4, if the head moved.
Every attempt is recorded in the audit log ('seqctl audit').`,
		Example: `  $ seqctl head show order:client-123 --handler OrderProjector
  $ seqctl head skip order:client-123 --handler OrderProjector --expect-id 1718000000000-0 --yes`,
	},
		newCmdHeadShow(f, nil),
		newCmdHeadAction(f, admin.ActionSkip, nil),
		newCmdHeadAction(f, admin.ActionDLQ, nil),
		newCmdHeadAction(f, admin.ActionRetry, nil),
	)
}

// HeadShowOptions are the inputs of 'seqctl head show'.
type HeadShowOptions struct {
	cmdutil.OpsOptions
	Stream  string
	Handler string // "" when the category has exactly one handler
	// Full prints the whole payload and error and every extra field.
	Full bool
}

func newCmdHeadShow(f *cmdutil.Factory, runF func(*HeadShowOptions) error) *cobra.Command {
	opts := &HeadShowOptions{OpsOptions: f.OpsOptions()}
	cmd := &cobra.Command{
		Use:   "show STREAM [--handler H] [--full]",
		Short: "Show the head entry: id, envelope, payload, attempts, last error",
		Long: `Show the head entry of a partition for a handler: the entry it halted on, else
its oldest pending entry, else the next entry not yet delivered. Prints the entry id
and lane, its status, the attempts so far (the stream's delivery counter), the error of
the last attempt (recorded when the partition halted), the envelope and the payload,
pretty-printed.

Without --full, a long payload and error are cut (the cut is marked); --full prints
them whole, with every extra field of the entry. --handler may be left out when the
category has one handler. Exit status 3 when the handler is caught up.`,
		Example: `  $ seqctl head show order:client-123 --handler OrderProjector

  # everything, as JSON, e.g. to keep with an incident
  $ seqctl head show order:client-123 --handler OrderProjector -o json > head.json`,
		Args:              cmdutil.StreamArg,
		ValidArgsFunction: cmdutil.CompleteStreams(f),
		RunE:              cmdutil.OpsRunE(f, opts, cmdutil.TakeStream(&opts.Stream), runF, headShowRun),
	}
	cmd.Flags().StringVar(&opts.Handler, "handler", "", "the handler (consumer group); required when the category has several")
	cmd.Flags().BoolVar(&opts.Full, "full", false, "print the whole payload and error, and every extra field")
	_ = cmd.RegisterFlagCompletionFunc("handler", cmdutil.CompleteHandlers(f))
	return cmd
}

func headShowRun(ctx context.Context, adm cmdutil.Admin, opts *HeadShowOptions) error {
	handler, err := cmdutil.ResolveHandler(ctx, adm, "seqctl head show", opts.Stream, opts.Handler)
	if err != nil {
		return err
	}
	h, err := adm.Head(ctx, opts.Stream, handler)
	if err != nil {
		return cmdutil.ExitFor(err)
	}
	if cmdutil.Structured(opts.Output) {
		return cmdutil.WriteData(opts.IO.Out, opts.Output, h)
	}
	if !opts.IO.IsTerminal {
		return printHeadRows(opts.IO, h)
	}
	return printHead(opts.IO, h, opts.Full)
}

// Cuts of 'head show' without --full.
const (
	maxPayloadLines = 40
	maxErrorChars   = 600
)

func printHead(ios *cmdutil.IOStreams, h *admin.Head, full bool) error {
	w := ios.Out
	status := string(h.Status)
	if h.Status == admin.HeadHalted {
		status = ios.Red("HALTED")
	}
	fmt.Fprintf(w, "Head of %s for %s: %s\n", ios.Bold(h.Stream), ios.Bold(h.Handler), status)
	fmt.Fprintf(w, "  entry       %s on %s\n", h.ID, h.Lane)
	fmt.Fprintf(w, "  attempts    %d\n", h.Attempts)
	fmt.Fprintf(w, "  age         %s\n", cmdutil.FmtMS(h.AgeMS))
	if h.HaltedSince != nil {
		fmt.Fprintf(w, "  halted      since %s\n", cmdutil.FmtTime(h.HaltedSince))
	}
	if h.Status == admin.HeadPending {
		fmt.Fprintf(w, "  delivered   to %s, idle %s\n", h.Consumer, cmdutil.FmtMS(h.IdleMS))
	}
	if h.LastError != "" {
		e := h.LastError
		if !full && len(e) > maxErrorChars {
			e = e[:maxErrorChars] + fmt.Sprintf(" … (%d more bytes; --full prints it all)", len(h.LastError)-maxErrorChars)
		}
		fmt.Fprintf(w, "  last error  %s\n", cmdutil.IndentRest(e, "              "))
	}
	fmt.Fprintf(w, "  event       %s\n", cmdutil.EnvelopeLine(h.Envelope))
	if h.Envelope.PublishedAt != nil {
		fmt.Fprintf(w, "  published   %s\n", cmdutil.FmtTime(h.Envelope.PublishedAt))
	}
	if h.Envelope.Problem != "" {
		fmt.Fprintf(w, "  problem     %s\n", ios.Red(h.Envelope.Problem))
	}
	if full && len(h.Envelope.Fields) > 0 {
		keys := make([]string, 0, len(h.Envelope.Fields))
		for k := range h.Envelope.Fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-11s %s\n", k, h.Envelope.Fields[k])
		}
	}
	fmt.Fprintln(w, "  payload")
	lines := strings.Split(cmdutil.PrettyJSON(h.Envelope.Data), "\n")
	shown := lines
	if !full && len(lines) > maxPayloadLines {
		shown = lines[:maxPayloadLines]
	}
	for _, l := range shown {
		fmt.Fprintf(w, "    %s\n", l)
	}
	if len(shown) < len(lines) {
		fmt.Fprintf(w, "    … (%d more lines; --full prints it all)\n", len(lines)-len(shown))
	}
	return nil
}

// printHeadRows prints the head for a pipe: one "field<TAB>value" row per field, the
// payload as compact JSON.
func printHeadRows(ios *cmdutil.IOStreams, h *admin.Head) error {
	t := cmdutil.NewTablePrinter(ios)
	t.AddRow("stream", h.Stream)
	t.AddRow("handler", h.Handler)
	t.AddRow("id", h.ID)
	t.AddRow("lane", h.Lane)
	t.AddRow("status", string(h.Status))
	t.AddRow("attempts", strconv.FormatInt(h.Attempts, 10))
	t.AddRow("age_ms", strconv.FormatInt(h.AgeMS, 10))
	t.AddRow("halted_since", cmdutil.FmtTime(h.HaltedSince))
	t.AddRow("last_error", h.LastError)
	t.AddRow("event_id", h.Envelope.ID)
	t.AddRow("type", h.Envelope.Type)
	t.AddRow("key", h.Envelope.Key)
	t.AddRow("priority", strconv.Itoa(h.Envelope.Priority))
	t.AddRow("published_at", cmdutil.FmtTime(h.Envelope.PublishedAt))
	t.AddRow("data", cmdutil.CompactJSON(h.Envelope.Data))
	return t.Render(ios.Out)
}

// HeadActionOptions are the inputs of 'seqctl head skip|dlq|retry'.
type HeadActionOptions struct {
	cmdutil.GuardedOptions
	Kind    admin.ActionKind
	Stream  string
	Handler string
	// ExpectID is the head entry to act on; "" means the current head, shown first.
	ExpectID string
	// Force acts on a head that is not halted (skip and dlq).
	Force  bool
	Reason string
	// Key and Category select the halted partitions to retry instead of Stream (retry
	// only); Rate paces them (the zero Rate: as fast as Redis answers).
	Key, Category string
	Rate          cmdutil.Rate
	// ProgressTTY says stderr is a terminal: a long retry of many partitions redraws its
	// progress there.
	ProgressTTY bool
}

// headActionText is what differs between skip, dlq and retry.
type headActionText struct {
	use, short, long, example string
	verb                      string // "skip", "move to the DLQ", "retry"
	done                      func(r *admin.ActionResult) string
}

var headActions = map[admin.ActionKind]headActionText{
	admin.ActionSkip: {
		use:   "skip STREAM [--handler H] [--expect-id ID] [--yes] [--dry-run] [--force]",
		short: "Acknowledge the halted head without handling it; the partition resumes",
		long: `Acknowledge the head entry of a halted partition without handling it. The owner
resumes with the next entry at once (no restart). The entry is not kept anywhere: use
'seqctl head dlq' to keep it for a replay.`,
		example: `  # look first, then skip exactly what you looked at
  $ seqctl head show order:client-123 --handler OrderProjector
  $ seqctl head skip order:client-123 --handler OrderProjector --expect-id 1718000000000-0 --yes

  # what would happen, changing nothing
  $ seqctl head skip order:client-123 --handler OrderProjector --dry-run`,
		verb: "skip",
		done: func(r *admin.ActionResult) string {
			return fmt.Sprintf("Skipped %s on %s for %s: acknowledged without handling. The owner resumes with the next entry.", r.EntryID, r.Stream, r.Handler)
		},
	},
	admin.ActionDLQ: {
		use:   "dlq STREAM [--handler H] [--expect-id ID] [--yes] [--dry-run] [--force]",
		short: "Move the halted head with its error to {category}:{key}:dlq; the partition resumes",
		long: `Copy the head entry of a halted partition, with its halt metadata (error, attempts,
since, lane), the original id, the handler, who moved it, when and why (--reason), to the
partition's dead-letter stream {category}:{key}:dlq, and acknowledge it, in one script.
The owner resumes with the next entry at once. List the DLQ with 'seqctl dlq list' and
replay an entry with 'seqctl dlq replay'.`,
		example: `  $ seqctl head dlq order:client-123 --handler OrderProjector --expect-id 1718000000000-0 --yes --reason "bad total, ticket OPS-42"
  $ seqctl dlq list order:client-123`,
		verb: "move to the DLQ",
		done: func(r *admin.ActionResult) string {
			return fmt.Sprintf("Moved %s on %s for %s to %s with its error, and acknowledged it. The owner resumes with the next entry; see it with 'seqctl dlq list %s'.", r.EntryID, r.Stream, r.Handler, r.DLQStream, r.Stream)
		},
	},
	admin.ActionRetry: {
		use:   "retry STREAM | --category C [--key GLOB]  [--handler H] [--expect-id ID] [--rate N/s] [--yes] [--dry-run]",
		short: "Clear the halt so the owner tries the head once more now",
		long: `Clear the halt record of a partition so that its owner tries the head entry once
more, now (after you fixed what made it fail). The owner tries it exactly once: if that
attempt fails too, the partition halts again on the same entry, with the new error.
Only a halted head can be retried.`,
		example: `  # after deploying the fix
  $ seqctl head retry order:client-123 --handler OrderProjector --expect-id 1718000000000-0 --yes

  # every halted partition of a category after an outage, at most 10 a second
  $ seqctl head retry --category order --dry-run
  $ seqctl head retry --category order --rate 10/s --yes`,
		verb: "retry",
		done: func(r *admin.ActionResult) string {
			return fmt.Sprintf("Cleared the halt of %s for %s: the owner tries %s once more now. If it fails again, the partition halts again (see 'seqctl head show').", r.Stream, r.Handler, r.EntryID)
		},
	},
}

func newCmdHeadAction(f *cmdutil.Factory, kind admin.ActionKind, runF func(*HeadActionOptions) error) *cobra.Command {
	text := headActions[kind]
	opts := &HeadActionOptions{GuardedOptions: f.GuardedOptions(), Kind: kind}
	common := `

--handler may be left out when the category has one handler; with several, the
command lists them and exits with status 2. Without --expect-id the current head is
shown and acted on. On a terminal you are
asked to confirm; without one, --yes is required (otherwise exit status 2 and nothing
changes). --dry-run prints what would happen and changes nothing.`
	if kind != admin.ActionRetry {
		common += `

Only a halted head is acted on, unless --force. A --force on a running partition races
with its owner: the entry may be in its handler right now.`
	}
	common += `

Exit status: 0 done; 2 a usage error (a malformed --expect-id, a missing --handler);
4 the head is no longer the expected entry (nothing changed); 3 no such partition,
handler or head; 1 refused (not halted, declined) or failed.`
	if kind == admin.ActionRetry {
		common += retryManyHelp
	}
	var rate string
	cmd := &cobra.Command{
		Use:               text.use,
		Short:             text.short,
		Long:              text.long + common,
		Example:           text.example,
		Args:              cmdutil.StreamArg,
		ValidArgsFunction: cmdutil.CompleteStreams(f),
		RunE: cmdutil.OpsRunE(f, opts, func(cmd *cobra.Command, args []string) error {
			if kind == admin.ActionRetry {
				return opts.checkRetry(cmd, args, rate)
			}
			opts.Stream = args[0]
			return cmdutil.CheckEntryID(cmd.CommandPath(), "--expect-id", opts.ExpectID)
		}, runF, headActionRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Handler, "handler", "", "the handler (consumer group); required when the category has several")
	fl.StringVar(&opts.ExpectID, "expect-id", "", "act only if the head is still this entry id (default: the current head, shown first)")
	opts.AddGuardFlags(cmd, "print what would happen")
	fl.StringVar(&opts.Reason, "reason", "", "why, for the audit log (and the DLQ entry)")
	if kind != admin.ActionRetry {
		fl.BoolVar(&opts.Force, "force", false, "act on a head that is not halted")
	} else {
		addRetryManyFlags(f, cmd, opts, &rate)
	}
	_ = cmd.RegisterFlagCompletionFunc("handler", cmdutil.CompleteHandlers(f))
	return cmd
}

// auditCommand is the command name recorded in the audit log.
func (o *HeadActionOptions) auditCommand() string { return "head " + string(o.Kind) }

func headActionRun(ctx context.Context, adm cmdutil.Admin, opts *HeadActionOptions) error {
	if opts.selection().Set() {
		return headRetryManyRun(ctx, adm, opts)
	}
	handler, err := cmdutil.ResolveHandler(ctx, adm, "seqctl "+opts.auditCommand(), opts.Stream, opts.Handler)
	if err != nil {
		return err
	}
	opts.Handler = handler
	a := &headAction{GuardedAction: opts.Guarded(ctx, adm, opts.auditCommand()), opts: opts, text: headActions[opts.Kind]}
	a.Refusal.Stream, a.Refusal.Handler, a.Refusal.EntryID, a.Refusal.Reason = opts.Stream, opts.Handler, opts.ExpectID, opts.Reason
	a.InDoubt = cmdutil.MayOrMayNot(a.text.verb, fmt.Sprintf("'seqctl head show %s --handler %s'", opts.Stream, opts.Handler))
	if opts.Force {
		a.DetailPrefix = "force; "
	}
	return a.Run(a)
}

// headAction is one run of 'head skip|dlq|retry': the steps of a GuardedAction that
// are its own.
type headAction struct {
	cmdutil.GuardedAction
	opts *HeadActionOptions
	text headActionText
	head *admin.Head         // read by plan
	res  *admin.ActionResult // returned by act
}

// Plan reads the head, checks it is the expected entry, shows it when the operator
// named none, and checks it can be acted on: halted, or in flight with --force.
func (a *headAction) Plan() error {
	opts := a.opts
	head, err := a.Admin.Head(a.Ctx, opts.Stream, opts.Handler)
	if err != nil {
		var nf *admin.NotFoundError
		if errors.As(err, &nf) && nf.What == "head" && opts.ExpectID != "" {
			moved := &engine.HeadMovedError{Expected: opts.ExpectID}
			return a.RefuseErr(admin.OutcomeHeadMoved, &cmdutil.ExitError{Code: cmdutil.ExitConflict, Err: moved})
		}
		return a.RefuseErr(admin.OutcomeOf(err), cmdutil.ExitFor(err))
	}
	if opts.ExpectID != "" && head.ID != opts.ExpectID {
		moved := &engine.HeadMovedError{Expected: opts.ExpectID, Head: head.ID}
		return a.RefuseErr(admin.OutcomeHeadMoved, &cmdutil.ExitError{Code: cmdutil.ExitConflict, Err: moved})
	}
	a.head, a.Refusal.EntryID = head, head.ID
	if opts.ExpectID == "" && !cmdutil.Structured(opts.Output) {
		a.showHead()
	}
	switch {
	case head.Status == admin.HeadUndelivered:
		return a.RefuseErr(admin.OutcomeNotPending, fmt.Errorf(
			"the head %s of %s has not been delivered to %s yet: nothing is halted or in flight to %s; nothing changed",
			head.ID, opts.Stream, opts.Handler, a.text.verb))
	case head.Status != admin.HeadHalted && (opts.Kind == admin.ActionRetry || !opts.Force):
		hint := "; pass --force to act on it anyway (the owner may be handling it right now)"
		if opts.Kind == admin.ActionRetry {
			hint = "; only a halted head can be retried"
		}
		return a.RefuseErr(admin.OutcomeNotHalted, fmt.Errorf(
			"%w: the head %s of %s for %s is %s, not halted%s; nothing changed", engine.ErrNotHalted, head.ID, opts.Stream, opts.Handler, head.Status, hint))
	}
	return nil
}

// showHead shows on stderr the head about to be acted on, when the operator named no
// entry.
func (a *headAction) showHead() {
	ios, head := a.IO, a.head
	fmt.Fprintf(ios.ErrOut, "Current head of %s for %s:\n", a.opts.Stream, a.opts.Handler)
	fmt.Fprintf(ios.ErrOut, "  %s on %s: %s, %d attempts, age %s\n", head.ID, head.Lane, head.Status, head.Attempts, cmdutil.FmtMS(head.AgeMS))
	fmt.Fprintf(ios.ErrOut, "  event       %s\n", cmdutil.EnvelopeLine(head.Envelope))
	if head.LastError != "" {
		fmt.Fprintf(ios.ErrOut, "  last error  %s\n", cmdutil.FirstLine(head.LastError, 200))
	}
	fmt.Fprintf(ios.ErrOut, "  payload     %s\n", cmdutil.FirstLine(cmdutil.CompactJSON(head.Envelope.Data), 200))
}

func (a *headAction) DryRun() error {
	opts, head := a.opts, a.head
	res := &admin.ActionResult{Action: opts.Kind, Stream: opts.Stream, Handler: opts.Handler, EntryID: head.ID, Done: admin.Done{Outcome: "dry_run"}}
	if cmdutil.Structured(opts.Output) {
		return cmdutil.WriteData(a.IO.Out, opts.Output, struct {
			*admin.ActionResult
			DryRun bool        `json:"dry_run"`
			Head   *admin.Head `json:"head"`
		}{res, true, head})
	}
	fmt.Fprintf(a.IO.Out, "Would %s %s on %s for %s (%s, %d attempts). Nothing changed (--dry-run).\n",
		a.text.verb, head.ID, head.Lane, opts.Handler, head.Status, head.Attempts)
	return nil
}

func (a *headAction) Confirmation() cmdutil.Confirmation {
	opts, id := a.opts, a.head.ID
	refused := cmdutil.UsageErrorf("seqctl "+opts.auditCommand(),
		"refusing to %s %s without confirmation: stdin is not a terminal, pass --yes (and --expect-id %s to be sure of the entry); nothing changed",
		a.text.verb, id, id)
	return cmdutil.Confirmation{
		Refused: refused, RefusedDetail: refused.Error(),
		Question:       fmt.Sprintf("%s %s on %s for %s?", cmdutil.Capitalize(a.text.verb), id, opts.Stream, opts.Handler),
		DeclinedDetail: cmdutil.CancelledText,
	}
}

// Act is the compare-and-act on the head the plan read.
func (a *headAction) Act() (any, string, error) {
	opts := a.opts
	res, err := a.Admin.Act(a.Ctx, admin.Action{
		Kind: opts.Kind, Stream: opts.Stream, Handler: opts.Handler, ExpectID: a.head.ID,
		Force: opts.Force, Reason: opts.Reason, Actor: a.Who,
	})
	if err != nil {
		return nil, "", err
	}
	a.res = res
	return res, res.AuditWarning, nil
}

func (a *headAction) Done() string { return a.text.done(a.res) }
