// Package groups is 'seqctl groups': the consumer groups each category waits for, and the
// retirement of a removed handler's group.
package groups

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// NewCmd returns the 'seqctl groups' command with its subcommands.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	return cmdutil.GroupOf(&cobra.Command{
		Use:   "groups <command>",
		Short: "List the consumer groups each category waits for, and retire a removed handler",
		Long: `List and retire the consumer groups registered for each category.

Every engine registers every handler and process manager its domain declares in the
category's group registry ({category}:__groups__), whether or not it runs them, and again
whenever its session opens. Trim and reap wait for every registered group: a partition
keeps every entry a registered group has not read, so a handler that is declared but not
deployed yet loses nothing.

The other side: a handler removed from the domain stays registered, and its partitions
are then never trimmed past what it read, nor reaped. 'groups list' shows it (declared
"no" with --config, entries unread, no live lease); 'groups remove' retires it so trim
and reap resume.`,
		Example: `  # which groups each category waits for, and how far behind each is
  $ seqctl groups list --config domain.toml

  # retire a handler removed from the domain
  $ seqctl groups remove Mailer --category order --expect-read 0 --yes`,
	}, newCmdGroupsList(f, nil), newCmdGroupsRemove(f, nil))
}

// GroupsListOptions are the inputs of 'seqctl groups list'.
type GroupsListOptions struct {
	cmdutil.OpsOptions
	// Category lists only this category ("" for all).
	Category string
}

func newCmdGroupsList(f *cmdutil.Factory, runF func(*GroupsListOptions) error) *cobra.Command {
	opts := &GroupsListOptions{OpsOptions: f.OpsOptions()}
	cmd := &cobra.Command{
		Use:   "list [--category C]",
		Short: "List each category's consumer groups: registered, declared, leases, unread, read",
		Long: `List one row per (category, consumer group): every group in the category's
registry, and every group the --config domain declares on it.

  REGISTERED  in {category}:__groups__: trim and reap wait for it
  LEASES      its leases in the category held by a live session: it is running
  PARTITIONS  partitions in the category's discovery index
  BEHIND      partitions (or the category stream) with entries it has not read or
              not acknowledged
  UNREAD      entries not yet delivered to it (? = unknown)
  PENDING     entries delivered to it and not acknowledged
  READ        entries delivered to it so far: the figure 'groups remove
              --expect-read' compares
  HALTED      its halted partitions
  DECLARED    the --config domain declares it on the category (- without --config)

A group that is registered, not declared, with no live lease and entries unread holds
trim and reap back: retire it with 'seqctl groups remove'. -o json and -o yaml print
the fields category, name, registered, declared (null without --config), partitions,
behind, unread, pending, read, live_leases and halted.`,
		Example: `  $ seqctl groups list --config domain.toml
  $ seqctl groups list --category order -o json`,
		Args: cmdutil.NoArgs,
		RunE: cmdutil.OpsRunE(f, opts, nil, runF, groupsListRun),
	}
	cmd.Flags().StringVar(&opts.Category, "category", "", "only this category")
	return cmd
}

func groupsListRun(ctx context.Context, adm cmdutil.Admin, opts *GroupsListOptions) error {
	gs, err := adm.Groups(ctx, opts.Category)
	if err != nil {
		return cmdutil.ExitFor(err)
	}
	ios := opts.IO
	if done, err := cmdutil.WriteList(ios, opts.Output, gs, "No consumer groups registered or declared."); done {
		return err
	}
	// DECLARED is last: its colour codes cannot upset the alignment of a column after it.
	t := cmdutil.NewTablePrinter(ios, "CATEGORY", "GROUP", "REGISTERED", "LEASES", "PARTITIONS", "BEHIND", "UNREAD", "PENDING", "READ", "HALTED", "DECLARED")
	for _, g := range gs {
		t.AddRow(g.Category, g.Name, yesNo(g.Registered), strconv.Itoa(g.LiveLeases), strconv.Itoa(g.Partitions), strconv.Itoa(g.Behind),
			cmdutil.LagCell(g.Unread), strconv.FormatInt(g.Pending, 10), strconv.FormatInt(g.Read, 10), strconv.Itoa(g.Halted), declaredCell(ios, g))
	}
	return t.Render(ios.Out)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// declaredCell marks in red a registered group the config no longer declares: it holds
// trim and reap back until it is retired.
func declaredCell(ios *cmdutil.IOStreams, g admin.Group) string {
	switch {
	case g.Declared == nil:
		return "-"
	case *g.Declared:
		return "yes"
	case g.Registered:
		return ios.Red("no")
	}
	return "no"
}

// GroupsRemoveOptions are the inputs of 'seqctl groups remove'.
type GroupsRemoveOptions struct {
	// GuardedOptions: with --dry-run, every check runs and nothing changes.
	cmdutil.GuardedOptions
	Group    string
	Category string
	// ExpectRead is the READ figure the operator inspected; nil means the current one,
	// shown first.
	ExpectRead *int64
	Reason     string
}

func newCmdGroupsRemove(f *cmdutil.Factory, runF func(*GroupsRemoveOptions) error) *cobra.Command {
	opts := &GroupsRemoveOptions{GuardedOptions: f.GuardedOptions()}
	var expect int64
	cmd := &cobra.Command{
		Use:   "remove NAME --category C [--expect-read N] [--yes] [--dry-run] [--reason R]",
		Short: "Retire a removed handler's consumer group from a category so trim and reap resume",
		Long: `Retire the consumer group NAME from category C: take it out of the group registry
({category}:__groups__), destroy its consumer group on every stream of the category
(trim keeps everything from the slowest group present on a stream, registered or not)
and delete its halt records there, in one compare-and-act script. Trim and reap then
stop waiting for it: the entries it has not read are given up.

Remove the handler from the domain of every instance first: an instance whose domain
still declares it registers it again when its session opens. With --config, a group
the config declares is refused.

The removal names what you inspected: --expect-read, the READ figure of 'groups list'
(or, without it, the figure shown before you confirm). It changes nothing, exit status
4, when the group is not registered, is declared by --config, holds a live lease in the
category (it is running), or has read a different number of entries since. On a
terminal you are asked to confirm; without one, --yes is required (otherwise exit
status 2 and nothing changes). --dry-run runs every check in Redis and changes nothing.
Every attempt is recorded in the audit log ('seqctl audit').

Exit status: 0 done; 4 refused by a check (nothing changed); 1 declined or failed.`,
		Example: `  # look first, then remove exactly what you looked at
  $ seqctl groups list --category order --config domain.toml
  $ seqctl groups remove Mailer --category order --expect-read 0 --yes --reason "Mailer retired, OPS-7"

  # every check, changing nothing
  $ seqctl groups remove Mailer --category order --dry-run`,
		Args: cmdutil.OneArg("NAME", "the consumer group (handler or process manager) to remove", ""),
		RunE: cmdutil.OpsRunE(f, opts, func(cmd *cobra.Command, args []string) error {
			opts.Group = args[0]
			if opts.Category == "" {
				return cmdutil.UsageErrorf(cmd.CommandPath(), "--category is required: name the category to remove %s from", opts.Group)
			}
			if cmd.Flags().Changed("expect-read") {
				if expect < 0 {
					return cmdutil.UsageErrorf(cmd.CommandPath(), "--expect-read must not be negative, got %d", expect)
				}
				opts.ExpectRead = &expect
			}
			return nil
		}, runF, groupsRemoveRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Category, "category", "", "the category to remove the group from (required)")
	fl.Int64Var(&expect, "expect-read", 0, "act only if the group has still read this many entries (the READ of 'groups list'; default: the current figure, shown first)")
	opts.AddGuardFlags(cmd, "run every check")
	fl.StringVar(&opts.Reason, "reason", "", "why, for the audit log")
	return cmd
}

const groupsRemoveCommand = "groups remove"

func groupsRemoveRun(ctx context.Context, adm cmdutil.Admin, opts *GroupsRemoveOptions) error {
	r := &groupsRemove{GuardedAction: opts.Guarded(ctx, adm, groupsRemoveCommand), opts: opts}
	r.Exit = groupsExit
	r.InDoubt = cmdutil.MayOrMayNot("removal", fmt.Sprintf("'seqctl groups list --category %s'", opts.Category))
	r.Refusal.Stream, r.Refusal.Handler, r.Refusal.Reason = keyspace.SingleNode.CategoryStream(opts.Category), opts.Group, opts.Reason
	return r.Run(r)
}

// groupsRemove is one run of 'groups remove': the steps of a GuardedAction that are its
// own.
type groupsRemove struct {
	cmdutil.GuardedAction
	opts    *GroupsRemoveOptions
	group   *admin.Group       // read by plan
	removal admin.GroupRemoval // what plan checked, compared by the script
	res     *admin.GroupRemoved
}

// Plan reads the group and checks that it can be retired: registered, not declared
// by --config, no live lease, and the READ figure the operator inspected.
func (r *groupsRemove) Plan() error {
	opts := r.opts
	gs, err := r.Admin.Groups(r.Ctx, opts.Category)
	if err != nil {
		return r.Refuse(admin.OutcomeOf(err), err.Error(), cmdutil.ExitFor(err))
	}
	g, registered := findGroup(gs, opts.Group)
	switch {
	case g == nil || !g.Registered:
		hint := "no group is registered for " + opts.Category
		if len(registered) > 0 {
			hint = "the registered groups of " + opts.Category + " are " + strings.Join(registered, ", ")
		}
		return r.conflict(admin.OutcomeNotRegistered, fmt.Errorf("%w: %s is not registered for %s (%s); nothing changed",
			engine.ErrGroupNotRegistered, opts.Group, opts.Category, hint))
	case g.Declared != nil && *g.Declared:
		return r.conflict(admin.OutcomeDeclared, fmt.Errorf("%w: the config declares %s on %s; remove the handler from the domain (on every instance) first; nothing changed",
			admin.ErrGroupDeclared, opts.Group, opts.Category))
	case g.LiveLeases > 0:
		return r.conflict(admin.OutcomeLiveLease, fmt.Errorf("%w: %s holds %d live leases in %s: it is running; stop it first; nothing changed",
			engine.ErrGroupLive, opts.Group, g.LiveLeases, opts.Category))
	case opts.ExpectRead != nil && *opts.ExpectRead != g.Read:
		return r.conflict(admin.OutcomeReadMoved, &engine.GroupReadError{Group: opts.Group, Category: opts.Category, Expected: *opts.ExpectRead, Read: g.Read})
	}
	if opts.ExpectRead == nil && !cmdutil.Structured(opts.Output) {
		fmt.Fprintf(r.IO.ErrOut, "Consumer group %s of %s:\n", opts.Group, opts.Category)
		fmt.Fprintf(r.IO.ErrOut, "  registered, declared %s, no live lease, %d halted partitions\n", declaredText(g), g.Halted)
		fmt.Fprintf(r.IO.ErrOut, "  behind on %d of %d partitions: %s entries unread, %d pending; %d read\n",
			g.Behind, g.Partitions, cmdutil.LagCell(g.Unread), g.Pending, g.Read)
	}
	read := g.Read
	r.group = g
	r.removal = admin.GroupRemoval{Category: opts.Category, Group: opts.Group, ExpectRead: &read, Reason: opts.Reason, Actor: r.Who}
	return nil
}

// findGroup returns the group named name among gs (nil when there is none), and the
// names of the registered ones.
func findGroup(gs []admin.Group, name string) (g *admin.Group, registered []string) {
	for i := range gs {
		if gs[i].Registered {
			registered = append(registered, gs[i].Name)
		}
		if gs[i].Name == name {
			g = &gs[i]
		}
	}
	return g, registered
}

// conflict refuses with exit status 4, err its detail.
func (r *groupsRemove) conflict(outcome string, err error) error {
	return r.Refuse(outcome, err.Error(), &cmdutil.ExitError{Code: cmdutil.ExitConflict, Err: err})
}

// check runs the removal's script as a dry run: every check in Redis, nothing changed.
func (r *groupsRemove) check() (*admin.GroupRemoved, error) {
	check := r.removal
	check.DryRun = true
	res, err := r.Admin.RemoveGroup(r.Ctx, check)
	if err != nil {
		return nil, groupsExit(err)
	}
	return res, nil
}

func (r *groupsRemove) DryRun() error {
	res, err := r.check()
	if err != nil {
		return err
	}
	if cmdutil.Structured(r.Output) {
		return cmdutil.WriteData(r.IO.Out, r.Output, res)
	}
	fmt.Fprintf(r.IO.Out, "Would remove %s from %s: giving up %s unread and %d pending entries, destroying its consumer group on %d streams, deleting %d halt records. Nothing changed (--dry-run).\n",
		r.opts.Group, r.opts.Category, cmdutil.LagCell(r.group.Unread), r.group.Pending, res.Destroyed, res.Halts)
	return nil
}

func (r *groupsRemove) Confirmation() cmdutil.Confirmation {
	opts, g := r.opts, r.group
	return cmdutil.Confirmation{
		Refused: cmdutil.UsageErrorf("seqctl "+groupsRemoveCommand,
			"refusing to remove %s from %s without confirmation: stdin is not a terminal, pass --yes (and --expect-read %d to be sure of what you inspected); nothing changed",
			opts.Group, opts.Category, g.Read),
		RefusedDetail: "no terminal and no --yes",
		// Check before asking: a removal that would be refused (a live handler, Redis
		// Cluster) is refused now rather than after the operator said yes.
		Before: func() error {
			_, err := r.check()
			return err
		},
		Question:       fmt.Sprintf("Remove %s from %s, giving up its %s unread entries?", opts.Group, opts.Category, cmdutil.LagCell(g.Unread)),
		DeclinedDetail: "declined",
	}
}

func (r *groupsRemove) Act() (any, string, error) {
	res, err := r.Admin.RemoveGroup(r.Ctx, r.removal)
	if err != nil {
		return nil, "", err
	}
	r.res = res
	return res, res.AuditWarning, nil
}

func (r *groupsRemove) Done() string {
	return fmt.Sprintf("Removed %s from %s: its consumer group was destroyed on %d streams and %d halt records deleted. Trim and reap no longer wait for it.",
		r.opts.Group, r.opts.Category, r.res.Destroyed, r.res.Halts)
}

func declaredText(g *admin.Group) string {
	if g.Declared == nil {
		return "unknown (no --config)"
	}
	return yesNo(*g.Declared)
}

// groupsExit gives a 'groups remove' error its exit code: every refused check is a
// conflict (4); others as cmdutil.ExitFor says.
func groupsExit(err error) error {
	var ee *cmdutil.ExitError
	switch {
	case errors.As(err, &ee):
		return err
	case errors.Is(err, engine.ErrGroupNotRegistered), errors.Is(err, engine.ErrGroupLive),
		errors.Is(err, engine.ErrGroupRead), errors.Is(err, admin.ErrGroupDeclared):
		return &cmdutil.ExitError{Code: cmdutil.ExitConflict, Err: err}
	case errors.Is(err, engine.ErrNotSupported):
		// Redis Cluster: the engine's message says what to do by hand instead.
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: err}
	}
	return cmdutil.ExitFor(err)
}
