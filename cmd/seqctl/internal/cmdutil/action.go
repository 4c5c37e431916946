package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// GuardedAction is the skeleton every operator command that changes something runs:
// 'head skip|dlq|retry', 'dlq replay' (one entry or --all), 'dlq purge' and 'groups
// remove'. Its steps, in this order:
//
//  1. plan: read what the action would change and check it. A failed check is refused:
//     recorded in the audit log (refuse), and nothing changes.
//  2. --dry-run: say what would happen; change and record nothing.
//  3. confirm, without --yes: ask on a terminal; without one, refuse (exit status 2). A
//     refusal and a "no" are recorded in the audit log, and nothing changes.
//  4. act: the compare-and-act. When the connection fails during it, the error says
//     that it may or may not have been applied and how to check (InDoubt).
//  5. report: the warning the act came back with, then the result: -o json|yaml prints
//     its data, anything else a ✓ and one sentence.
//
// A command fills in the fields below and keeps what is its own in a guardedSteps; run
// does the rest, the same way for every command.
type GuardedAction struct {
	Ctx    context.Context
	IO     *IOStreams
	Admin  Admin
	Output string
	// Who runs the action: the actor its act and its audit records name.
	Who admin.Actor
	// yes skips the confirmation (--yes); DryRun stops after the plan (--dry-run).
	yes, dryRun bool
	// Refusal is the audit entry of an attempt that stops before the act: who, and the
	// stream, handler, entry and reason as far as the command knows them (a plan may
	// fill in more). refuse adds the outcome and the detail.
	Refusal admin.AuditEntry
	// DetailPrefix starts the detail of every recorded refusal (e.g. "force; ").
	DetailPrefix string
	// QuietAudit prints no warning when a refusal cannot be recorded (so does 'dlq
	// replay --all', unlike the other commands).
	QuietAudit bool
	// InDoubt completes "the connection failed during " when Redis becomes unavailable
	// during the act: what was under way, what may have happened and how to check. ""
	// leaves that error as it is.
	InDoubt string
	// Exit gives an error of the act its exit code (nil: ExitFor).
	Exit func(error) error
}

// guardedSteps are the parts of a guarded action that are a command's own.
type guardedSteps interface {
	// plan reads what the action would change and checks it; a failed check returns
	// what refuse returns.
	Plan() error
	// DryRun prints what the action would do.
	DryRun() error
	// confirmation is what the confirm step asks and records.
	Confirmation() Confirmation
	// act performs the action. It returns what -o json|yaml prints and the warning the
	// action came back with ("" for none).
	Act() (data any, warning string, err error)
	// done is the sentence that reports what act did, after a ✓.
	Done() string
}

// Confirmation is what the confirm step of a guarded action asks, and what it records
// when the action does not go ahead.
type Confirmation struct {
	// Refused is the usage error without --yes and without a terminal to ask on;
	// RefusedDetail is its audit detail.
	Refused       error
	RefusedDetail string
	// Before runs on a terminal before the question: it says what is at stake, or checks
	// that the action would not be refused after a yes. nil: nothing.
	Before func() error
	// Question is asked on the terminal; a no is recorded with DeclinedDetail.
	Question       string
	DeclinedDetail string
}

// CancelledText is the error of a "no" to the confirmation.
const CancelledText = "cancelled; nothing changed"

// Run runs the steps of the action; see GuardedAction.
func (g *GuardedAction) Run(steps guardedSteps) error {
	if err := steps.Plan(); err != nil {
		return err
	}
	if g.dryRun {
		return steps.DryRun()
	}
	if !g.yes {
		if err := g.confirm(steps.Confirmation()); err != nil {
			return err
		}
	}
	data, warning, err := steps.Act()
	if err != nil {
		return g.actFailed(err)
	}
	if warning != "" {
		fmt.Fprintf(g.IO.ErrOut, "warning: %s\n", warning)
	}
	if Structured(g.Output) {
		return WriteData(g.IO.Out, g.Output, data)
	}
	fmt.Fprintf(g.IO.Out, "%s %s\n", g.IO.Green("✓"), steps.Done())
	return nil
}

// confirm asks the question of c on a terminal; without one it refuses. A refusal and a
// "no" are recorded.
func (g *GuardedAction) confirm(c Confirmation) error {
	if !g.IO.InIsTerminal {
		return g.Refuse(admin.OutcomeRefused, c.RefusedDetail, c.Refused)
	}
	if c.Before != nil {
		if err := c.Before(); err != nil {
			return err
		}
	}
	ok, err := confirm(g.IO, c.Question)
	if err != nil {
		return err
	}
	if !ok {
		return g.Refuse(admin.OutcomeDeclined, c.DeclinedDetail, errors.New(CancelledText))
	}
	return nil
}

// actFailed words an error of the act and gives it its exit code.
func (g *GuardedAction) actFailed(err error) error {
	if g.InDoubt != "" && errors.Is(err, engine.ErrRedisUnavailable) {
		return fmt.Errorf("%w\nthe connection failed during %s", err, g.InDoubt)
	}
	if g.Exit != nil {
		return g.Exit(err)
	}
	return ExitFor(err)
}

// Refuse records an attempt that stops before the act, with outcome and detail, and
// returns err. A dry run records nothing.
func (g *GuardedAction) Refuse(outcome, detail string, err error) error {
	if g.dryRun {
		return err
	}
	rec := g.Refusal
	rec.Outcome, rec.Detail = outcome, g.DetailPrefix+detail
	if aerr := g.Admin.Record(g.Ctx, rec); aerr != nil && !g.QuietAudit {
		fmt.Fprintf(g.IO.ErrOut, "warning: the refused attempt was not recorded in the audit log: %v\n", aerr)
	}
	return err
}

// RefuseErr is refuse with the error's text as the detail.
func (g *GuardedAction) RefuseErr(outcome string, err error) error {
	return g.Refuse(outcome, err.Error(), err)
}

// MayOrMayNot is the InDoubt of an action whose effect an operator can look up: what
// was under way, and the command that shows whether it was applied.
func MayOrMayNot(what, check string) string {
	return fmt.Sprintf("the %s: it may or may not have been applied; check with %s and 'seqctl audit'", what, check)
}

// GuardedOptions are the inputs of an operator command that runs a GuardedAction: those
// of every operator command, --yes and --dry-run.
type GuardedOptions struct {
	OpsOptions
	// Yes skips the confirmation; required when stdin is not a terminal.
	Yes bool
	// DryRun prints what would happen and changes nothing.
	DryRun bool
}

// GuardedOptions returns the inputs of a guarded operator command built by f.
func (f *Factory) GuardedOptions() GuardedOptions {
	return GuardedOptions{OpsOptions: f.OpsOptions()}
}

// AddGuardFlags adds the flags of every guarded action: --yes, and --dry-run, which
// does dryRunDoes ("print what would happen") and changes nothing.
func (o *GuardedOptions) AddGuardFlags(cmd *cobra.Command, dryRunDoes string) {
	cmd.Flags().BoolVarP(&o.Yes, "yes", "y", false, "do not ask for confirmation (required without a terminal)")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, dryRunDoes+"; change nothing")
}

// Guarded starts the guarded action of 'seqctl command', with the operator API adm
// connected in ctx: its streams, -o, --yes and --dry-run, who runs it (see Actor), and
// the audit entry of its refusals, which the command completes.
func (o *GuardedOptions) Guarded(ctx context.Context, adm Admin, command string) GuardedAction {
	who := Actor(command)
	return GuardedAction{Ctx: ctx, IO: o.IO, Admin: adm, Output: o.Output, Who: who, yes: o.Yes, dryRun: o.DryRun, Refusal: who.Entry()}
}

// Actor says who runs a command, for the audit log: the operating-system user and host.
func Actor(command string) admin.Actor {
	a := admin.Actor{Command: command, User: os.Getenv("USER")}
	if u, err := user.Current(); err == nil && u.Username != "" {
		a.User = u.Username
	}
	a.Host, _ = os.Hostname()
	return a
}
