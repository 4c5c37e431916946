package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// An operator action over several partitions ('partitions pause|resume', 'head retry
// --category') selects them with --key and --category, for the handler of each category,
// lists them before asking, and acts on them one at a time, each on its own and audited
// on its own: a partition refused does not stop the others. What they share is here.

// selection is what --key (a glob over the keys), --category and --handler select.
type selection struct {
	Key, Category, Handler string
}

// set says a partition selector (--key or --category) was given.
func (s selection) set() bool { return s.Key != "" || s.Category != "" }

// String says what was selected: "--category order --key acme-*".
func (s selection) String() string {
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

// targets lists the partitions the selection picks, in name order, in one of states
// (any state when there is none) and kept by keep (every one when nil), for the handler
// of each category: --handler, else the category's only handler (several are a usage
// error of command). It may be empty.
func (s selection) targets(ctx context.Context, adm Admin, command string, states []admin.State, keep func(*admin.Partition) bool) ([]partitionTarget, error) {
	ps, err := adm.ListPartitions(ctx, admin.Filter{Category: s.Category, Handler: s.Handler, KeyGlob: s.Key, States: states})
	if err != nil {
		return nil, exitFor(err)
	}
	admin.SortPartitions(ps, admin.SortName)
	handlers := map[string]string{} // category -> the handler acted for
	var out []partitionTarget
	for i := range ps {
		p := &ps[i]
		h, ok := handlers[p.Category]
		if !ok {
			if h, err = resolveHandler(ctx, adm, command, p.Category, s.Handler); err != nil {
				return nil, err
			}
			handlers[p.Category] = h
		}
		if p.Handler != h || keep != nil && !keep(p) {
			continue
		}
		out = append(out, partitionTarget{stream: p.Stream, handler: h, row: p})
	}
	return out, nil
}

// none is the error of a selection that picks no noun ("paused partition"): not found,
// nothing to verb.
func (s selection) none(noun, verb string) error {
	return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no %s matches %s: nothing to %s", noun, s, verb)}
}

// partitionTarget is one partition an action acts on, for one handler.
type partitionTarget struct {
	stream, handler string
	// row is the partition as listed before the action; nil when the listing has none
	// (no stream yet, or not in the discovery index).
	row *admin.Partition
}

func (t partitionTarget) String() string { return t.stream + " for " + t.handler }

// targetList names up to n targets, comma-separated, "…" for the rest.
func targetList(ts []partitionTarget, n int) string {
	names := make([]string, 0, min(len(ts), n)+1)
	for i, t := range ts {
		if i == n {
			names = append(names, fmt.Sprintf("… %d more", len(ts)-n))
			break
		}
		names = append(names, t.stream)
	}
	return strings.Join(names, ", ")
}

// batch is the account of an action over partitions done one at a time: its targets,
// how many were done, and the refusals.
type batch struct {
	targets []partitionTarget
	nDone   int // partitions done
	// firstRefusal is the error of the first partition refused, refusedAt its target;
	// refusals counts them.
	firstRefusal error
	refusedAt    partitionTarget
	refusals     int
}

// many says the action concerns several partitions: each is reported on its own line.
func (b *batch) many() bool { return len(b.targets) > 1 }

// what names the partitions in a sentence.
func (b *batch) what() string {
	if b.many() {
		return fmt.Sprintf("%d partitions", len(b.targets))
	}
	return b.targets[0].String()
}

// auditPrefix starts the detail of an audit record of the whole action: "4 partitions
// (order:a, order:b, …); ".
func (b *batch) auditPrefix() string {
	return b.what() + " (" + targetList(b.targets, 10) + "); "
}

// refused notes that target t was refused with err.
func (b *batch) refused(t partitionTarget, err error) {
	if b.refusals == 0 {
		b.firstRefusal, b.refusedAt = err, t
	}
	b.refusals++
}

// refusalErr is the error the command ends with when partitions were refused: the exit
// status of the first refusal, as exit gives it; nil when none was. past is the verb's
// past ("paused").
func (b *batch) refusalErr(exit func(error) error, past string) error {
	if b.refusals == 0 {
		return nil
	}
	first := exit(b.firstRefusal)
	if !b.many() {
		return first
	}
	return &ExitError{Code: ExitCode(first), Err: fmt.Errorf("%d of %d partitions were not %s; the first: %s: %w",
		b.refusals, len(b.targets), past, b.refusedAt, b.firstRefusal)}
}

// failedAt is the error of an action that err stopped at target t (see stopsAll).
func (b *batch) failedAt(past string, t partitionTarget, err error) error {
	if !b.many() {
		return err
	}
	return fmt.Errorf("%s %d of %d partitions (%d refused); %s failed: %w", past, b.nDone, len(b.targets), b.refusals, t, err)
}

// stopsAll says an error of one partition stops the action: Redis is unavailable, or
// the command was interrupted.
func stopsAll(err error) bool {
	return errors.Is(err, engine.ErrRedisUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// describeMax is how many partitions the confirmation lists before it counts the rest.
const describeMax = 20

// list writes the first describeMax targets, one a line with what row says of it, and
// counts the rest.
func (b *batch) list(w io.Writer, row func(partitionTarget) string) {
	for i, t := range b.targets {
		if i == describeMax {
			fmt.Fprintf(w, "  … and %d more (--dry-run lists them all)\n", len(b.targets)-describeMax)
			return
		}
		fmt.Fprintf(w, "  %s (%s)\n", t, row(t))
	}
}

// confirmation is what the confirm step of an action over partitions asks: verb them
// (describe says first, on stderr, which and what it does); command is the command path
// of the usage error without a terminal.
func (b *batch) confirmation(ios *IOStreams, command, verb string, describe func(io.Writer)) confirmation {
	refused := usageErrorf(command,
		"refusing to %s %s without confirmation: stdin is not a terminal, pass --yes (--dry-run shows what it would do); nothing changed",
		verb, b.what())
	return confirmation{
		refused: refused, refusedDetail: "no terminal and no --yes",
		before: func() error {
			describe(ios.ErrOut)
			return nil
		},
		question:       fmt.Sprintf("%s %s?", capitalize(verb), b.what()),
		declinedDetail: cancelledText,
	}
}
