package limits

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// LimitsSetOptions are the inputs of 'seqctl limits set' and 'seqctl limits clear'.
type LimitsSetOptions struct {
	cmdutil.GuardedOptions
	// Action is admin.ActionLimitSet or admin.ActionLimitClear.
	Action string
	// LimitRequest is what the flags and the argument ask (Actor is set when it runs):
	// Handler is "" when the config declares exactly one handler with a limit key, and
	// Reason is required to set.
	admin.LimitRequest
}

// limitGuard is the paragraph of both commands on confirming.
const limitGuard = `On a terminal you are asked to confirm, after the value's caps now and after; without
one, --yes is required (otherwise exit status 2 and nothing changes; the refusal is in
the audit log). --dry-run says what would change and changes nothing. Every attempt is
recorded in the audit log ('seqctl audit', with the value, the old and new caps and the
reason). -o json and -o yaml print the result (see docs/json-output.md).`

func newCmdLimitsSet(f *cmdutil.Factory, runF func(*LimitsSetOptions) error) *cobra.Command {
	opts := &LimitsSetOptions{GuardedOptions: f.GuardedOptions(), Action: admin.ActionLimitSet}
	var rate string
	cmd := &cobra.Command{
		Use:   "set VALUE [--handler H] [--concurrency N] [--rate N/s] [--off] --reason TEXT [--yes] [--dry-run]",
		Short: "Override a handler's limit for one value (a tenant): raise, lower or take off its caps",
		Long: `Override the caps of one value (a tenant) of a handler's limit key, in Redis, until
'seqctl limits clear': every running instance applies it at once (a notice on the limit
channel; one that missed it within 30 s), and it holds while instances restart.

  --concurrency N  at most N runs of the value at once, across every instance
  --rate N/s       at most N starts of the value per second (N/m per minute, N/h per
                   hour), across every instance
  --off            no cap at all for the value

A cap left out keeps the domain's (limit_concurrency, limit_rate): --rate 100/s alone
raises the rate and keeps the concurrency. A set replaces the value's previous override
as a whole. Lowering a cap stops no run under way: the runs that hold a permit finish,
and no new one starts until the value is under its cap again.

--reason is required: 'limits get', 'limits list -o wide' and the audit log show it with
who set the override and since when.

` + limitGuard + `

Exit status: 0 set; 2 a usage error (no cap, --off with a cap, a bad --rate, no
--reason, no --handler when the config has several handlers with limit_by or none
is given, a handler the config declares without limit_by, a value that could not be
a limit value, no terminal and no --yes); 3 an unknown handler; 1 declined, or failed.`,
		Example: `  # twice the runs at once for acme while its import runs
  $ seqctl limits set acme --concurrency 8 --reason "acme import, OPS-7" --config domain.toml

  # slow one tenant down, and see what would change first
  $ seqctl limits set globex --rate 5/s --reason "globex floods billing" --dry-run --config domain.toml
  $ seqctl limits set globex --rate 5/s --reason "globex floods billing" --yes --config domain.toml

  # no cap for an internal tenant, one handler of several
  $ seqctl limits set internal --off --handler OrderProjector --reason "our own backfill" --yes --config domain.toml`,
		Args:              limitValueArg,
		ValidArgsFunction: completeLimitValues(f, &opts.Handler),
		RunE: cmdutil.OpsRunE(f, opts, func(cmd *cobra.Command, args []string) error {
			opts.Value = args[0]
			return opts.checkSet(cmd, rate)
		}, runF, limitsSetRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Handler, "handler", "", "the handler whose limit key it is (default: the config's only handler with limit_by)")
	fl.IntVar(&opts.Concurrency, "concurrency", 0, "at most this many runs of the value at once, across every instance (default: the domain's)")
	fl.StringVar(&rate, "rate", "", `at most this many starts of the value per second, minute or hour: "20/s", "600/m", "1000/h" (default: the domain's)`)
	fl.BoolVar(&opts.Off, "off", false, "no cap at all for the value")
	fl.StringVar(&opts.Reason, "reason", "", "why (required): kept with the override and in the audit log")
	opts.AddGuardFlags(cmd, "say what would change")
	_ = cmd.RegisterFlagCompletionFunc("handler", completeLimitHandlers(f))
	return cmd
}

// checkSet validates the flags of a set; rate is --rate as typed.
func (o *LimitsSetOptions) checkSet(cmd *cobra.Command, rate string) error {
	command := cmd.CommandPath()
	capped := cmd.Flags().Changed("concurrency") || rate != ""
	switch {
	case o.Off && capped:
		return cmdutil.UsageErrorf(command, "--off takes every cap off the value: it excludes --concurrency and --rate")
	case !o.Off && !capped:
		return cmdutil.UsageErrorf(command, "say what the override sets: --concurrency N (runs at once), --rate N/s or N/m (starts), or --off (no cap); a cap left out keeps the domain's")
	case cmd.Flags().Changed("concurrency") && o.Concurrency < 1:
		return cmdutil.UsageErrorf(command, "invalid value %d for --concurrency: want a positive number of runs at once; leave --concurrency out to keep the domain's", o.Concurrency)
	}
	if rate != "" {
		n, per, err := keyspace.ParseRate(rate)
		if err != nil {
			return cmdutil.UsageErrorf(command, "invalid value for --rate: %v", err)
		}
		o.Rate, o.Per = n, per
	}
	if strings.TrimSpace(o.Reason) == "" {
		return cmdutil.UsageErrorf(command, `--reason is required: say why (it is kept with the override and in the audit log), e.g. --reason "acme import, OPS-7"`)
	}
	return nil
}

func newCmdLimitsClear(f *cmdutil.Factory, runF func(*LimitsSetOptions) error) *cobra.Command {
	opts := &LimitsSetOptions{GuardedOptions: f.GuardedOptions(), Action: admin.ActionLimitClear}
	cmd := &cobra.Command{
		Use:   "clear VALUE [--handler H] [--reason TEXT] [--yes] [--dry-run]",
		Short: "Remove the override of one value: the domain's caps apply to it again",
		Long: `Remove the override of one value (a tenant) of a handler's limit key: the domain's
caps (limit_concurrency, limit_rate) apply to it again, at once in every running
instance. --reason is optional and recorded in the audit log.

` + limitGuard + `

Exit status: 0 cleared; 3 the value has no override, or an unknown handler; 2 a usage
error (as for 'limits set'); 1 declined, or failed.`,
		Example: `  $ seqctl limits clear acme --reason "import done" --yes --config domain.toml

  # what the caps would be after
  $ seqctl limits clear acme --handler OrderProjector --dry-run --config domain.toml`,
		Args:              limitValueArg,
		ValidArgsFunction: completeLimitValues(f, &opts.Handler),
		RunE: cmdutil.OpsRunE(f, opts, func(_ *cobra.Command, args []string) error {
			opts.Value = args[0]
			return nil
		}, runF, limitsSetRun),
	}
	cmd.Flags().StringVar(&opts.Handler, "handler", "", "the handler whose limit key it is (default: the config's only handler with limit_by)")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why, for the audit log")
	opts.AddGuardFlags(cmd, "say what would change")
	_ = cmd.RegisterFlagCompletionFunc("handler", completeLimitHandlers(f))
	return cmd
}

func limitsSetRun(ctx context.Context, adm cmdutil.Admin, opts *LimitsSetOptions) error {
	a := &limitAction{GuardedAction: opts.Guarded(ctx, adm, "limits "+opts.Action), opts: opts}
	a.Exit = limitExit
	a.Refusal.Value, a.Refusal.Reason = opts.Value, opts.Reason
	return a.Run(a)
}

// limitReport is what -o json|yaml prints of a dry run: the result the action would
// have.
type limitReport struct {
	*admin.LimitResult
	DryRun bool `json:"dry_run,omitempty"`
}

// limitAction is one run of 'limits set|clear': the steps of a GuardedAction that are
// its own.
type limitAction struct {
	cmdutil.GuardedAction
	opts    *LimitsSetOptions
	handler string
	cur     *admin.Limit // read by plan
	res     *admin.LimitResult
}

func (a *limitAction) command() string { return "seqctl limits " + a.opts.Action }

func (a *limitAction) set() bool { return a.opts.Action == admin.ActionLimitSet }

// request is what act asks of the admin.
func (a *limitAction) request() admin.LimitRequest {
	r := a.opts.LimitRequest
	r.Handler, r.Actor = a.handler, a.Who
	return r
}

// Plan resolves the handler and reads the value's caps, override and use. A refused
// check (an unknown handler, a value that could not be one, nothing to clear) is
// recorded; a usage error naming no handler is not: nothing was attempted yet.
func (a *limitAction) Plan() error {
	h, err := limitHandler(a.Admin, a.command(), a.opts.Handler)
	if err != nil {
		return err
	}
	a.handler, a.Refusal.Handler = h, h
	if a.cur, err = a.Admin.Limit(a.Ctx, h, a.opts.Value); err != nil {
		return a.RefuseErr(admin.OutcomeOf(err), limitExit(err))
	}
	if !a.set() && a.cur.Override == nil {
		err := fmt.Errorf("%w: %s of %s has none to clear ('seqctl limits list' shows the overrides); nothing changed", engine.ErrNoOverride, a.opts.Value, h)
		return a.Refuse(admin.OutcomeNotFound, err.Error(), &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Err: err})
	}
	a.InDoubt = cmdutil.MayOrMayNot("limit "+a.opts.Action, fmt.Sprintf("'seqctl limits get %s --handler %s'", a.opts.Value, h))
	return nil
}

// predicted is what the action would do, for the dry run and the confirmation.
func (a *limitAction) predicted() *admin.LimitResult {
	cur := a.cur
	res := &admin.LimitResult{Action: a.opts.Action, Handler: a.handler, Value: a.opts.Value, Old: cur.Override,
		Default: cur.Default, Before: cur.Effective, Done: admin.Done{Outcome: "dry_run"}}
	if a.set() {
		o := a.opts
		n := engine.LimitOverride{Concurrency: o.Concurrency, Rate: o.Rate, Per: o.Per, Off: o.Off, Reason: o.Reason}
		res.New = &n
	}
	res.After = admin.EffectiveCaps(cur.Default, res.New)
	return res
}

func (a *limitAction) DryRun() error {
	res := a.predicted()
	if cmdutil.Structured(a.Output) {
		return cmdutil.WriteData(a.IO.Out, a.Output, limitReport{LimitResult: res, DryRun: true})
	}
	w := a.IO.Out
	if a.set() {
		fmt.Fprintf(w, "Would set the override of %s for %s to %s, reason %q:\n", a.opts.Value, a.handler, admin.OverrideText(res.New), a.opts.Reason)
	} else {
		fmt.Fprintf(w, "Would clear the override of %s for %s (%s):\n", a.opts.Value, a.handler, admin.OverrideText(res.Old))
	}
	a.describeCaps(w, res)
	fmt.Fprintln(w, "Nothing changed (--dry-run).")
	return nil
}

// describeCaps says the value's caps now and after the action, and what it uses now.
func (a *limitAction) describeCaps(w io.Writer, res *admin.LimitResult) {
	fmt.Fprintf(w, "  now    %s; %d permits held, %s partitions waiting\n", capsNow(res.Before, res.Old), a.cur.Use.Held, waitingCell(a.IO, a.cur.Waiting))
	fmt.Fprintf(w, "  after  %s\n", capsNow(res.After, res.New))
}

// capsNow describes the caps that apply: caps, or without a config the override's and
// the domain's for the rest.
func capsNow(c *admin.LimitCaps, o *engine.LimitOverride) string {
	switch {
	case c != nil:
		return admin.CapsText(c)
	case o != nil:
		return admin.OverrideText(o) + ", the domain's for the rest (unknown without --config)"
	}
	return "the domain's caps (unknown without --config)"
}

func (a *limitAction) Confirmation() cmdutil.Confirmation {
	verb := a.opts.Action
	return cmdutil.Confirmation{
		Refused: cmdutil.UsageErrorf(a.command(),
			"refusing to %s the override of %s for %s without confirmation: stdin is not a terminal, pass --yes (--dry-run shows what it would do); nothing changed",
			verb, a.opts.Value, a.handler),
		RefusedDetail: "no terminal and no --yes",
		Before: func() error {
			res := a.predicted()
			fmt.Fprintf(a.IO.ErrOut, "%s of %s: override %s -> %s\n", a.opts.Value, a.handler, admin.OverrideText(res.Old), admin.OverrideText(res.New))
			a.describeCaps(a.IO.ErrOut, res)
			fmt.Fprintln(a.IO.ErrOut, "Every running instance applies it at once.")
			return nil
		},
		Question:       fmt.Sprintf("%s the override of %s for %s?", cmdutil.Capitalize(verb), a.opts.Value, a.handler),
		DeclinedDetail: cmdutil.CancelledText,
	}
}

func (a *limitAction) Act() (any, string, error) {
	var err error
	if a.set() {
		a.res, err = a.Admin.SetLimit(a.Ctx, a.request())
	} else {
		a.res, err = a.Admin.ClearLimit(a.Ctx, a.request())
	}
	if err != nil {
		return nil, "", err
	}
	return a.res, a.res.AuditWarning, nil
}

func (a *limitAction) Done() string {
	res := a.res
	if a.set() {
		return fmt.Sprintf("Set the override of %s for %s: %s now (was %s); every running instance applies it at once. Clear it with 'seqctl limits clear %s --handler %s'.",
			a.opts.Value, a.handler, capsNow(res.After, res.New), capsNow(res.Before, res.Old), a.opts.Value, a.handler)
	}
	caps := ""
	if res.After != nil {
		caps = " (" + admin.CapsText(res.After) + ")"
	}
	return fmt.Sprintf("Cleared the override of %s for %s: the domain's caps apply again%s, at once in every running instance.", a.opts.Value, a.handler, caps)
}
