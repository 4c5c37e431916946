package cmdutil

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/seqctl/seqctl/pkg/admin"
)

// An operator action over several partitions ('partitions pause|resume', 'head retry
// --category') selects them with --key and --category, for the handler of each category,
// lists them before asking, and acts on them one at a time, each on its own and audited
// on its own: a partition refused does not stop the others. What they share is here.

// Selection is what --key (a glob over the keys), --category and --handler select.
type Selection struct {
	Key, Category, Handler string
}

// Set says a partition selector (--key or --category) was given.
func (s Selection) Set() bool { return s.Key != "" || s.Category != "" }

// String says what was selected: "--category order --key acme-*".
func (s Selection) String() string {
	var parts []string
	if s.Category != "" {
		parts = append(parts, "--category "+s.Category)
	}
	if s.Key != "" {
		parts = append(parts, "--key "+s.Key)
	}
	if s.Handler != "" {
		parts = append(parts, "--handler "+s.Handler)
	}
	return strings.Join(parts, " ")
}

// Targets lists the partitions the selection picks, in name order, in one of states
// (any state when there is none) and kept by keep (every one when nil), for the handler
// of each category: --handler, else the category's only handler (several are a usage
// error of command). It may be empty.
func (s Selection) Targets(ctx context.Context, adm Admin, command string, states []admin.State, keep func(*admin.Partition) bool) ([]PartitionTarget, error) {
	ps, err := adm.ListPartitions(ctx, admin.Filter{Category: s.Category, Handler: s.Handler, KeyGlob: s.Key, States: states})
	if err != nil {
		return nil, ExitFor(err)
	}
	admin.SortPartitions(ps, admin.SortName)
	handlers := map[string]string{} // category -> the handler acted for
	var out []PartitionTarget
	for i := range ps {
		p := &ps[i]
		h, ok := handlers[p.Category]
		if !ok {
			if h, err = ResolveHandler(ctx, adm, command, p.Category, s.Handler); err != nil {
				return nil, err
			}
			handlers[p.Category] = h
		}
		if p.Handler != h || keep != nil && !keep(p) {
			continue
		}
		out = append(out, PartitionTarget{Stream: p.Stream, Handler: h, Row: p})
	}
	return out, nil
}

// None is the error of a selection that picks no noun ("paused partition"): not found,
// nothing to verb.
func (s Selection) None(noun, verb string) error {
	return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no %s matches %s: nothing to %s", noun, s, verb)}
}

// PartitionTarget is one partition an action acts on, for one handler.
type PartitionTarget struct {
	Stream, Handler string
	// Row is the partition as listed before the action; nil when the listing has none
	// (no stream yet, or not in the discovery index).
	Row *admin.Partition
}

func (t PartitionTarget) String() string { return t.Stream + " for " + t.Handler }

// targetList names up to n targets, comma-separated, "…" for the rest.
func targetList(ts []PartitionTarget, n int) string {
	names := make([]string, 0, min(len(ts), n)+1)
	for i, t := range ts {
		if i == n {
			names = append(names, fmt.Sprintf("… %d more", len(ts)-n))
			break
		}
		names = append(names, t.Stream)
	}
	return strings.Join(names, ", ")
}

// Batch is the account of an action over partitions done one at a time: its targets,
// how many were done, and the refusals.
type Batch struct {
	Targets []PartitionTarget
	NDone   int // partitions done
	// firstRefusal is the error of the first partition refused, refusedAt its target;
	// refusals counts them.
	firstRefusal error
	refusedAt    PartitionTarget
	Refusals     int
}

// Many says the action concerns several partitions: each is reported on its own line.
func (b *Batch) Many() bool { return len(b.Targets) > 1 }

// What names the partitions in a sentence.
func (b *Batch) What() string {
	if b.Many() {
		return fmt.Sprintf("%d partitions", len(b.Targets))
	}
	return b.Targets[0].String()
}

// AuditPrefix starts the detail of an audit record of the whole action: "4 partitions
// (order:a, order:b, …); ".
func (b *Batch) AuditPrefix() string {
	return b.What() + " (" + targetList(b.Targets, 10) + "); "
}

// Refused notes that target t was refused with err.
func (b *Batch) Refused(t PartitionTarget, err error) {
	if b.Refusals == 0 {
		b.firstRefusal, b.refusedAt = err, t
	}
	b.Refusals++
}

// RefusalErr is the error the command ends with when partitions were refused: the exit
// status of the first refusal, as exit gives it; nil when none was. past is the verb's
// past ("paused").
func (b *Batch) RefusalErr(exit func(error) error, past string) error {
	if b.Refusals == 0 {
		return nil
	}
	first := exit(b.firstRefusal)
	if !b.Many() {
		return first
	}
	return &ExitError{Code: ExitCode(first), Err: fmt.Errorf("%d of %d partitions were not %s; the first: %s: %w",
		b.Refusals, len(b.Targets), past, b.refusedAt, b.firstRefusal)}
}

// FailedAt is the error of an action that err stopped at target t (see admin.StopsAll).
func (b *Batch) FailedAt(past string, t PartitionTarget, err error) error {
	if !b.Many() {
		return err
	}
	return fmt.Errorf("%s %d of %d partitions (%d refused); %s failed: %w", past, b.NDone, len(b.Targets), b.Refusals, t, err)
}

// describeMax is how many partitions the confirmation lists before it counts the rest.
const describeMax = 20

// List writes the first describeMax targets, one a line with what row says of it, and
// counts the rest.
func (b *Batch) List(w io.Writer, row func(PartitionTarget) string) {
	for i, t := range b.Targets {
		if i == describeMax {
			fmt.Fprintf(w, "  … and %d more (--dry-run lists them all)\n", len(b.Targets)-describeMax)
			return
		}
		fmt.Fprintf(w, "  %s (%s)\n", t, row(t))
	}
}

// Confirmation is what the confirm step of an action over partitions asks: verb them
// (describe says first, on stderr, which and what it does); command is the command path
// of the usage error without a terminal.
func (b *Batch) Confirmation(ios *IOStreams, command, verb string, describe func(io.Writer)) Confirmation {
	refused := UsageErrorf(command,
		"refusing to %s %s without confirmation: stdin is not a terminal, pass --yes (--dry-run shows what it would do); nothing changed",
		verb, b.What())
	return Confirmation{
		Refused: refused, RefusedDetail: "no terminal and no --yes",
		Before: func() error {
			describe(ios.ErrOut)
			return nil
		},
		Question:       fmt.Sprintf("%s %s?", Capitalize(verb), b.What()),
		DeclinedDetail: CancelledText,
	}
}
