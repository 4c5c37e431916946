package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/pkg/admin"
)

func newCmdPartitions(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
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
		Args: cobra.ArbitraryArgs,
		RunE: groupCommand,
	}
	cmd.AddCommand(newCmdPartitionsList(f, nil), newCmdPartitionsInspect(f, nil))
	return cmd
}

// PartitionsListOptions are the inputs of 'seqctl partitions list'.
type PartitionsListOptions struct {
	IO    *IOStreams
	Admin AdminOpener
	// Output is "", "table", "wide" or "json" (-o).
	Output   string
	Category string
	Handler  string
	Halted   bool
	Owner    string
	// Sort is "name" (default), "lag" or "age".
	Sort string
	// Watch refreshes the list every Interval until interrupted.
	Watch    bool
	Interval time.Duration
	// Ctx is the command's context (tests cancel it to end a watch).
	Ctx context.Context
}

func newCmdPartitionsList(f *Factory, runF func(*PartitionsListOptions) error) *cobra.Command {
	opts := &PartitionsListOptions{IO: f.IOStreams, Admin: f.openAdmin}
	cmd := &cobra.Command{
		Use:   "list [--category C] [--handler H] [--halted] [--owner ID] [--sort lag|age|name] [--watch]",
		Short: "List partitions with owner, generation, lease, lag, pending, head age and state",
		Long: `List one row per (handler, partition):

  CATEGORY, KEY  the partition ({category}:{key} is its stream)
  HANDLER        the consumer group (handler or process manager)
  OWNER, GEN     the instance session that holds the lease and its fencing generation
  LEASE          time left on the owner's session; the lease dies with it
  LAG            entries not yet delivered to the handler (all lanes; ? = unknown)
  PENDING        entries delivered and not acknowledged
  HEAD AGE       age of the head entry: the halted one, else the oldest pending, else
                 the next undelivered
  STATE          halted   the handler halted on a poison head; see 'seqctl head show'
                 unowned  no live lease: nobody reads it until an instance takes it
                 running  owned, with work to do
                 idle     owned and caught up

-o wide adds the stream, the halted entry, its attempts and error; -o json prints the
fields category, key, stream, handler, owner, generation, lease_ttl_ms, lag, pending,
head_age_ms, state and halted_entry_id. For a sequential process manager the lease and
the halt belong to the correlation value, so every category row of a value shows them.

The listing is pipelined: a few round trips to Redis however many partitions there are.`,
		Example: `  # everything, as a table on a terminal or tab-separated rows in a pipe
  $ seqctl partitions list

  # halted partitions of one handler, as JSON
  $ seqctl partitions list --handler OrderProjector --halted -o json

  # the partitions one instance owns, worst lag first, refreshed every 2s
  $ seqctl partitions list --owner worker-7 --sort lag --watch`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Output, opts.Ctx = f.Global.Output, cmd.Context()
			if err := checkFormat(cmd, opts.Output); err != nil {
				return err
			}
			switch opts.Sort {
			case "name", "lag", "age":
			default:
				return usageErrorf(cmd.CommandPath(), "invalid value %q for --sort: want name, lag or age", opts.Sort)
			}
			if opts.Interval <= 0 {
				return usageErrorf(cmd.CommandPath(), "--interval must be positive, got %v", opts.Interval)
			}
			if runF != nil {
				return runF(opts)
			}
			return partitionsListRun(opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Category, "category", "", "only this category")
	fl.StringVar(&opts.Handler, "handler", "", "only this handler (consumer group)")
	fl.BoolVar(&opts.Halted, "halted", false, "only halted partitions")
	fl.StringVar(&opts.Owner, "owner", "", "only partitions owned by this instance id (or session owner instance.N)")
	fl.StringVar(&opts.Sort, "sort", "name", "order: name, lag (largest first) or age (oldest head first)")
	fl.BoolVarP(&opts.Watch, "watch", "w", false, "refresh every --interval until interrupted")
	fl.DurationVar(&opts.Interval, "interval", 2*time.Second, "refresh period of --watch")
	_ = cmd.RegisterFlagCompletionFunc("sort", cobra.FixedCompletions([]string{"name", "lag", "age"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func partitionsListRun(opts *PartitionsListOptions) error {
	ctx := opts.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	adm, closeAdm, err := opts.Admin(ctx)
	if err != nil {
		return exitFor(err)
	}
	defer closeAdm()
	filter := admin.Filter{Category: opts.Category, Handler: opts.Handler, Halted: opts.Halted, Owner: opts.Owner}
	if !opts.Watch {
		ps, err := adm.ListPartitions(ctx, filter)
		if err != nil {
			return exitFor(err)
		}
		return printPartitions(opts, ps)
	}
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
			return exitFor(err)
		}
		if opts.IO.IsTerminal && opts.Output != "json" {
			fmt.Fprint(opts.IO.Out, "\x1b[H\x1b[2J") // home and clear: redraw in place
			fmt.Fprintf(opts.IO.Out, "%s\n\n", opts.IO.Gray(fmt.Sprintf("every %v, %d partitions; Ctrl-C to stop", opts.Interval, len(ps))))
		}
		if err := printPartitions(opts, ps); err != nil {
			return err
		}
		if !opts.IO.IsTerminal && opts.Output != "json" {
			fmt.Fprintln(opts.IO.Out) // a blank line ends each refresh in a pipe
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func printPartitions(opts *PartitionsListOptions, ps []admin.Partition) error {
	admin.SortPartitions(ps, admin.SortBy(opts.Sort))
	ios := opts.IO
	if opts.Output == "json" {
		if ps == nil {
			ps = []admin.Partition{} // always an array
		}
		return writeJSON(ios.Out, ps)
	}
	if len(ps) == 0 {
		if ios.IsTerminal {
			fmt.Fprintln(ios.ErrOut, "No partitions match.")
		}
		return nil
	}
	wide := opts.Output == "wide"
	header := []string{"CATEGORY", "KEY", "HANDLER", "OWNER", "GEN", "LEASE", "LAG", "PENDING", "HEAD AGE"}
	if wide {
		header = append(header, "STREAM", "HALTED ENTRY", "ATTEMPTS", "ERROR")
	}
	// STATE is last: its colour codes cannot upset the alignment of a column after it.
	t := newTablePrinter(ios, append(header, "STATE")...)
	for _, p := range ps {
		row := []string{p.Category, p.Key, p.Handler, orDash(p.Owner), genCell(p.Generation), msCell(p.LeaseTTLMS, p.Owner != ""),
			lagCell(p.Lag), strconv.FormatInt(p.Pending, 10), msCell(p.HeadAgeMS, p.HeadID != "" || p.HeadAgeMS > 0)}
		if wide {
			attempts, errText := "-", "-"
			if p.Halt != nil {
				attempts, errText = strconv.Itoa(p.Halt.Attempts), firstLine(p.Halt.Error, 60)
			}
			row = append(row, p.Stream, orDash(p.HaltedEntryID), attempts, errText)
		}
		t.AddRow(append(row, stateCell(ios, p.State))...)
	}
	return t.Render(ios.Out)
}

func genCell(g int64) string {
	if g == 0 {
		return "-"
	}
	return strconv.FormatInt(g, 10)
}

func lagCell(lag int64) string {
	if lag < 0 {
		return "?"
	}
	return strconv.FormatInt(lag, 10)
}

func msCell(ms int64, known bool) string {
	if !known {
		return "-"
	}
	return fmtMS(ms)
}

func stateCell(ios *IOStreams, s admin.State) string {
	switch s {
	case admin.StateHalted, admin.StateUnowned:
		return ios.Red(string(s))
	case admin.StateRunning:
		return ios.Green(string(s))
	}
	return ios.Gray(string(s))
}

// PartitionsInspectOptions are the inputs of 'seqctl partitions inspect'.
type PartitionsInspectOptions struct {
	IO      *IOStreams
	Admin   AdminOpener
	Output  string
	Stream  string
	Handler string // "" for every handler of the category
	Ctx     context.Context
}

func newCmdPartitionsInspect(f *Factory, runF func(*PartitionsInspectOptions) error) *cobra.Command {
	opts := &PartitionsInspectOptions{IO: f.IOStreams, Admin: f.openAdmin}
	cmd := &cobra.Command{
		Use:   "inspect STREAM [--handler H]",
		Short: "Show a partition's lanes, groups, pending entries, halt record, lease and head",
		Long: `Show everything about one partition (STREAM is {category}:{key}, e.g.
order:client-123): its lanes (primary and backfill) with their lengths and first and
last ids; every consumer group with its last-delivered id, lag and pending count; and,
per handler, the lease (owner, generation, time left), the halt record (entry, reason,
attempts, since), the pending entries with their delivery counts and idle times, and
the head entry's envelope. Also the length of the partition's DLQ.

Exit status 3 when the partition has no stream, no DLQ and is not indexed.`,
		Example: `  $ seqctl partitions inspect order:client-123

  # one handler, as JSON
  $ seqctl partitions inspect order:client-123 --handler OrderProjector -o json`,
		Args:              streamArg,
		ValidArgsFunction: completeStreams(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Output, opts.Ctx, opts.Stream = f.Global.Output, cmd.Context(), args[0]
			if err := checkFormat(cmd, opts.Output); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return partitionsInspectRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Handler, "handler", "", "only this handler (default: every handler of the category)")
	_ = cmd.RegisterFlagCompletionFunc("handler", completeHandlers(f))
	return cmd
}

func partitionsInspectRun(opts *PartitionsInspectOptions) error {
	ctx := orBackground(opts.Ctx)
	adm, closeAdm, err := opts.Admin(ctx)
	if err != nil {
		return exitFor(err)
	}
	defer closeAdm()
	in, err := adm.Inspect(ctx, opts.Stream, opts.Handler)
	if err != nil {
		return exitFor(err)
	}
	if opts.Output == "json" {
		return writeJSON(opts.IO.Out, in)
	}
	if !opts.IO.IsTerminal {
		return printInspectionRows(opts.IO, in)
	}
	return printInspection(opts.IO, in)
}

// printInspection prints an inspection for a person.
func printInspection(ios *IOStreams, in *admin.Inspection) error {
	w := ios.Out
	where := "not in the discovery index"
	if in.Indexed {
		where = "indexed"
	}
	fmt.Fprintf(w, "%s  (category %s, key %s, %s)\n\n", ios.Bold(in.Stream), in.Category, orDash(in.Key), where)
	t := newTablePrinter(ios, "LANE", "STREAM", "LENGTH", "FIRST ID", "LAST ID")
	for _, l := range in.Lanes {
		t.AddRow(l.Kind, l.Stream, strconv.FormatInt(l.Length, 10), orDash(l.FirstID), orDash(l.LastID))
	}
	if err := t.Render(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = newTablePrinter(ios, "STREAM", "GROUP", "LAST DELIVERED", "LAG", "PENDING", "CONSUMERS")
	for _, l := range in.Lanes {
		for _, g := range l.Groups {
			t.AddRow(l.Stream, g.Name, g.LastDeliveredID, lagCell(g.Lag), strconv.FormatInt(g.Pending, 10), strconv.FormatInt(g.Consumers, 10))
		}
	}
	if len(t.rows) > 0 {
		if err := t.Render(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	for _, h := range in.Handlers {
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
			fmt.Fprintf(w, "  lease       %s, generation %d, %s left\n", l.Owner, l.Generation, fmtMS(l.TTLMS))
		default:
			fmt.Fprintf(w, "  lease       %s, generation %d, void (the owner's session expired)\n", l.Owner, l.Generation)
		}
		if hr := h.Halt; hr != nil {
			fmt.Fprintf(w, "  halted      on %s (%s) after %d attempts, since %s\n", hr.EntryID, hr.Stream, hr.Attempts, fmtTime(&hr.Since))
			fmt.Fprintf(w, "  reason      %s\n", indentRest(hr.Error, "              "))
		}
		fmt.Fprintf(w, "  pending     %d\n", h.PendingTotal)
		if len(h.Pending) > 0 {
			t := newTablePrinter(ios, "    ID", "LANE", "CONSUMER", "DELIVERIES", "IDLE")
			for _, p := range h.Pending {
				t.AddRow("    "+p.ID, p.Lane, p.Consumer, strconv.FormatInt(p.Deliveries, 10), fmtMS(p.IdleMS))
			}
			if err := t.Render(w); err != nil {
				return err
			}
		}
		if hd := h.Head; hd != nil {
			fmt.Fprintf(w, "  head        %s on %s: %s, %d attempts, age %s\n", hd.ID, hd.Lane, hd.Status, hd.Attempts, fmtMS(hd.AgeMS))
			fmt.Fprintf(w, "  event       %s\n", envelopeLine(hd.Envelope))
			fmt.Fprintf(w, "  payload     %s\n", compactJSON(hd.Envelope.Data))
		} else {
			fmt.Fprintln(w, "  head        none: caught up")
		}
		fmt.Fprintln(w)
	}
	if in.DLQStream != "" {
		fmt.Fprintf(w, "DLQ %s: %d entries\n", in.DLQStream, in.DLQLength)
	}
	return nil
}

// printInspectionRows prints an inspection for a pipe, one tab-separated row per item,
// the first cell naming the kind of row:
//
//	partition  STREAM  CATEGORY  KEY  indexed|not_indexed
//	lane       KIND  STREAM  LENGTH  FIRST_ID  LAST_ID
//	group      STREAM  GROUP  LAST_DELIVERED  LAG  PENDING  CONSUMERS
//	handler    HANDLER  STATE  OWNER|-  GENERATION  LEASE_TTL_MS
//	halt       HANDLER  ENTRY  LANE  ATTEMPTS  SINCE  ERROR
//	pending    HANDLER  ID  LANE  CONSUMER  DELIVERIES  IDLE_MS
//	head       HANDLER  ID  LANE  STATUS  ATTEMPTS  AGE_MS  TYPE  EVENT_ID
//	dlq        DLQ_STREAM  LENGTH
func printInspectionRows(ios *IOStreams, in *admin.Inspection) error {
	t := newTablePrinter(ios)
	idx := "not_indexed"
	if in.Indexed {
		idx = "indexed"
	}
	t.AddRow("partition", in.Stream, in.Category, orDash(in.Key), idx)
	for _, l := range in.Lanes {
		t.AddRow("lane", l.Kind, l.Stream, strconv.FormatInt(l.Length, 10), orDash(l.FirstID), orDash(l.LastID))
	}
	for _, l := range in.Lanes {
		for _, g := range l.Groups {
			t.AddRow("group", l.Stream, g.Name, g.LastDeliveredID, strconv.FormatInt(g.Lag, 10), strconv.FormatInt(g.Pending, 10), strconv.FormatInt(g.Consumers, 10))
		}
	}
	for _, h := range in.Handlers {
		owner, gen, ttl := "-", "0", "0"
		if l := h.Lease; l != nil && l.Live {
			owner, gen, ttl = l.Owner, strconv.FormatInt(l.Generation, 10), strconv.FormatInt(l.TTLMS, 10)
		}
		t.AddRow("handler", h.Handler, string(h.State), owner, gen, ttl)
		if hr := h.Halt; hr != nil {
			t.AddRow("halt", h.Handler, hr.EntryID, hr.Stream, strconv.Itoa(hr.Attempts), fmtTime(&hr.Since), hr.Error)
		}
		for _, p := range h.Pending {
			t.AddRow("pending", h.Handler, p.ID, p.Lane, p.Consumer, strconv.FormatInt(p.Deliveries, 10), strconv.FormatInt(p.IdleMS, 10))
		}
		if hd := h.Head; hd != nil {
			t.AddRow("head", h.Handler, hd.ID, hd.Lane, string(hd.Status), strconv.FormatInt(hd.Attempts, 10), strconv.FormatInt(hd.AgeMS, 10), orDash(hd.Envelope.Type), orDash(hd.Envelope.ID))
		}
	}
	if in.DLQStream != "" {
		t.AddRow("dlq", in.DLQStream, strconv.FormatInt(in.DLQLength, 10))
	}
	return t.Render(ios.Out)
}

// indentRest indents every line of s after the first.
func indentRest(s, indent string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+indent)
}

func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
