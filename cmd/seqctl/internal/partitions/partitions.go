// Package partitions is 'seqctl partitions': list and inspect partitions, and pause and
// resume them.
package partitions

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/tui"
)

// NewCmd returns the 'seqctl partitions' command with its subcommands.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	return cmdutil.GroupOf(&cobra.Command{
		Use:   "partitions <command>",
		Short: "List and inspect partitions: owner, lease, lag, pending entries, halts",
		Long: `List and inspect the partitions of a live deployment, read from Redis.

A partition is one partition key's stream ({category}:{key}, e.g. order:client-123),
seen by one handler (consumer group): each handler owns and drains a partition
independently. Categories and handlers come from --config, or without it from Redis:
categories from the *:__partitions__ discovery indexes, handlers from each category's
group registry.`,
		Example: `  # every halted partition
  $ seqctl partitions list --halted

  # everything about one partition
  $ seqctl partitions inspect order:client-123`,
	}, newCmdPartitionsList(f, nil), newCmdPartitionsInspect(f, nil),
		newCmdPartitionsPause(f, nil), newCmdPartitionsResume(f, nil))
}

// PartitionsListOptions are the inputs of 'seqctl partitions list'.
type PartitionsListOptions struct {
	cmdutil.OpsOptions
	Category string
	Handler  string
	Halted   bool
	// States keeps only these states (--state, repeatable or comma-separated).
	States []string
	// Key keeps only keys matching this glob (--key).
	Key   string
	Owner string
	// Sort is "name" (default), "backlog", "lag", "age" or "dlq".
	Sort string
	// Watch refreshes the list every Interval until interrupted.
	Watch    bool
	Interval time.Duration
	// Now stamps each refresh of --watch -o json (default time.Now).
	Now func() time.Time
	// RebuildIndex indexes the halted and paused partitions that predate the state
	// indexes before listing (--rebuild-index).
	RebuildIndex bool

	// SortGiven is set when --sort was given: the whole list is read, then sorted.
	SortGiven bool
}

// sortOrders are the values of partitions list --sort.
var sortOrders = []string{"name", "backlog", "lag", "age", "dlq"}

// partitionStates are the values of partitions list --state.
var partitionStates = []string{
	string(admin.StateRunning), string(admin.StateIdle), string(admin.StateHalted), string(admin.StatePaused),
	string(admin.StateThrottled), string(admin.StateUnowned),
}

// listLong and listExample are the help of 'partitions list'.
const (
	listLong = `List one row per (handler, partition), keys in natural order (client-2 before
client-10; see below for large lists):

  CATEGORY, KEY  the partition ({category}:{key} is its stream)
  HANDLER        the consumer group (handler or process manager)
  OWNER, GEN     the instance session that holds the lease and its fencing generation
                 (a long generation shows as its last six digits, …789012, the ones
                 that differ between owners; -o wide and a pipe print it whole)
  LEASE          time left on the owner's session; the lease dies with it
  BACKLOG        entries the handler has not handled yet: LAG + PENDING (? = unknown)
  LAG            entries not yet delivered to the handler (all lanes; ? = unknown)
  PENDING        entries delivered and not acknowledged: the one in the handler and
                 those read ahead with it (a halted partition keeps them pending)
  DLQ            entries in the partition's dead-letter stream
  HEAD AGE       age of the head entry: the halted one, else the oldest pending, else
                 the next undelivered
  STATE          halted     the handler halted on a poison head; see 'seqctl head show'
                 paused     an operator paused it ('seqctl partitions pause'): no event
                            starts until it is resumed or the pause ends
                 throttled  its owner holds its next event until a permit of the
                            handler's limit key is free ('seqctl limits get VALUE'),
                            as the owner's last heartbeat says
                 unowned    no live lease: nobody reads it until an instance takes it
                 running    owned, with work to do
                 idle       owned and caught up
                 (the first that applies, in this order)

-o wide adds, after STATE, the stream, the halted entry, its attempts and error,
who paused the partition, until when ("resumed": until a resume) and why, and the value
of the limit key a throttled partition waits for.
-o json and -o yaml print every field, null where a value is absent (see
docs/json-output.md); with --watch, -o json prints NDJSON: one JSON object per line,
every partition on the first refresh and then one per change (a partition that is
gone prints {"removed": true}), each with the time of its refresh. For a sequential
process manager the lease and the halt belong to the correlation value, so every
category row of a value shows them.

On a terminal the list is an aligned table; in a pipe it is tab-separated rows
without a header, unless -o table or -o wide asks for the table. --no-headers drops
the header.

The listing reads the partitions a page of about 1,000 keys at a time, a few
pipelined round trips per page. In a pipe and with -o json the rows are written as
each page is read, sorted within the page (memory stays that of a page, and the first
rows come at once); --sort (any order, name included), an aligned table and -o yaml
read the whole list first. If the listing fails halfway, -o json leaves its array
open, so that it cannot pass for the whole list.

--state halted, paused and throttled read their candidates from each category's
state index ({category}:__halted__, {category}:__paused__) and the instances'
registry, not from every partition, and check each against its record. A category
whose index was never rebuilt is read in full, with a note on stderr: after every
instance runs this version, run --rebuild-index once (see docs/operator-runbook.md).`

	listExample = `  # everything, as a table on a terminal or tab-separated rows in a pipe
  $ seqctl partitions list

  # halted partitions of one handler, as JSON
  $ seqctl partitions list --handler OrderProjector --state halted -o json

  # paused partitions, with who paused them, until when and why
  $ seqctl partitions list --state paused -o wide

  # partitions waiting for a permit of their handler's limit key, with the value
  $ seqctl partitions list --state throttled -o wide

  # after an upgrade, once: index the halts and pauses older than the state index
  $ seqctl partitions list --rebuild-index --state halted

  # keys of one client range that have work, biggest backlog first
  $ seqctl partitions list --key 'client-1*' --state running,unowned --sort backlog

  # the partitions one instance owns, refreshed every 2s, one JSON object per line
  $ seqctl partitions list --owner worker-7 --watch -o json`
)

func newCmdPartitionsList(f *cmdutil.Factory, runF func(*PartitionsListOptions) error) *cobra.Command {
	opts := &PartitionsListOptions{OpsOptions: f.OpsOptions()}
	cmd := &cobra.Command{
		Use:     "list [--category C] [--handler H] [--state S] [--key GLOB] [--owner ID] [--sort name|backlog|lag|age|dlq] [--watch]",
		Short:   "List partitions with owner, generation, lease, backlog, DLQ, head age and state",
		Long:    listLong,
		Example: listExample,
		Args:    cmdutil.NoArgs,
		RunE: cmdutil.OpsRunE(f, opts, func(cmd *cobra.Command, _ []string) error {
			opts.SortGiven = cmd.Flags().Changed("sort")
			return opts.check(cmd.CommandPath())
		}, runF, partitionsListRun),
	}
	opts.addFlags(cmd, f)
	return cmd
}

// addFlags binds the flags of 'partitions list' to o, with their completions.
func (o *PartitionsListOptions) addFlags(cmd *cobra.Command, f *cmdutil.Factory) {
	fl := cmd.Flags()
	fl.StringVar(&o.Category, "category", "", "only this category")
	fl.StringVar(&o.Handler, "handler", "", "only this handler (consumer group)")
	fl.BoolVar(&o.Halted, "halted", false, "only halted partitions (the same as --state halted)")
	fl.StringSliceVar(&o.States, "state", nil, "only partitions in these states: running, idle, halted, paused, throttled, unowned (repeat or separate with commas)")
	fl.StringVar(&o.Key, "key", "", "only keys matching this glob: * any run of characters, ? one, [a-z] a class")
	fl.StringVar(&o.Owner, "owner", "", "only partitions owned by this instance id (or session owner instance.N)")
	fl.StringVar(&o.Sort, "sort", "name", "order: name, backlog, lag (largest first), age (oldest head first) or dlq (longest first)")
	fl.BoolVarP(&o.Watch, "watch", "w", false, "refresh every --interval until interrupted")
	fl.DurationVar(&o.Interval, "interval", 2*time.Second, "refresh period of --watch")
	fl.BoolVar(&o.RebuildIndex, "rebuild-index", false, "first read every partition and index the halted and paused ones (once, after upgrading every instance)")
	_ = cmd.RegisterFlagCompletionFunc("category", cmdutil.CompleteCategories(f))
	_ = cmd.RegisterFlagCompletionFunc("handler", cmdutil.CompleteHandlers(f))
	_ = cmd.RegisterFlagCompletionFunc("owner", cmdutil.CompleteOwners(f))
	_ = cmd.RegisterFlagCompletionFunc("sort", cobra.FixedCompletions(sortOrders, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(partitionStates, cobra.ShellCompDirectiveNoFileComp))
}

// check validates the flags.
func (o *PartitionsListOptions) check(command string) error {
	if !slices.Contains(sortOrders, o.Sort) {
		return cmdutil.UsageErrorf(command, "invalid value %q for --sort: want %s", o.Sort, strings.Join(sortOrders, ", "))
	}
	for _, s := range o.States {
		if _, err := admin.ParseState(s); err != nil {
			return cmdutil.UsageErrorf(command, "invalid value for --state: %v", err)
		}
	}
	if o.Halted && len(o.States) > 0 && !slices.Contains(o.States, string(admin.StateHalted)) {
		return cmdutil.UsageErrorf(command, "--halted keeps only halted partitions and --state %s none of them: drop one of the two", strings.Join(o.States, ","))
	}
	if err := admin.CheckKeyGlob(o.Key); err != nil {
		return cmdutil.UsageErrorf(command, "invalid value for --key: %v", err)
	}
	if o.Interval <= 0 {
		return cmdutil.UsageErrorf(command, "--interval must be positive, got %v", o.Interval)
	}
	return nil
}

func partitionsListRun(ctx context.Context, adm cmdutil.Admin, opts *PartitionsListOptions) error {
	filter, err := listFilter(ctx, adm, opts)
	if err != nil {
		return err
	}
	if !opts.Watch && opts.streams() {
		return streamPartitions(ctx, adm, opts, filter)
	}
	if !opts.Watch {
		ps, err := adm.ListPartitions(ctx, filter)
		if err != nil {
			return cmdutil.ExitFor(err)
		}
		return printPartitions(opts, ps)
	}
	return watchPartitions(ctx, adm, opts, filter)
}

// listFilter builds the listing's filter from the options, after rebuilding the state
// indexes when asked; a state filter on a category whose index is not built notes, once,
// that every partition is read.
func listFilter(ctx context.Context, adm cmdutil.Admin, opts *PartitionsListOptions) (admin.Filter, error) {
	filter := admin.Filter{Category: opts.Category, Handler: opts.Handler, Halted: opts.Halted, Owner: opts.Owner, KeyGlob: opts.Key}
	for _, s := range opts.States {
		st, err := admin.ParseState(s)
		if err != nil {
			return filter, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
		}
		filter.States = append(filter.States, st)
	}
	if opts.RebuildIndex {
		rebuilt, err := adm.RebuildStateIndex(ctx, opts.Category)
		if err != nil {
			return filter, cmdutil.ExitFor(err)
		}
		for _, r := range rebuilt {
			fmt.Fprintf(opts.IO.ErrOut, "state index of %s rebuilt: %d halted, %d paused\n", r.Category, r.Halted, r.Paused)
		}
	}
	warned := map[string]bool{}
	filter.OnUnindexed = func(category string) {
		if !warned[category] {
			warned[category] = true
			fmt.Fprintf(opts.IO.ErrOut, "note: the state index of %s is not built, so every partition is read (slow at scale); once every instance runs this version, run 'seqctl partitions list --rebuild-index' once\n", category)
		}
	}
	return filter, nil
}

// watchPartitions lists the partitions every --interval until interrupted.
func watchPartitions(ctx context.Context, adm cmdutil.Admin, opts *PartitionsListOptions, filter admin.Filter) error {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	var nd ndjsonWatch
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for {
		ps, err := adm.ListPartitions(ctx, filter)
		if ctx.Err() != nil {
			return nil // interrupted: a watch ends cleanly
		}
		if err != nil {
			return cmdutil.ExitFor(err)
		}
		switch {
		case opts.Output == "json":
			// NDJSON: one object per line and per change, never a pretty array, so
			// 'jq -c' and line-oriented tools can follow the stream.
			if err := nd.write(opts.IO.Out, opts.Sort, ps, now()); err != nil {
				return err
			}
		case opts.Output == "yaml":
			fmt.Fprintln(opts.IO.Out, "---") // one YAML document per refresh
			if err := printPartitions(opts, ps); err != nil {
				return err
			}
		default:
			if opts.IO.IsTerminal {
				fmt.Fprint(opts.IO.Out, "\x1b[H\x1b[2J") // home and clear: redraw in place
				fmt.Fprintf(opts.IO.Out, "%s\n\n", opts.IO.Gray(fmt.Sprintf("every %v, %d partitions; Ctrl-C to stop", opts.Interval, len(ps))))
			}
			if err := printPartitions(opts, ps); err != nil {
				return err
			}
			if !opts.IO.IsTerminal {
				fmt.Fprintln(opts.IO.Out) // a blank line ends each refresh in a pipe
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ndjsonWatch prints --watch -o json: on the first refresh one compact JSON object per
// partition, one per line; after that only the partitions that changed (any field but
// the ever-moving lease_remaining_ms and head_age_ms), and a {"removed": true} object
// for each that is gone. Every object carries the time of its refresh ("observed_at",
// RFC 3339 in UTC).
type ndjsonWatch struct {
	last map[string]string // handler \x00 stream -> the object's stable fields
}

func (nw *ndjsonWatch) write(w io.Writer, sortBy string, ps []admin.Partition, at time.Time) error {
	admin.SortPartitions(ps, admin.SortBy(sortBy))
	stamp, _ := json.Marshal(at.UTC().Format(time.RFC3339Nano))
	bw := bufio.NewWriter(w)
	line := func(obj []byte) {
		bw.WriteString(`{"observed_at":`)
		bw.Write(stamp)
		bw.WriteByte(',')
		bw.Write(obj[1:])
		bw.WriteByte('\n')
	}
	seen := make(map[string]string, len(ps))
	for _, p := range ps {
		id := p.Handler + "\x00" + p.Stream
		stable := p
		stable.LeaseRemainingMS, stable.HeadAgeMS = 0, 0
		sig, err := json.Marshal(stable)
		if err != nil {
			return err
		}
		seen[id] = string(sig)
		if nw.last != nil && nw.last[id] == string(sig) {
			continue
		}
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		line(b)
	}
	var gone []string
	for id := range nw.last {
		if _, ok := seen[id]; !ok {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		var p admin.Partition
		_ = json.Unmarshal([]byte(nw.last[id]), &p)
		b, _ := json.Marshal(struct {
			Category string `json:"category"`
			Key      string `json:"key"`
			Stream   string `json:"stream"`
			Handler  string `json:"handler"`
			Removed  bool   `json:"removed"`
		}{p.Category, p.Key, p.Stream, p.Handler, true})
		line(b)
	}
	nw.last = seen
	return bw.Flush()
}

func printPartitions(opts *PartitionsListOptions, ps []admin.Partition) error {
	admin.SortPartitions(ps, admin.SortBy(opts.Sort))
	ios := opts.IO
	if done, err := cmdutil.WriteList(ios, opts.Output, ps, "No partitions match."); done {
		return err
	}
	return partitionTable(opts, ps).Render(ios.Out)
}

// partitionTable is the table of partitions ps, as -o and --no-headers ask.
func partitionTable(opts *PartitionsListOptions, ps []admin.Partition) interface{ Render(io.Writer) error } {
	ios := opts.IO
	wide := opts.Output == "wide"
	// STATE comes before the long columns of -o wide, so it stays on screen when an
	// error message is long.
	header := []string{"CATEGORY", "KEY", "HANDLER", "OWNER", "GEN", "LEASE", "BACKLOG", "LAG", "PENDING", "DLQ", "HEAD AGE", "STATE"}
	if wide {
		header = append(header, "STREAM", "HALTED ENTRY", "ATTEMPTS", "ERROR", "PAUSED BY", "UNTIL", "PAUSE REASON", "LIMIT VALUE")
	}
	t := cmdutil.NewTable(ios, opts.Layout(), header...)
	// The aligned table, read by a person, shows the last digits of a generation (the
	// ones that differ between owners) so a row fits a 120-column terminal; the rows of a
	// pipe, read by programs, and -o wide keep the whole number.
	shortGen := t.Aligned && !wide
	for _, p := range ps {
		row := []string{p.Category, p.Key, p.Handler, cmdutil.OrDash(p.Owner), genCell(p.Generation, shortGen), cmdutil.MSCell(p.LeaseRemainingMS, p.Owner != ""),
			cmdutil.LagCell(p.Backlog), cmdutil.LagCell(p.Lag), strconv.FormatInt(p.Pending, 10), strconv.FormatInt(p.DLQ, 10),
			cmdutil.MSCell(p.HeadAgeMS, p.HeadID != "" || p.HeadAgeMS > 0), stateCell(ios, p.State)}
		if wide {
			attempts, errText := "-", "-"
			if p.Halt != nil {
				attempts, errText = strconv.Itoa(p.Halt.Attempts), cmdutil.FirstLine(p.Halt.Error, 60)
			}
			row = append(row, p.Stream, cmdutil.OrDash(p.HaltedEntryID), attempts, errText)
			row = append(row, pauseCells(p.Pause)...)
			row = append(row, cmdutil.OrDash(p.LimitValue))
		}
		t.AddRow(row...)
	}
	return t
}

// genCell is a generation: "-" for none; short, as the dashboard's table shows it
// (tui.ShortGeneration: "…789012"), or whole.
func genCell(g int64, short bool) string {
	switch {
	case g == 0:
		return "-"
	case short:
		return tui.ShortGeneration(g)
	}
	return strconv.FormatInt(g, 10)
}

// pauseCells are the pause columns of -o wide: who paused, until when ("resumed": until
// a resume) and why; "-" when not paused.
func pauseCells(rec *engine.PauseRecord) []string {
	if rec == nil {
		return []string{"-", "-", "-"}
	}
	until := "resumed"
	if !rec.Until.IsZero() {
		until = cmdutil.FmtTime(&rec.Until)
	}
	return []string{cmdutil.OrDash(rec.By), until, cmdutil.FirstLine(rec.Reason, 60)}
}

func stateCell(ios *cmdutil.IOStreams, s admin.State) string {
	switch s {
	case admin.StateHalted, admin.StateUnowned:
		return ios.Red(string(s))
	case admin.StatePaused:
		return ios.Bold(string(s))
	case admin.StateThrottled:
		return ios.Yellow(string(s))
	case admin.StateRunning:
		return ios.Green(string(s))
	}
	return ios.Gray(string(s))
}

// PartitionsInspectOptions are the inputs of 'seqctl partitions inspect'.
type PartitionsInspectOptions struct {
	cmdutil.OpsOptions
	Stream  string
	Handler string // "" for every handler of the category
}

func newCmdPartitionsInspect(f *cmdutil.Factory, runF func(*PartitionsInspectOptions) error) *cobra.Command {
	opts := &PartitionsInspectOptions{OpsOptions: f.OpsOptions()}
	cmd := &cobra.Command{
		Use:   "inspect STREAM [--handler H]",
		Short: "Show a partition's lanes, groups, pending entries, halt record, lease and head",
		Long: `Show everything about one partition (STREAM is {category}:{key}, e.g.
order:client-123): its lanes (primary and backfill) with their lengths and first and
last ids; every consumer group with its last-delivered id, lag and pending count; and,
per handler, the lease (owner, generation, time left), the halt record (entry, reason,
attempts, since), the pause, the limit value a throttled partition waits for a permit
of, the pending entries with their delivery counts and idle times, and
the head entry's envelope. Also the length of the partition's DLQ.

Exit status 3 when the partition has no stream, no DLQ and is not indexed.`,
		Example: `  $ seqctl partitions inspect order:client-123

  # one handler, as JSON
  $ seqctl partitions inspect order:client-123 --handler OrderProjector -o json`,
		Args:              cmdutil.StreamArg,
		ValidArgsFunction: cmdutil.CompleteStreams(f),
		RunE:              cmdutil.OpsRunE(f, opts, cmdutil.TakeStream(&opts.Stream), runF, partitionsInspectRun),
	}
	cmd.Flags().StringVar(&opts.Handler, "handler", "", "only this handler (default: every handler of the category)")
	_ = cmd.RegisterFlagCompletionFunc("handler", cmdutil.CompleteHandlers(f))
	return cmd
}

func partitionsInspectRun(ctx context.Context, adm cmdutil.Admin, opts *PartitionsInspectOptions) error {
	ai, err := adm.Inspect(ctx, opts.Stream, opts.Handler)
	if err != nil {
		return cmdutil.ExitFor(err)
	}
	in := &inspection{Inspection: ai, Handlers: make([]handlerInspection, len(ai.Handlers))}
	for i, h := range ai.Handlers {
		in.Handlers[i].HandlerState = h
		if in.Handlers[i].Pause, err = adm.PauseOf(ctx, ai.Stream, h.Handler); err != nil {
			return cmdutil.ExitFor(err)
		}
	}
	if cmdutil.Structured(opts.Output) {
		return cmdutil.WriteData(opts.IO.Out, opts.Output, in)
	}
	// The labelled view everywhere: a pipe gets it without colour (-o json is for
	// scripts).
	return printInspection(opts.IO, in)
}

// inspection is what 'partitions inspect' prints: the admin's inspection, each handler
// with its pause record.
type inspection struct {
	*admin.Inspection
	Handlers []handlerInspection `json:"handlers"`
}

// handlerInspection is one handler's view of the partition and its pause record, nil
// when it is not paused.
type handlerInspection struct {
	admin.HandlerState
	Pause *engine.PauseRecord `json:"pause"`
}

// printInspection prints an inspection for a person.
func printInspection(ios *cmdutil.IOStreams, in *inspection) error {
	w := ios.Out
	where := "not in the discovery index"
	if in.Indexed {
		where = "indexed"
	}
	fmt.Fprintf(w, "%s  (category %s, key %s, %s)\n\n", ios.Bold(in.Stream), in.Category, cmdutil.OrDash(in.Key), where)
	t := cmdutil.AlignedTable(ios, "LANE", "STREAM", "LENGTH", "FIRST ID", "LAST ID")
	for _, l := range in.Lanes {
		t.AddRow(l.Kind, l.Stream, strconv.FormatInt(l.Length, 10), cmdutil.OrDash(l.FirstID), cmdutil.OrDash(l.LastID))
	}
	if err := t.Render(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = cmdutil.AlignedTable(ios, "STREAM", "GROUP", "LAST DELIVERED", "LAG", "PENDING", "CONSUMERS")
	for _, l := range in.Lanes {
		for _, g := range l.Groups {
			t.AddRow(l.Stream, g.Name, g.LastDeliveredID, cmdutil.LagCell(g.Lag), strconv.FormatInt(g.Pending, 10), strconv.FormatInt(g.Consumers, 10))
		}
	}
	if len(t.Rows) > 0 {
		if err := t.Render(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	for _, h := range in.Handlers {
		if err := printHandlerInspection(ios, h); err != nil {
			return err
		}
	}
	if in.DLQStream != "" {
		fmt.Fprintf(w, "DLQ %s: %d entries\n", in.DLQStream, in.DLQLength)
	}
	return nil
}

// printHandlerInspection prints one handler's view of an inspected partition.
func printHandlerInspection(ios *cmdutil.IOStreams, h handlerInspection) error {
	w := ios.Out
	kind := "handler"
	if h.ProcessManager {
		kind = "process manager"
	}
	fmt.Fprintf(w, "%s %s  %s\n", kind, ios.Bold(h.Handler), stateCell(ios, h.State))
	if h.ProcessManager {
		fmt.Fprintf(w, "  unit        %s\n", h.Unit)
	}
	switch l := h.Lease; {
	case l == nil:
		fmt.Fprintln(w, "  lease       none")
	case l.Live:
		fmt.Fprintf(w, "  lease       %s, generation %d, %s left\n", l.Owner, l.Generation, cmdutil.FmtMS(l.RemainingMS))
	default:
		fmt.Fprintf(w, "  lease       %s, generation %d, void (the owner's session expired)\n", l.Owner, l.Generation)
	}
	if hr := h.Halt; hr != nil {
		fmt.Fprintf(w, "  halted      on %s (%s) after %d attempts, since %s\n", hr.EntryID, hr.Stream, hr.Attempts, cmdutil.FmtTime(&hr.Since))
		fmt.Fprintf(w, "  reason      %s\n", cmdutil.IndentRest(hr.Error, "              "))
	}
	if h.LimitValue != "" {
		fmt.Fprintf(w, "  throttled   waiting for a permit of limit value %s ('seqctl limits get %s --handler %s')\n", h.LimitValue, h.LimitValue, h.Handler)
	}
	if pr := h.Pause; pr != nil {
		fmt.Fprintf(w, "  paused      by %s since %s, %s\n", cmdutil.OrDash(pr.By), cmdutil.FmtTime(&pr.Since), untilRecord(pr))
		fmt.Fprintf(w, "  why         %s\n", cmdutil.IndentRest(pr.Reason, "              "))
	}
	fmt.Fprintf(w, "  pending     %d\n", h.PendingTotal)
	if len(h.Pending) > 0 {
		t := cmdutil.AlignedTable(ios, "    ID", "LANE", "CONSUMER", "DELIVERIES", "IDLE")
		for _, p := range h.Pending {
			t.AddRow("    "+p.ID, p.Lane, p.Consumer, strconv.FormatInt(p.Deliveries, 10), cmdutil.FmtMS(p.IdleMS))
		}
		if err := t.Render(w); err != nil {
			return err
		}
	}
	if hd := h.Head; hd != nil {
		fmt.Fprintf(w, "  head        %s on %s: %s, %d attempts, age %s\n", hd.ID, hd.Lane, hd.Status, hd.Attempts, cmdutil.FmtMS(hd.AgeMS))
		fmt.Fprintf(w, "  event       %s\n", cmdutil.EnvelopeLine(hd.Envelope))
		fmt.Fprintf(w, "  payload     %s\n", cmdutil.CompactJSON(hd.Envelope.Data))
	} else {
		fmt.Fprintln(w, "  head        none: caught up")
	}
	fmt.Fprintln(w)
	return nil
}
