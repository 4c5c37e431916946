package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// guardedAction is the skeleton every operator command that changes something runs:
// 'head skip|dlq|retry', 'dlq replay' (one entry or --all), 'dlq purge' and 'groups
// remove'. Its steps, in this order:
//
//  1. plan: read what the action would change and check it. A failed check is refused:
//     recorded in the audit log (refuse), and nothing changes.
//  2. --dry-run: say what would happen; change and record nothing.
//  3. confirm, without --yes: ask on a terminal; without one, refuse (exit status 2). A
//     refusal and a "no" are recorded in the audit log, and nothing changes.
//  4. act: the compare-and-act. When the connection fails during it, the error says
//     that it may or may not have been applied and how to check (inDoubt).
//  5. report: the warning the act came back with, then the result: -o json|yaml prints
//     its data, anything else a ✓ and one sentence.
//
// A command fills in the fields below and keeps what is its own in a guardedSteps; run
// does the rest, the same way for every command.
type guardedAction struct {
	ctx    context.Context
	ios    *IOStreams
	adm    Admin
	output string
	// who runs the action: the actor its act and its audit records name.
	who admin.Actor
	// yes skips the confirmation (--yes); dryRun stops after the plan (--dry-run).
	yes, dryRun bool
	// refusal is the audit entry of an attempt that stops before the act: who, and the
	// stream, handler, entry and reason as far as the command knows them (a plan may
	// fill in more). refuse adds the outcome and the detail.
	refusal admin.AuditEntry
	// detailPrefix starts the detail of every recorded refusal (e.g. "force; ").
	detailPrefix string
	// quietAudit prints no warning when a refusal cannot be recorded (so does 'dlq
	// replay --all', unlike the other commands).
	quietAudit bool
	// inDoubt completes "the connection failed during " when Redis becomes unavailable
	// during the act: what was under way, what may have happened and how to check. ""
	// leaves that error as it is.
	inDoubt string
	// exit gives an error of the act its exit code (nil: exitFor).
	exit func(error) error
}

// guardedSteps are the parts of a guarded action that are a command's own.
type guardedSteps interface {
	// plan reads what the action would change and checks it; a failed check returns
	// what refuse returns.
	plan() error
	// dryRun prints what the action would do.
	dryRun() error
	// confirmation is what the confirm step asks and records.
	confirmation() confirmation
	// act performs the action. It returns what -o json|yaml prints and the warning the
	// action came back with ("" for none).
	act() (data any, warning string, err error)
	// done is the sentence that reports what act did, after a ✓.
	done() string
}

// confirmation is what the confirm step of a guarded action asks, and what it records
// when the action does not go ahead.
type confirmation struct {
	// refused is the usage error without --yes and without a terminal to ask on;
	// refusedDetail is its audit detail.
	refused       error
	refusedDetail string
	// before runs on a terminal before the question: it says what is at stake, or checks
	// that the action would not be refused after a yes. nil: nothing.
	before func() error
	// question is asked on the terminal; a no is recorded with declinedDetail.
	question       string
	declinedDetail string
}

// cancelledText is the error of a "no" to the confirmation.
const cancelledText = "cancelled; nothing changed"

// run runs the steps of the action; see guardedAction.
func (g *guardedAction) run(steps guardedSteps) error {
	if err := steps.plan(); err != nil {
		return err
	}
	if g.dryRun {
		return steps.dryRun()
	}
	if !g.yes {
		if err := g.confirm(steps.confirmation()); err != nil {
			return err
		}
	}
	data, warning, err := steps.act()
	if err != nil {
		return g.actFailed(err)
	}
	if warning != "" {
		fmt.Fprintf(g.ios.ErrOut, "warning: %s\n", warning)
	}
	if structured(g.output) {
		return writeData(g.ios.Out, g.output, data)
	}
	fmt.Fprintf(g.ios.Out, "%s %s\n", g.ios.Green("✓"), steps.done())
	return nil
}

// confirm asks the question of c on a terminal; without one it refuses. A refusal and a
// "no" are recorded.
func (g *guardedAction) confirm(c confirmation) error {
	if !g.ios.InIsTerminal {
		return g.refuse(admin.OutcomeRefused, c.refusedDetail, c.refused)
	}
	if c.before != nil {
		if err := c.before(); err != nil {
			return err
		}
	}
	ok, err := confirm(g.ios, c.question)
	if err != nil {
		return err
	}
	if !ok {
		return g.refuse(admin.OutcomeDeclined, c.declinedDetail, errors.New(cancelledText))
	}
	return nil
}

// actFailed words an error of the act and gives it its exit code.
func (g *guardedAction) actFailed(err error) error {
	if g.inDoubt != "" && errors.Is(err, engine.ErrRedisUnavailable) {
		return fmt.Errorf("%w\nthe connection failed during %s", err, g.inDoubt)
	}
	if g.exit != nil {
		return g.exit(err)
	}
	return exitFor(err)
}

// refuse records an attempt that stops before the act, with outcome and detail, and
// returns err. A dry run records nothing.
func (g *guardedAction) refuse(outcome, detail string, err error) error {
	if g.dryRun {
		return err
	}
	rec := g.refusal
	rec.Outcome, rec.Detail = outcome, g.detailPrefix+detail
	if aerr := g.adm.Record(g.ctx, rec); aerr != nil && !g.quietAudit {
		fmt.Fprintf(g.ios.ErrOut, "warning: the refused attempt was not recorded in the audit log: %v\n", aerr)
	}
	return err
}

// refuseErr is refuse with the error's text as the detail.
func (g *guardedAction) refuseErr(outcome string, err error) error {
	return g.refuse(outcome, err.Error(), err)
}

// mayOrMayNot is the inDoubt of an action whose effect an operator can look up: what
// was under way, and the command that shows whether it was applied.
func mayOrMayNot(what, check string) string {
	return fmt.Sprintf("the %s: it may or may not have been applied; check with %s and 'seqctl audit'", what, check)
}

// GuardedOptions are the inputs of an operator command that runs a guardedAction: those
// of every operator command, --yes and --dry-run.
type GuardedOptions struct {
	OpsOptions
	// Yes skips the confirmation; required when stdin is not a terminal.
	Yes bool
	// DryRun prints what would happen and changes nothing.
	DryRun bool
}

// guardedOptions returns the inputs of a guarded operator command built by f.
func (f *Factory) guardedOptions() GuardedOptions {
	return GuardedOptions{OpsOptions: f.opsOptions()}
}

// addGuardFlags adds the flags of every guarded action: --yes, and --dry-run, which
// does dryRunDoes ("print what would happen") and changes nothing.
func (o *GuardedOptions) addGuardFlags(cmd *cobra.Command, dryRunDoes string) {
	cmd.Flags().BoolVarP(&o.Yes, "yes", "y", false, "do not ask for confirmation (required without a terminal)")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, dryRunDoes+"; change nothing")
}

// guarded starts the guarded action of 'seqctl command', with the operator API adm
// connected in ctx: its streams, -o, --yes and --dry-run, who runs it (see actor), and
// the audit entry of its refusals, which the command completes.
func (o *GuardedOptions) guarded(ctx context.Context, adm Admin, command string) guardedAction {
	who := actor(command)
	return guardedAction{ctx: ctx, ios: o.IO, adm: adm, output: o.Output, who: who, yes: o.Yes, dryRun: o.DryRun, refusal: auditEntryBy(who)}
}

// auditEntryBy starts the audit entry of an action by who: the user, the host and the
// command.
func auditEntryBy(who admin.Actor) admin.AuditEntry {
	return admin.AuditEntry{User: who.User, Host: who.Host, Command: who.Command}
}
