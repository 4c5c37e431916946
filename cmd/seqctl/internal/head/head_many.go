package head

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
)

// retryManyHelp is the part of the help of 'head retry' on retrying every halted
// partition of a selection.
const retryManyHelp = `

Retry many partitions: with --category C and/or --key GLOB (* any run of characters, ?
one, [a-z] a class) instead of STREAM, every partition of the selection that is halted
is retried, e.g. after a downstream outage. --handler may be left out when each
category concerned has one handler. On a terminal the partitions are listed (at most
20) and you are asked once; without one, --yes is required. --dry-run lists them all
and changes nothing.

The partitions are retried one at a time, in name order, each its own compare-and-act
on the halted head it reads when its turn comes, with its own audit record. A partition
whose head is no longer halted by then (resolved by someone else) is reported as
skipped and recorded as not_halted; that is not an error. A partition refused for
another reason does not stop the others.

--rate paces the retries so that a recovering downstream is not flooded: 10/s (or 10,
per second) or 30/m (per minute) starts at most that many retries in any second or
minute, evenly spaced, and does not catch up with a burst after a slow one. Without it,
the partitions are retried as fast as Redis answers. On a terminal, stderr shows how
far it is: "retried 120/500 (10/s, about 38s left)".

Ctrl-C stops between two partitions, never in the middle of one: it says how many were
done, records the stop in the audit log (outcome stopped, with the count) and exits with
status 1. Running the same command again retries only the partitions still halted: the
command retries no partition twice.

-o json and -o yaml print an array with one object per partition: a skipped one has
"skipped", a refused one "error".

Exit status with --category/--key: 0 every selected partition was retried or skipped;
2 a usage error (STREAM with --key/--category, --rate without them, --expect-id with
them, a bad --rate or --key, a category with several handlers and no --handler, no
terminal and no --yes); 3 no halted partition matches; 1 stopped, declined, or failed;
else the status of the first partition refused (the others were retried all the same).`

// addRetryManyFlags adds to 'head retry' the flags that select many partitions, and
// --rate (given as rate) that paces them.
func addRetryManyFlags(f *cmdutil.Factory, cmd *cobra.Command, opts *HeadActionOptions, rate *string) {
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return cmdutil.StreamArg(cmd, args)
		}
		return nil // STREAM or a selector: checked with the flags, in checkRetry
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Category, "category", "", "retry every halted partition of this category instead of STREAM (with --key: those of its keys that match)")
	fl.StringVar(&opts.Key, "key", "", "retry every halted partition whose key matches this glob instead of STREAM: * any run of characters, ? one, [a-z] a class")
	fl.StringVar(rate, "rate", "", "with --category/--key, retry at most N partitions a second or a minute: N/s, N/m or N (per second) (default: as fast as Redis answers)")
	_ = cmd.RegisterFlagCompletionFunc("category", cmdutil.CompleteCategories(f))
	opts.ProgressTTY = cmdutil.StderrIsTerminal(f)
}

// selection is what --key, --category and --handler select.
func (o *HeadActionOptions) selection() cmdutil.Selection {
	return cmdutil.Selection{Key: o.Key, Category: o.Category, Handler: o.Handler}
}

// checkRetry checks the arguments and flags of 'head retry': one STREAM, or a
// selection; --rate (given as rate) only with a selection, --expect-id only with STREAM.
func (o *HeadActionOptions) checkRetry(cmd *cobra.Command, args []string, rate string) error {
	command := cmd.CommandPath()
	sel := o.selection()
	switch {
	case len(args) == 1 && sel.Set():
		return cmdutil.UsageErrorf(command, "STREAM and --key/--category exclude each other: name one partition, or select the halted partitions to retry")
	case len(args) == 0 && !sel.Set():
		return cmdutil.UsageErrorf(command, "missing the STREAM argument, e.g. %s order:client-123, or select halted partitions with --category C and/or --key GLOB", command)
	case sel.Set() && o.ExpectID != "":
		return cmdutil.UsageErrorf(command, "--expect-id names the head of one STREAM: with --key/--category the halted head of each partition is read when its turn comes")
	}
	if len(args) == 1 {
		o.Stream = args[0]
	}
	if err := admin.CheckKeyGlob(o.Key); err != nil {
		return cmdutil.UsageErrorf(command, "invalid value for --key: %v", err)
	}
	if cmd.Flags().Changed("rate") {
		r, err := cmdutil.ParseRateFlag(command, rate)
		if err != nil {
			return err
		}
		if !sel.Set() {
			return cmdutil.UsageErrorf(command, "--rate paces a retry of many partitions (--category/--key): one STREAM is retried at once")
		}
		o.Rate = r
	}
	return cmdutil.CheckEntryID(command, "--expect-id", o.ExpectID)
}

// retryReport is what -o json|yaml prints of one partition of 'head retry --category':
// what became of it (see admin.HeadRetries).
type retryReport struct {
	admin.HeadRetry
	// DryRun marks the objects of --dry-run.
	DryRun bool `json:"dry_run,omitempty"`
}

// retryMany is one run of 'head retry --category|--key': the steps of a GuardedAction
// that are its own.
type retryMany struct {
	cmdutil.GuardedAction
	cmdutil.Batch
	opts    *HeadActionOptions
	retries *admin.HeadRetries
	reports []retryReport // of act, one per partition gone through
}

func headRetryManyRun(ctx context.Context, adm cmdutil.Admin, opts *HeadActionOptions) error {
	a := &retryMany{GuardedAction: opts.Guarded(ctx, adm, opts.auditCommand()), opts: opts}
	a.retries = &admin.HeadRetries{API: adm, Actor: a.Who, Reason: opts.Reason}
	a.Refusal.Reason = opts.Reason
	if err := a.Run(a); err != nil {
		return err
	}
	return a.RefusalErr(cmdutil.ExitFor, "retried")
}

// command is the command path, for usage errors.
func (a *retryMany) command() string { return "seqctl head retry" }

// Plan lists the halted partitions of the selection, with their handlers. A failure
// here (a usage error, nothing halted) is not recorded: nothing was attempted yet.
func (a *retryMany) Plan() error {
	sel := a.opts.selection()
	targets, err := sel.Targets(a.Ctx, a.Admin, a.command(), []admin.State{admin.StateHalted}, nil)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		return sel.None("halted partition", "retry")
	}
	a.Targets = targets
	if a.Many() {
		a.DetailPrefix = a.AuditPrefix()
	} else {
		a.Refusal.Stream, a.Refusal.Handler = targets[0].Stream, targets[0].Handler
	}
	a.InDoubt = cmdutil.MayOrMayNot("retry", "'seqctl partitions list --halted'")
	return nil
}

// haltText describes a halted partition as listed before the retry.
func haltText(t cmdutil.PartitionTarget) string {
	h := t.Row.Halt
	if h == nil {
		return "halted on " + cmdutil.OrDash(t.Row.HaltedEntryID)
	}
	return fmt.Sprintf("halted on %s since %s after %d attempts: %s", h.EntryID, cmdutil.FmtTime(&h.Since), h.Attempts, cmdutil.FirstLine(h.Error, 80))
}

// pace says how fast the partitions are retried: ", at most 10/s (about 3s)".
func (a *retryMany) pace() string { return cmdutil.PaceText(a.opts.Rate, len(a.Targets)) }

func (a *retryMany) DryRun() error {
	if cmdutil.Structured(a.Output) {
		reports := make([]retryReport, len(a.Targets))
		for i, t := range a.Targets {
			reports[i] = retryReport{DryRun: true, HeadRetry: admin.HeadRetry{ActionResult: &admin.ActionResult{Action: admin.ActionRetry, Stream: t.Stream,
				Handler: t.Handler, EntryID: t.Row.HaltedEntryID, Done: admin.Done{Outcome: "dry_run"}}}}
		}
		return cmdutil.WriteData(a.IO.Out, a.Output, reports)
	}
	w := a.IO.Out
	fmt.Fprintf(w, "Would retry the halted head of %s, one at a time%s:\n", a.What(), a.pace())
	for _, t := range a.Targets {
		fmt.Fprintf(w, "  retry    %s (%s)\n", t, haltText(t))
	}
	fmt.Fprintln(w, "Nothing changed (--dry-run).")
	return nil
}

func (a *retryMany) Confirmation() cmdutil.Confirmation {
	return a.Batch.Confirmation(a.IO, a.command(), "retry", a.describe)
}

// describe says, before the question, which partitions are retried and how.
func (a *retryMany) describe(w io.Writer) {
	a.List(w, haltText)
	fmt.Fprintf(w, "Each owner tries its halted head once more, one partition at a time%s; a partition no longer halted by then is skipped.\n", a.pace())
}

// Act retries the partitions one at a time, at most --rate of them a second (or
// minute). A partition skipped or refused does not stop the others; Redis becoming
// unavailable does, and so does the operator (Ctrl-C), between two partitions: a retry
// under way is always finished, on a context that is not cancelled.
func (a *retryMany) Act() (any, string, error) {
	bar := cmdutil.NewReplayProgress(a.IO.ErrOut, a.opts.ProgressTTY && !cmdutil.Structured(a.Output), len(a.Targets), time.Now)
	bar.Done = "retried"
	rd := cmdutil.StartRedrive(a.Ctx, a.opts.Rate, bar)
	defer rd.End()
	for i, t := range a.Targets {
		if !rd.Next() {
			return nil, "", a.stopped(rd, i)
		}
		rep, err := a.retries.Retry(rd.Work, t.Stream, t.Handler)
		if err != nil {
			return nil, "", a.FailedAt("retried", t, err)
		}
		switch {
		case rep.Err != nil:
			a.Refused(t, rep.Err)
		case rep.Skipped == "":
			a.NDone++
		}
		a.reports = append(a.reports, retryReport{HeadRetry: rep})
		if rep.AuditWarning != "" {
			rd.Printf(a.IO.ErrOut, "warning: %s: %s\n", t, rep.AuditWarning)
		}
		if !cmdutil.Structured(a.Output) {
			rd.Printf(a.IO.Out, "%s\n", a.reportLine(t, rep))
		}
		rd.Progress(i + 1)
	}
	if a.NDone == 0 && a.Refusals > 0 {
		// run prints the data of an act that succeeded; -o json|yaml prints the array
		// whatever happened to the partitions.
		if cmdutil.Structured(a.Output) {
			if err := cmdutil.WriteData(a.IO.Out, a.Output, a.reports); err != nil {
				return nil, "", err
			}
		}
		return nil, "", a.RefusalErr(cmdutil.ExitFor, "retried")
	}
	return a.reports, "", nil
}

// reportLine is the line of one partition.
func (a *retryMany) reportLine(t cmdutil.PartitionTarget, rep admin.HeadRetry) string {
	ios := a.IO
	switch {
	case rep.Error != "":
		return fmt.Sprintf("%s  %s: %s", ios.Red("refused"), t, rep.Error)
	case rep.Skipped != "":
		return fmt.Sprintf("%s  %s: %s", ios.Gray("skipped"), t, rep.Skipped)
	}
	return fmt.Sprintf("%s  %s, head %s", ios.Green("retried"), t, rep.EntryID)
}

// stopped records in the audit log that the operator stopped the retry before target
// i, and returns the error that says so (exit status 1).
func (a *retryMany) stopped(rd *cmdutil.Redrive, i int) error {
	flags := a.opts.selection().String()
	if a.opts.Rate.N > 0 {
		flags += " --rate " + a.opts.Rate.String()
	}
	n := len(a.Targets)
	detail := fmt.Sprintf("%s: stopped by the operator after %d of %d partitions (%d retried, %d skipped, %d refused); %d not tried",
		flags, i, n, a.NDone, a.retries.Skipped, a.Refusals, n-i)
	return rd.Stopped(a.Admin, a.IO, a.Refusal, detail, i, n, "retry the rest (only the partitions still halted are retried)")
}

func (a *retryMany) Done() string {
	n := len(a.Targets)
	s := "Retried " + a.What()
	if a.NDone < n {
		s = fmt.Sprintf("Retried %d of %d partitions; %d no longer halted, %d refused (above)", a.NDone, n, a.retries.Skipped, a.Refusals)
	}
	return s + ": each owner tries its head once more now. A partition whose retry fails halts again: see 'seqctl partitions list --halted'."
}
