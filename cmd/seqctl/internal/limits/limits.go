// Package limits is 'seqctl limits': see and override the limit keys, the fleet-wide caps
// per value of a handler.
package limits

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// NewCmd returns the 'seqctl limits' command with its subcommands.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	return cmdutil.GroupOf(&cobra.Command{
		Use:   "limits <command>",
		Short: "See and override the limit keys: a fleet-wide cap per tenant of a handler",
		Long: `See and override a handler's limit key: the cap on its runs per value of a payload
field (limit_by, a tenant id say), counted across every instance: at most
limit_concurrency runs of one value at once and at most limit_rate starts of one
value per second or minute. A partition whose next event waits for a permit of its
value is "throttled" ('seqctl partitions list --state throttled'): it keeps its lease
and its place in line, and its attempt has not started.

An override changes the caps of one value at run time, durably (in Redis, until it is
cleared): raise them for a tenant with a big import, lower them for one that floods a
downstream, or take them off. Every running instance applies it at once. 'limits set'
and 'limits clear' ask for confirmation and are recorded in the audit log.

The domain's caps come from --config; without it they are unknown ("?") and --handler
is required. With a config that declares one handler with limit_by, --handler may be
left out.`,
		Example: `  # which tenants have partitions waiting for a permit now, and their caps and use
  $ seqctl limits list --waiting --config domain.toml

  # one tenant: caps, override, permits held, starts in the window, waiting partitions
  $ seqctl limits get acme --config domain.toml

  # raise one tenant's caps while its import runs, then give it the domain's back
  $ seqctl limits set acme --concurrency 8 --rate 100/s --reason "acme import, OPS-7" --config domain.toml
  $ seqctl limits clear acme --config domain.toml`,
	}, newCmdLimitsList(f, nil), newCmdLimitsGet(f, nil), newCmdLimitsSet(f, nil), newCmdLimitsClear(f, nil))
}

// LimitsListOptions are the inputs of 'seqctl limits list'.
type LimitsListOptions struct {
	cmdutil.OpsOptions
	// Handler lists one handler's values; "" every handler with a limit key.
	Handler string
	// Waiting lists also the values with partitions waiting for a permit.
	Waiting bool
}

// limitColumns is the help text of the columns of 'limits list' and 'limits get -o
// table'.
const limitColumns = `  HANDLER      the handler (consumer group) whose limit key it is
  VALUE        the value of limit_by (a tenant)
  CONCURRENCY  runs of the value at once, across every instance, that apply now: the
               override's, else the domain's; - no cap, off: the override took every
               cap off, ? unknown without --config
  RATE         starts of the value per second (/s), minute (/m) or hour (/h), as above
  HELD         permits held now: runs of the value under way
  STARTS       runs started in the rate's window that ends now (- when not capped)
  WAITING      partitions waiting for a permit of the value now, as the live
               instances' last heartbeats list them
  OVERRIDE     what the operator's override sets (- none)

-o wide adds the domain's caps (DOMAIN), who set the override, since when and why.`

func newCmdLimitsList(f *cmdutil.Factory, runF func(*LimitsListOptions) error) *cobra.Command {
	opts := &LimitsListOptions{OpsOptions: f.OpsOptions()}
	cmd := &cobra.Command{
		Use:   "list [--handler H] [--waiting]",
		Short: "List the values of limit keys with an override, and with --waiting those with partitions waiting",
		Long: `List one row per value of a handler's limit key that has an override and, with
--waiting, per value that has partitions waiting for a permit now, sorted by handler
and value:

` + limitColumns + `

Without --handler every handler the config declares with limit_by is listed (without
--config: every handler with an override, and with --waiting with partitions waiting).
-o json and -o yaml print an array of the objects of 'limits get -o json' (see
docs/json-output.md). Reading a value's use costs a round trip or two per value.`,
		Example: `  # the overrides in force
  $ seqctl limits list --config domain.toml

  # every tenant with partitions waiting for a permit, and the overrides
  $ seqctl limits list --waiting -o wide --config domain.toml`,
		Args: cmdutil.NoArgs,
		RunE: cmdutil.OpsRunE(f, opts, nil, runF, limitsListRun),
	}
	cmd.Flags().StringVar(&opts.Handler, "handler", "", "only this handler's values (default: every handler with a limit key)")
	cmd.Flags().BoolVar(&opts.Waiting, "waiting", false, "also the values with partitions waiting for a permit now")
	_ = cmd.RegisterFlagCompletionFunc("handler", completeLimitHandlers(f))
	return cmd
}

func limitsListRun(ctx context.Context, adm cmdutil.Admin, opts *LimitsListOptions) error {
	ls, err := adm.Limits(ctx, admin.LimitQuery{Handler: opts.Handler, Waiting: opts.Waiting})
	if err != nil {
		return limitExit(err)
	}
	empty := "No limit overrides."
	if opts.Waiting {
		empty = "No limit overrides, and no partition waits for a permit."
	}
	if done, err := cmdutil.WriteList(opts.IO, opts.Output, ls, empty); done {
		return err
	}
	return printLimits(&opts.OpsOptions, ls)
}

// printLimits prints limits as a table (see limitColumns).
func printLimits(opts *cmdutil.OpsOptions, ls []admin.Limit) error {
	header := []string{"HANDLER", "VALUE", "CONCURRENCY", "RATE", "HELD", "STARTS", "WAITING", "OVERRIDE"}
	wide := opts.Output == "wide"
	if wide {
		header = append(header, "DOMAIN", "SET BY", "SINCE", "REASON")
	}
	t := cmdutil.NewTable(opts.IO, opts.Layout(), header...)
	for _, l := range ls {
		concurrency, rate := capCells(l)
		starts := "-"
		if l.Use.Starts != nil {
			starts = strconv.Itoa(*l.Use.Starts)
		}
		row := []string{l.Handler, l.Value, concurrency, rate, strconv.Itoa(l.Use.Held), starts, waitingCell(opts.IO, l.Waiting), overrideCell(l.Override)}
		if wide {
			by, since, reason := "-", "-", "-"
			if o := l.Override; o != nil {
				by, since, reason = cmdutil.OrDash(o.By), cmdutil.FmtTime(&o.Since), cmdutil.FirstLine(cmdutil.OrDash(o.Reason), 60)
			}
			row = append(row, domainCell(l.Default), by, since, reason)
		}
		t.AddRow(row...)
	}
	return t.Render(opts.IO.Out)
}

// capCells are the CONCURRENCY and RATE cells of a value: the caps that apply; without
// a config, the override's where it sets them and "?" where the domain's apply.
func capCells(l admin.Limit) (concurrency, rate string) {
	c := l.Effective
	if c == nil {
		c = &admin.LimitCaps{Concurrency: -1, Rate: "?"}
		if o := l.Override; o != nil && o.Concurrency > 0 {
			c.Concurrency = o.Concurrency
		}
		if o := l.Override; o != nil && o.Rate > 0 {
			c.Rate = admin.EffectiveCaps(&admin.LimitCaps{}, o).Rate
		}
	}
	switch {
	case c.Off:
		return "off", "off"
	case c.Concurrency < 0:
		concurrency = "?"
	case c.Concurrency == 0:
		concurrency = "-"
	default:
		concurrency = strconv.Itoa(c.Concurrency)
	}
	return concurrency, cmdutil.OrDash(c.Rate)
}

// waitingCell is the WAITING cell: yellow when partitions wait.
func waitingCell(ios *cmdutil.IOStreams, n int) string {
	if n == 0 {
		return "0"
	}
	return ios.Yellow(strconv.Itoa(n))
}

// overrideCell is the OVERRIDE cell: what the override sets, - for none.
func overrideCell(o *engine.LimitOverride) string {
	if o == nil {
		return "-"
	}
	return admin.OverrideText(o)
}

// domainCell is the DOMAIN cell of -o wide: the domain's caps, ? without a config.
func domainCell(c *admin.LimitCaps) string {
	if c == nil {
		return "?"
	}
	return admin.CapsText(c)
}

// LimitsGetOptions are the inputs of 'seqctl limits get'.
type LimitsGetOptions struct {
	cmdutil.OpsOptions
	// Handler is "" when the config declares exactly one handler with a limit key.
	Handler string
	Value   string
}

func newCmdLimitsGet(f *cmdutil.Factory, runF func(*LimitsGetOptions) error) *cobra.Command {
	opts := &LimitsGetOptions{OpsOptions: f.OpsOptions()}
	cmd := &cobra.Command{
		Use:   "get VALUE [--handler H]",
		Short: "Show one value of a limit key: its caps, override, permits held, starts and waiting partitions",
		Long: `Show one value (a tenant) of a handler's limit key: the caps that apply to it and
where they come from (the domain's limit_concurrency and limit_rate, or the operator's
override: who set it, since when and why), what it uses now (permits held: runs under
way across every instance; starts in the rate's window; the last permit's generation,
the fencing token its run got) and the partitions waiting for a permit of it.

The labelled view is printed on a terminal and in a pipe; -o table and -o wide print
the row of 'limits list'; -o json and -o yaml print the object documented in
docs/json-output.md.

Exit status 2 for a handler the config declares without limit_by, or a value that could
not be a limit value; 3 for a handler that does not exist.`,
		Example: `  $ seqctl limits get acme --config domain.toml

  # one handler of several, as JSON
  $ seqctl limits get acme --handler OrderProjector -o json --config domain.toml`,
		Args:              limitValueArg,
		ValidArgsFunction: completeLimitValues(f, &opts.Handler),
		RunE: cmdutil.OpsRunE(f, opts, func(_ *cobra.Command, args []string) error {
			opts.Value = args[0]
			return nil
		}, runF, limitsGetRun),
	}
	cmd.Flags().StringVar(&opts.Handler, "handler", "", "the handler whose limit key it is (default: the config's only handler with limit_by)")
	_ = cmd.RegisterFlagCompletionFunc("handler", completeLimitHandlers(f))
	return cmd
}

// limitValueArg checks the single VALUE argument.
var limitValueArg = cmdutil.OneArg("VALUE", "the value of the handler's limit_by field (a tenant id, say)", "acme")

func limitsGetRun(ctx context.Context, adm cmdutil.Admin, opts *LimitsGetOptions) error {
	handler, err := limitHandler(adm, "seqctl limits get", opts.Handler)
	if err != nil {
		return err
	}
	l, err := adm.Limit(ctx, handler, opts.Value)
	if err != nil {
		return limitExit(err)
	}
	switch {
	case cmdutil.Structured(opts.Output):
		return cmdutil.WriteData(opts.IO.Out, opts.Output, l)
	case opts.Output == "table" || opts.Output == "wide":
		return printLimits(&opts.OpsOptions, []admin.Limit{*l})
	}
	printLimit(opts.IO, l)
	return nil
}

// printLimit prints one value of a limit key for a person.
func printLimit(ios *cmdutil.IOStreams, l *admin.Limit) {
	w := ios.Out
	by := ""
	if l.By != "" {
		by = "  (limit_by " + l.By + ")"
	}
	fmt.Fprintf(w, "%s of %s%s\n", ios.Bold(l.Value), l.Handler, by)
	concurrency, rate := capCells(*l)
	fmt.Fprintf(w, "  caps        concurrency %s, rate %s\n", concurrency, rate)
	fmt.Fprintf(w, "  domain      %s\n", limitDomainText(l.Default))
	if o := l.Override; o != nil {
		fmt.Fprintf(w, "  override    %s, set by %s since %s\n", admin.OverrideText(o), cmdutil.OrDash(o.By), cmdutil.FmtTime(&o.Since))
		fmt.Fprintf(w, "  why         %s\n", cmdutil.IndentRest(o.Reason, "              "))
	} else {
		fmt.Fprintln(w, "  override    none")
	}
	use := fmt.Sprintf("%d permits held", l.Use.Held)
	if l.Use.Starts != nil {
		use += fmt.Sprintf(", %d starts in the rate's window", *l.Use.Starts)
	}
	if l.Use.Generation > 0 {
		use += fmt.Sprintf("; last permit generation %d", l.Use.Generation)
	}
	fmt.Fprintf(w, "  in use      %s\n", use)
	fmt.Fprintf(w, "  waiting     %s partitions waiting for a permit\n", waitingCell(ios, l.Waiting))
}

// limitDomainText says what the domain's caps are, or that they are unknown.
func limitDomainText(c *admin.LimitCaps) string {
	if c == nil {
		return "unknown without --config"
	}
	return admin.CapsText(c)
}

// limitHandler resolves --handler of a limits command: the flag, else the config's only
// handler with limit_by. Without a config, or with several such handlers, it is a usage
// error that says what to pass.
func limitHandler(adm cmdutil.Admin, command, handler string) (string, error) {
	if handler != "" {
		return handler, nil
	}
	hs := adm.HandlerLimits()
	names := slices.Sorted(maps.Keys(hs))
	switch {
	case hs == nil:
		return "", cmdutil.UsageErrorf(command, "--handler is required without --config: name the handler whose limit key it is, or give --config (with one handler with limit_by it is found there)")
	case len(names) == 0:
		return "", cmdutil.UsageErrorf(command, "the config declares no handler with limit_by, so there is no limit key: add limit_by with limit_concurrency or limit_rate to a [[handlers]] entry")
	case len(names) > 1:
		return "", cmdutil.UsageErrorf(command, "the config declares %d handlers with limit_by (%s): pass --handler", len(names), strings.Join(names, ", "))
	}
	return names[0], nil
}

// limitExit gives an error of a limits command its exit code: a handler without limit_by
// and an invalid value are usage errors (2), a value without an override not found (3);
// others as cmdutil.ExitFor says.
func limitExit(err error) error {
	var ee *cmdutil.ExitError
	switch {
	case errors.As(err, &ee):
		return err
	case errors.Is(err, admin.ErrNoLimit), errors.Is(err, engine.ErrInvalidKey):
		return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
	case errors.Is(err, engine.ErrNoOverride):
		return &cmdutil.ExitError{Code: cmdutil.ExitNotFound, Err: err}
	}
	return cmdutil.ExitFor(err)
}

// completeLimitHandlers completes --handler of the limits commands: the config's
// handlers with limit_by, or without a config those with an override or partitions
// waiting.
func completeLimitHandlers(f *cmdutil.Factory) cobra.CompletionFunc {
	return cmdutil.CompleteWith(f, nil, func(ctx context.Context, adm cmdutil.Admin, _ []string) []cobra.Completion {
		if hs := adm.HandlerLimits(); hs != nil {
			var out []cobra.Completion
			for _, h := range slices.Sorted(maps.Keys(hs)) {
				out = append(out, cobra.CompletionWithDesc(h, "limit_by "+hs[h].By))
			}
			return out
		}
		ls, err := adm.Limits(ctx, admin.LimitQuery{Waiting: true})
		if err != nil {
			return nil
		}
		var out []cobra.Completion
		for _, l := range ls {
			if !slices.Contains(out, l.Handler) {
				out = append(out, l.Handler)
			}
		}
		return out
	})
}

// completeLimitValues completes VALUE with the values of the handler (*handler, or the
// config's only one) that have an override or partitions waiting.
func completeLimitValues(f *cmdutil.Factory, handler *string) cobra.CompletionFunc {
	noValueYet := func(args []string) bool { return len(args) == 0 }
	return cmdutil.CompleteWith(f, noValueYet, func(ctx context.Context, adm cmdutil.Admin, _ []string) []cobra.Completion {
		h, err := limitHandler(adm, "", *handler)
		if err != nil {
			return nil
		}
		ls, err := adm.Limits(ctx, admin.LimitQuery{Handler: h, Waiting: true})
		if err != nil {
			return nil
		}
		var out []cobra.Completion
		for _, l := range ls {
			desc := fmt.Sprintf("%d waiting", l.Waiting)
			if l.Override != nil {
				desc = "override " + admin.OverrideText(l.Override) + ", " + desc
			}
			out = append(out, cobra.CompletionWithDesc(l.Value, desc))
		}
		return out
	})
}
