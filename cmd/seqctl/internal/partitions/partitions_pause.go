package partitions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// PartitionsPauseOptions are the inputs of 'seqctl partitions pause' and 'seqctl
// partitions resume'.
type PartitionsPauseOptions struct {
	cmdutil.GuardedOptions
	// Action is admin.ActionPause or admin.ActionResume.
	Action string
	// Streams are the partitions named as arguments. Key (a glob over the keys) and
	// Category select them instead.
	Streams       []string
	Key, Category string
	// Handler is "" when each category concerned has exactly one handler.
	Handler string
	// Reason is why: required to pause, recorded with the pause and in the audit log.
	Reason string
	// For ends a pause by itself after this long; 0 pauses until a resume.
	For time.Duration
}

// pauseText is what differs between pause and resume.
type pauseText struct {
	use, short, long, example string
	verb, past                string // "pause", "paused"
}

// pauseSelection is the paragraph of both commands on naming the partitions and on
// confirming; %[1]s is "paused" or "resumed".
const pauseSelection = `

Name the partitions as STREAM arguments ({category}:{key}), or select them with --key
GLOB (* any run of characters, ? one, [a-z] a class) and/or --category C; not both.
--handler may be left out when the category has exactly one handler; with several,
the command lists them and exits with status 2.

On a terminal you are asked to confirm; without one, --yes is required (otherwise exit
status 2 and nothing changes; the refusal is in the audit log). --dry-run lists what
would be %[1]s and changes nothing. Each partition is %[1]s on its own and recorded in
the audit log ('seqctl audit') with the reason; a partition that is refused does not
stop the others. -o json and -o yaml print an array with one object per partition
(see docs/json-output.md).`

var pauseTexts = map[string]pauseText{
	admin.ActionPause: {
		use:   "pause STREAM... | --key GLOB | --category C  --reason TEXT [--handler H] [--for DURATION] [--yes] [--dry-run]",
		short: "Pause partitions for a handler: the event in flight finishes, no other starts",
		long: `Pause partitions for one handler, e.g. while the data of one key is repaired or
a downstream system of one tenant is down. The owner finishes the event in flight (a
pause never interrupts a handler) and starts no other event of the partition, nor any
it read ahead, until the pause is resumed or ends: within one wake-up of the owner, at
once when the owner hears of the pause and at the latest at its next read. The
partition's backlog waits, in order. Other keys, and the other handlers of the same
key, go on.

A pause is a record in Redis, not a state of a process: it holds while instances
restart, crash or hand the partition over, and a paused partition is never reaped.
--for ends it by itself after that long (a Redis expiry), even with no instance
running; without --for it holds until 'seqctl partitions resume'. Pausing a paused
partition replaces its pause (reason, who, until). A halted partition cannot be paused:
resolve its head first ('seqctl head show').

--reason is required: 'partitions list -o wide', 'partitions inspect' and 'seqctl top'
show it with who paused and until when, and the audit log keeps it. 'partitions list
--state paused' lists the paused partitions.` + fmt.Sprintf(pauseSelection, "paused") + `

Exit status: 0 every partition was paused; 2 a usage error (no --reason, a bad --for,
STREAM arguments with --key or --category, a category with several handlers and no
--handler, an invalid partition name, no terminal and no --yes); 3 nothing matches
--key/--category, or an unknown handler; 4 a partition is halted (resolve its head
first); 1 declined, or failed. When partitions are refused, the status is that of the
first refused; the others were paused all the same.`,
		example: `  # hold one key while its data is repaired
  $ seqctl partitions pause order:client-123 --reason "repairing client-123, OPS-42" --yes

  # every key of one tenant, for 30 minutes, and see what that would be first
  $ seqctl partitions pause --category order --key 'acme-*' --for 30m --reason "acme ERP down" --dry-run
  $ seqctl partitions pause --category order --key 'acme-*' --for 30m --reason "acme ERP down" --yes

  # the paused partitions, with the reason, who paused them and until when
  $ seqctl partitions list --state paused -o wide`,
		verb: "pause", past: "paused",
	},
	admin.ActionResume: {
		use:   "resume STREAM... | --key GLOB | --category C  [--handler H] [--reason TEXT] [--yes] [--dry-run]",
		short: "Resume paused partitions: their owners start the next event at once",
		long: `End the pause of partitions for one handler. The owner of each is woken and starts
at once with the first event not handled yet, in publish order (the events it had read
ahead before the pause included). A pause given --for also ends by itself.

With --key or --category, only the partitions that are paused are resumed. --reason is
optional and recorded in the audit log.` + fmt.Sprintf(pauseSelection, "resumed") + `

Exit status: 0 every partition was resumed; 2 a usage error (STREAM arguments with
--key or --category, a category with several handlers and no --handler, an invalid
partition name, no terminal and no --yes); 3 a partition is not paused, no paused
partition matches --key/--category, or an unknown handler; 1 declined, or failed. When
partitions are refused, the status is that of the first refused; the others were
resumed all the same.`,
		example: `  $ seqctl partitions resume order:client-123 --reason "repair done" --yes

  # every paused partition of a tenant
  $ seqctl partitions resume --category order --key 'acme-*' --yes`,
		verb: "resume", past: "resumed",
	},
}

func newCmdPartitionsPause(f *cmdutil.Factory, runF func(*PartitionsPauseOptions) error) *cobra.Command {
	return newCmdPartitionsPauseAction(f, admin.ActionPause, runF)
}

func newCmdPartitionsResume(f *cmdutil.Factory, runF func(*PartitionsPauseOptions) error) *cobra.Command {
	return newCmdPartitionsPauseAction(f, admin.ActionResume, runF)
}

func newCmdPartitionsPauseAction(f *cmdutil.Factory, action string, runF func(*PartitionsPauseOptions) error) *cobra.Command {
	text := pauseTexts[action]
	opts := &PartitionsPauseOptions{GuardedOptions: f.GuardedOptions(), Action: action}
	var forText string
	cmd := &cobra.Command{
		Use:               text.use,
		Short:             text.short,
		Long:              text.long,
		Example:           text.example,
		Args:              cobra.ArbitraryArgs, // checked with the flags, in check
		ValidArgsFunction: completeMoreStreams(f),
		RunE: cmdutil.OpsRunE(f, opts, func(cmd *cobra.Command, args []string) error {
			opts.Streams = args
			return opts.check(cmd.CommandPath(), forText)
		}, runF, partitionsPauseRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Handler, "handler", "", "the handler (consumer group); required when a category has several")
	fl.StringVar(&opts.Key, "key", "", "select the partitions whose key matches this glob instead of naming them: * any run of characters, ? one, [a-z] a class")
	fl.StringVar(&opts.Category, "category", "", "select the partitions of this category instead of naming them (with --key: those of its keys that match)")
	if action == admin.ActionPause {
		fl.StringVar(&opts.Reason, "reason", "", "why (required): shown with the pause and kept in the audit log")
		fl.StringVar(&forText, "for", "", "end the pause by itself after this long, e.g. 90s, 30m or 1h30m (default: until resumed)")
	} else {
		fl.StringVar(&opts.Reason, "reason", "", "why, for the audit log")
	}
	opts.AddGuardFlags(cmd, "list what would be "+text.past)
	_ = cmd.RegisterFlagCompletionFunc("handler", cmdutil.CompleteHandlers(f))
	_ = cmd.RegisterFlagCompletionFunc("category", cmdutil.CompleteCategories(f))
	return cmd
}

// check validates the arguments and flags; forText is --for as typed.
func (o *PartitionsPauseOptions) check(command, forText string) error {
	verb := pauseTexts[o.Action].verb
	selector := o.Key != "" || o.Category != ""
	switch {
	case len(o.Streams) == 0 && !selector:
		return cmdutil.UsageErrorf(command, "name the partitions to %s: STREAM arguments ({category}:{key}, e.g. order:client-123), or select them with --key GLOB and/or --category C", verb)
	case len(o.Streams) > 0 && selector:
		return cmdutil.UsageErrorf(command, "STREAM arguments and --key/--category exclude each other: name the partitions, or select them")
	}
	if err := admin.CheckKeyGlob(o.Key); err != nil {
		return cmdutil.UsageErrorf(command, "invalid value for --key: %v", err)
	}
	if o.Action != admin.ActionPause {
		return nil
	}
	if strings.TrimSpace(o.Reason) == "" {
		return cmdutil.UsageErrorf(command, `--reason is required: say why (it is shown with the pause and kept in the audit log), e.g. --reason "repairing client-123, OPS-42"`)
	}
	d, err := parseFor(forText)
	if err != nil {
		return cmdutil.UsageErrorf(command, "%v", err)
	}
	o.For = d
	return nil
}

// selection is what --key, --category and --handler select.
func (o *PartitionsPauseOptions) selection() cmdutil.Selection {
	return cmdutil.Selection{Key: o.Key, Category: o.Category, Handler: o.Handler}
}

// parseFor reads --for: "" is 0 (until resumed), else a Go duration of at least 1ms.
func parseFor(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Millisecond {
		return 0, fmt.Errorf("invalid value %q for --for: want a duration of at least 1ms, a number and a unit (ms, s, m, h), e.g. 90s, 30m, 2h or 1h30m; leave --for out to pause until resumed", s)
	}
	return d, nil
}

// completeMoreStreams completes every STREAM argument with the indexed partition
// streams not named yet.
func completeMoreStreams(f *cmdutil.Factory) cobra.CompletionFunc {
	return cmdutil.CompleteWith(f, nil, func(ctx context.Context, adm cmdutil.Admin, args []string) []cobra.Completion {
		streams, err := adm.Streams(ctx)
		if err != nil {
			return nil
		}
		var out []cobra.Completion
		for _, s := range streams {
			if !slices.Contains(args, s) {
				out = append(out, s)
			}
		}
		return out
	})
}

func partitionsPauseRun(ctx context.Context, adm cmdutil.Admin, opts *PartitionsPauseOptions) error {
	a := &pauseAction{GuardedAction: opts.Guarded(ctx, adm, "partitions "+opts.Action), opts: opts, text: pauseTexts[opts.Action]}
	a.Exit = pauseExit
	a.Refusal.Reason = opts.Reason
	if err := a.Run(a); err != nil {
		return err
	}
	return a.refusedErr()
}

// pauseExit gives an error of a pause or resume its exit code: a halted partition is a
// conflict (4), a partition not paused is not found (3), a bad key a usage error (2);
// others as cmdutil.ExitFor says.
func pauseExit(err error) error {
	var ee *cmdutil.ExitError
	switch {
	case errors.As(err, &ee):
		return err
	case errors.Is(err, engine.ErrHalted):
		return &cmdutil.ExitError{Code: cmdutil.ExitConflict, Err: err}
	case errors.Is(err, engine.ErrNotPaused):
		return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Err: err}
	case errors.Is(err, engine.ErrInvalidKey):
		return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
	}
	return cmdutil.ExitFor(err)
}

// pauseReport is what -o json|yaml prints of one partition: the admin's PauseResult
// (for a refused partition: its outcome), why it was refused, and for --dry-run the
// partition's state.
type pauseReport struct {
	*admin.PauseResult
	// Error says why the partition was not paused or resumed; "" when it was.
	Error string `json:"error,omitempty"`
	// DryRun marks the objects of --dry-run; State is then the partition's state ("" when
	// it is not listed).
	DryRun bool        `json:"dry_run,omitempty"`
	State  admin.State `json:"state,omitempty"`
}

// pauseAction is one run of 'partitions pause|resume': the steps of a GuardedAction
// that are its own.
type pauseAction struct {
	cmdutil.GuardedAction
	cmdutil.Batch
	opts    *PartitionsPauseOptions
	text    pauseText
	reports []pauseReport // of act, one per partition
}

// command is the command path, for usage errors.
func (a *pauseAction) command() string { return "seqctl partitions " + a.opts.Action }

// Plan resolves the partitions and their handlers and reads their rows. A failure here
// (a usage error, nothing matching) is not recorded: nothing was attempted yet.
func (a *pauseAction) Plan() error {
	var err error
	if len(a.opts.Streams) > 0 {
		a.Targets, err = a.namedTargets()
	} else {
		a.Targets, err = a.selectedTargets()
	}
	if err != nil {
		return err
	}
	if a.Many() {
		a.DetailPrefix = a.AuditPrefix()
	} else {
		a.Refusal.Stream, a.Refusal.Handler = a.Targets[0].Stream, a.Targets[0].Handler
	}
	a.InDoubt = cmdutil.MayOrMayNot(a.text.verb, "'seqctl partitions list --state paused'")
	return nil
}

// namedTargets are the STREAM arguments, once each, with their handler and their row.
func (a *pauseAction) namedTargets() ([]cmdutil.PartitionTarget, error) {
	var out []cmdutil.PartitionTarget
	seen := map[string]bool{}
	for _, s := range a.opts.Streams {
		h, err := cmdutil.ResolveHandler(a.Ctx, a.Admin, a.command(), s, a.opts.Handler)
		if err != nil {
			return nil, err
		}
		if seen[s+"\x00"+h] {
			continue
		}
		seen[s+"\x00"+h] = true
		category, key, _ := strings.Cut(s, ":")
		ps, err := a.Admin.ListPartitions(a.Ctx, admin.Filter{Category: category, Handler: h, KeyGlob: escapeGlob(key)})
		if err != nil {
			return nil, cmdutil.ExitFor(err)
		}
		t := cmdutil.PartitionTarget{Stream: s, Handler: h}
		for i := range ps {
			if ps[i].Stream == s && ps[i].Handler == h {
				t.Row = &ps[i]
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// escapeGlob is a --key pattern that matches key alone.
func escapeGlob(key string) string {
	var b strings.Builder
	for _, r := range key {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// selectedTargets are the partitions --key and --category select, in name order, for
// the handler of each category; a resume keeps only the paused ones.
func (a *pauseAction) selectedTargets() ([]cmdutil.PartitionTarget, error) {
	var keep func(*admin.Partition) bool
	if a.opts.Action == admin.ActionResume {
		keep = func(p *admin.Partition) bool { return p.Pause != nil }
	}
	sel := a.opts.selection()
	out, err := sel.Targets(a.Ctx, a.Admin, a.command(), nil, keep)
	if err == nil && len(out) == 0 {
		err = sel.None(a.selectedNoun(), a.text.verb)
	}
	return out, err
}

// selectedNoun is what a selection looks for.
func (a *pauseAction) selectedNoun() string {
	if a.opts.Action == admin.ActionResume {
		return "paused partition"
	}
	return "partition"
}

// untilText says how long a pause holds: "until resumed" or "for 30m0s".
func (a *pauseAction) untilText() string {
	if a.opts.For == 0 {
		return "until resumed"
	}
	return "for " + a.opts.For.String()
}

// rowText describes a partition as listed before the action, for the dry run and the
// confirmation.
func rowText(t cmdutil.PartitionTarget) string {
	p := t.Row
	if p == nil {
		return "not listed: no stream yet, or not indexed"
	}
	s := fmt.Sprintf("%s, backlog %s", p.State, cmdutil.LagCell(p.Backlog))
	if p.Pause != nil {
		s += "; " + describePause(p.Pause)
	}
	return s
}

// describePause describes a pause record on one line.
func describePause(rec *engine.PauseRecord) string {
	return fmt.Sprintf("paused by %s since %s, %s: %s", cmdutil.OrDash(rec.By), cmdutil.FmtTime(&rec.Since), untilRecord(rec), rec.Reason)
}

// untilRecord says until when a pause record holds.
func untilRecord(rec *engine.PauseRecord) string {
	if rec.Until.IsZero() {
		return "until resumed"
	}
	return "until " + cmdutil.FmtTime(&rec.Until)
}

// predict is the dry run's report of a target: what the action would do, or the
// refusal the listing foresees (a halted partition, one not paused).
func (a *pauseAction) predict(t cmdutil.PartitionTarget) pauseReport {
	res := &admin.PauseResult{Action: a.opts.Action, Stream: t.Stream, Handler: t.Handler, Done: admin.Done{Outcome: "dry_run"}}
	r := pauseReport{PauseResult: res, DryRun: true}
	if t.Row == nil {
		return r
	}
	r.State = t.Row.State
	switch {
	case a.opts.Action == admin.ActionPause && t.Row.Halt != nil:
		res.Outcome, r.Error = admin.OutcomeHalted, "halted: resolve its head first ('seqctl head show "+t.Stream+" --handler "+t.Handler+"')"
	case a.opts.Action == admin.ActionPause:
		res.Replaced = t.Row.Pause != nil
	case t.Row.Pause == nil:
		res.Outcome, r.Error = admin.OutcomeNotPaused, "not paused"
	}
	return r
}

func (a *pauseAction) DryRun() error {
	reports := make([]pauseReport, len(a.Targets))
	for i, t := range a.Targets {
		reports[i] = a.predict(t)
	}
	if cmdutil.Structured(a.Output) {
		return cmdutil.WriteData(a.IO.Out, a.Output, reports)
	}
	w := a.IO.Out
	if a.opts.Action == admin.ActionPause {
		fmt.Fprintf(w, "Would pause %s %s, reason %q:\n", a.What(), a.untilText(), a.opts.Reason)
	} else {
		fmt.Fprintf(w, "Would resume %s:\n", a.What())
	}
	for i, t := range a.Targets {
		verb := a.text.verb
		switch {
		case reports[i].Error != "":
			fmt.Fprintf(w, "  refused  %s: %s\n", t, reports[i].Error)
			continue
		case reports[i].Replaced:
			verb = "re-pause"
		}
		fmt.Fprintf(w, "  %-8s %s (%s)\n", verb, t, rowText(t))
	}
	fmt.Fprintln(w, "Nothing changed (--dry-run).")
	return nil
}

func (a *pauseAction) Confirmation() cmdutil.Confirmation {
	return a.Batch.Confirmation(a.IO, a.command(), a.text.verb, a.describe)
}

// describe says, before the question, which partitions the action concerns and what it
// does to them.
func (a *pauseAction) describe(w io.Writer) {
	a.List(w, rowText)
	if a.opts.Action == admin.ActionResume {
		fmt.Fprintln(w, "Each owner starts its next event at once.")
		return
	}
	fmt.Fprintf(w, "The event in flight finishes and no other starts, %s; other keys and handlers go on.\n", a.untilText())
}

// Act pauses or resumes the partitions one at a time. A partition refused (halted, not
// paused, an unknown handler...) does not stop the others; Redis becoming unavailable
// does. With several partitions each is reported on its own line as it is done.
func (a *pauseAction) Act() (any, string, error) {
	warning := ""
	for _, t := range a.Targets {
		req := admin.PauseRequest{Stream: t.Stream, Handler: t.Handler, Reason: a.opts.Reason, For: a.opts.For, Actor: a.Who}
		res, err := a.call(req)
		if err != nil && admin.StopsAll(err) {
			return nil, "", a.FailedAt(a.text.past, t, err)
		}
		rep := pauseReport{PauseResult: res}
		if err != nil {
			rep.PauseResult = &admin.PauseResult{Action: a.opts.Action, Stream: t.Stream, Handler: t.Handler, Done: admin.Done{Outcome: admin.OutcomeOf(err)}}
			rep.Error = err.Error()
			a.Refused(t, err)
		} else {
			a.NDone++
		}
		a.reports = append(a.reports, rep)
		if res != nil && res.AuditWarning != "" {
			if !a.Many() {
				warning = res.AuditWarning
			} else {
				fmt.Fprintf(a.IO.ErrOut, "warning: %s: %s\n", t, res.AuditWarning)
			}
		}
		if a.Many() && !cmdutil.Structured(a.Output) {
			a.printReport(t, rep)
		}
	}
	if a.NDone == 0 {
		// run prints the data of an act that succeeded; -o json|yaml prints the array
		// whatever happened to the partitions.
		if cmdutil.Structured(a.Output) {
			if err := cmdutil.WriteData(a.IO.Out, a.Output, a.reports); err != nil {
				return nil, "", err
			}
		}
		return nil, "", a.refusedErr()
	}
	return a.reports, warning, nil
}

func (a *pauseAction) call(req admin.PauseRequest) (*admin.PauseResult, error) {
	if a.opts.Action == admin.ActionPause {
		return a.Admin.Pause(a.Ctx, req)
	}
	return a.Admin.Resume(a.Ctx, req)
}

// refusedErr is the error the command ends with when partitions were refused, with the
// exit status of the first refusal; nil when none was.
func (a *pauseAction) refusedErr() error { return a.RefusalErr(pauseExit, a.text.past) }

// printReport prints the line of one partition of several.
func (a *pauseAction) printReport(t cmdutil.PartitionTarget, rep pauseReport) {
	ios := a.IO
	if rep.Error != "" {
		fmt.Fprintf(ios.Out, "%s  %s: %s\n", ios.Red("refused"), t, rep.Error)
		return
	}
	line := fmt.Sprintf("%s  %s", ios.Green(fmt.Sprintf("%-7s", a.text.past)), t)
	if p := rep.Pause; p != nil {
		line += ", " + untilRecord(p)
	}
	if rep.Replaced {
		line += "; replaced the previous pause"
	}
	fmt.Fprintln(ios.Out, line)
}

func (a *pauseAction) Done() string {
	if a.Many() {
		s := fmt.Sprintf("%s %d partitions", cmdutil.Capitalize(a.text.past), a.NDone)
		if a.Refusals > 0 {
			s = fmt.Sprintf("%s %d of %d partitions; %d refused (above)", cmdutil.Capitalize(a.text.past), a.NDone, len(a.Targets), a.Refusals)
		}
		if a.opts.Action == admin.ActionPause {
			return s + ". See them with 'seqctl partitions list --state paused -o wide'."
		}
		return s + ": their owners start their next events at once."
	}
	t, res := a.Targets[0], a.reports[0]
	if a.opts.Action == admin.ActionResume {
		return fmt.Sprintf("Resumed %s: its owner starts its next event at once.", t)
	}
	rec := res.Pause
	if rec == nil {
		rec = &engine.PauseRecord{}
	}
	s := fmt.Sprintf("Paused %s %s: the event in flight finishes and no other starts.", t, untilRecord(rec))
	if !rec.Until.IsZero() {
		s = fmt.Sprintf("Paused %s %s (%s), when it ends by itself: the event in flight finishes and no other starts.", t, untilRecord(rec), a.opts.For)
	}
	if res.Replaced {
		s += " It replaced the previous pause."
	}
	return s + fmt.Sprintf(" Resume it with 'seqctl partitions resume %s --handler %s'.", t.Stream, t.Handler)
}
