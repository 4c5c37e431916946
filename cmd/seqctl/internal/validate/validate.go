// Package validate is 'seqctl validate': check a domain.toml and show how each category is
// partitioned.
package validate

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/deliver"
	"github.com/seqctl/seqctl/pkg/engine"
)

// Options are the inputs of 'seqctl validate'.
type Options struct {
	IO *cmdutil.IOStreams
	// ConfigPath is the domain.toml to check (--config, default "domain.toml").
	ConfigPath string
	// Output is "" for text, "json" or "yaml".
	Output string
}

// NewCmd returns the 'seqctl validate' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "validate [--config FILE]",
		Short: "Check a domain.toml and show how each category is partitioned",
		Long: `Check a domain.toml the way 'seqctl run' loads it, without connecting to anything.

The file is parsed strictly: an unknown key (key names are case-sensitive), a value of
the wrong type or an inconsistent value (a heartbeat not below the lease TTL, a
non-positive duration, max_retries below 1, a handler naming an undeclared event, ...)
is reported as FILE:LINE: KEY PATH: message, one problem per line, all of them at once.
Key paths index arrays of tables from 0: handlers[0] is the first [[handlers]] table.

When the file is well formed, the domain is registered against the configured broker
kind, which checks the sequential_by rules: every handled event declares the key field,
all handlers on a category agree on one key, and the broker supports partitioning.

An unknown key does not hide the other problems: the rest of the file is checked as if
the key were absent, so a misspelt key and a sequential_by mistake show in one run.

A SQL sink ([handlers.deliver.sql]) is checked against the environment too: its dsn_env
variable must be set, or its dsn_file readable, as seqctl run reads them (the database
itself is not contacted).

On success it prints the domain: each category with its partition key, each handler and
process manager. With -o json an invalid file prints {"file", "valid": false,
"problems": [{"line", "path", "message"}]} on stdout as well. Exit status 0 when valid,
2 when not, 1 when the file is valid but a SQL sink's DSN cannot be read.`,
		Example: `  # check ./domain.toml
  $ seqctl validate

  # check another file
  $ seqctl validate --config deploy/domain.toml
  deploy/domain.toml:17: server.partitioning.heartbeat_interval_seconds: 20 is not below the lease TTL ...

  # the summary as JSON, for scripts
  $ seqctl validate --config deploy/domain.toml -o json`,
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cmdutil.CheckOutput(cmd, opts.Output); err != nil {
				return err
			}
			if opts.ConfigPath == "" {
				return cmdutil.UsageErrorf(cmd.CommandPath(), "--config is empty; pass the path of a domain.toml")
			}
			if runF != nil {
				return runF(opts)
			}
			return validateRun(opts)
		},
	}
	cmd.Flags().StringVarP(&opts.ConfigPath, "config", "c", "domain.toml", "path of the domain.toml to check")
	cmdutil.OutputFlag(cmd, &opts.Output)
	return cmd
}

func validateRun(opts *Options) error {
	cfg, err := cmdutil.LoadConfigFile(opts.ConfigPath)
	if err != nil {
		return validateFailed(opts, withSemanticProblems(opts.ConfigPath, err))
	}
	dom, err := cfg.InitDomain()
	if err != nil {
		return validateFailed(opts, err)
	}
	if err := sinkEnvironment(cfg, os.LookupEnv); err != nil {
		// The file is valid; what seqctl run would read from the environment is not.
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: validateFailed(opts, err)}
	}
	s := summarize(cfg, dom)
	if cmdutil.Structured(opts.Output) {
		return cmdutil.WriteData(opts.IO.Out, opts.Output, s)
	}
	if opts.IO.IsTerminal {
		return printSummary(opts.IO, s)
	}
	return printSummaryRows(opts.IO, s)
}

// sinkEnvironment checks that each SQL sink's DSN can be read as seqctl run reads it
// (its dsn_env variable set, or its dsn_file readable); the problems name the handler.
func sinkEnvironment(cfg *config.Config, lookup func(string) (string, bool)) error {
	ce := &config.Error{File: cfg.File}
	check := func(path, name string, dc *config.DeliverConfig) {
		if dc == nil || dc.SQL == nil {
			return
		}
		key := path + ".deliver.sql.dsn_env"
		if dc.SQL.DSNEnv == "" {
			key = path + ".deliver.sql.dsn_file"
		}
		if _, err := deliver.SQLDSN(dc.SQL, deliver.BindOptions{LookupEnv: lookup})(); err != nil {
			ce.Problems = append(ce.Problems, config.Problem{Path: key, Message: "handler " + name + ": " + err.Error()})
		}
	}
	for i, h := range cfg.Handlers {
		check(fmt.Sprintf("handlers[%d]", i), h.Name, h.Deliver)
	}
	for i, p := range cfg.ProcessManagers {
		check(fmt.Sprintf("process_managers[%d]", i), p.Name, p.Deliver)
	}
	if len(ce.Problems) == 0 {
		return nil
	}
	return ce
}

// validateProblems is what 'seqctl validate -o json' prints for an invalid file (exit
// status 2); the problems are also printed to stderr, one per line.
type validateProblems struct {
	File     string           `json:"file"`
	Valid    bool             `json:"valid"`
	Problems []problemSummary `json:"problems"`
}

type problemSummary struct {
	// Line is the 1-based line, 0 when unknown; Path the key path, "" for the file.
	Line    int    `json:"line"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// validateFailed prints a config error as JSON on stdout when -o json asks for it, and
// returns err (printed to stderr, exit status 2).
func validateFailed(opts *Options, err error) error {
	var ce *config.Error
	if !cmdutil.Structured(opts.Output) || !errors.As(err, &ce) {
		return err
	}
	out := validateProblems{File: ce.File, Problems: []problemSummary{}}
	for _, p := range ce.Problems {
		out.Problems = append(out.Problems, problemSummary{Line: p.Line, Path: p.Path, Message: p.Message})
	}
	if werr := cmdutil.WriteData(opts.IO.Out, opts.Output, out); werr != nil {
		return werr
	}
	return err
}

// withSemanticProblems adds, to a parse error made of unknown keys, the problems the
// rest of the file has: the file is parsed again with the lines of the unknown keys
// blanked out, and registered (sequential_by and the other domain rules), so that one
// run reports a misspelt key and a sequential_by mistake together. Any other error, and
// an unknown key that is a table header or spans lines, is returned as it is.
func withSemanticProblems(path string, err error) error {
	var ce *config.Error
	if !errors.As(err, &ce) || len(ce.Problems) == 0 {
		return err
	}
	data, rerr := os.ReadFile(path)
	if rerr != nil {
		return err
	}
	lines := strings.Split(string(data), "\n")
	multiline := []string{strings.Repeat(`"`, 3), strings.Repeat("'", 3)}
	for _, p := range ce.Problems {
		if !strings.HasPrefix(p.Message, "unknown key") || p.Line < 1 || p.Line > len(lines) {
			return err
		}
		l := strings.TrimSpace(lines[p.Line-1])
		if strings.HasPrefix(l, "[") || !strings.Contains(l, "=") || strings.HasSuffix(l, "[") ||
			strings.Count(l, multiline[0])%2 == 1 || strings.Count(l, multiline[1])%2 == 1 {
			return err
		}
		lines[p.Line-1] = "" // the line stays: every other line keeps its number
	}
	cfg, perr := config.Parse(path, []byte(strings.Join(lines, "\n")))
	if perr == nil {
		_, perr = cfg.InitDomain()
	}
	var more *config.Error
	if perr == nil || !errors.As(perr, &more) {
		return err
	}
	seen := map[config.Problem]bool{}
	for _, p := range ce.Problems {
		seen[p] = true
	}
	for _, p := range more.Problems {
		if !seen[p] {
			ce.Problems = append(ce.Problems, p)
		}
	}
	slices.SortStableFunc(ce.Problems, func(a, b config.Problem) int { return cmp.Compare(a.Line, b.Line) })
	return err
}

// validateSummary is what 'seqctl validate -o json' prints.
type validateSummary struct {
	File            string            `json:"file"`
	Name            string            `json:"name"`
	Broker          brokerSummary     `json:"broker"`
	Categories      []categorySummary `json:"categories"`
	Handlers        []handlerSummary  `json:"handlers"`
	ProcessManagers []pmSummary       `json:"process_managers"`
}

type brokerSummary struct {
	Kind               string `json:"kind"`
	StreamPartitioning bool   `json:"stream_partitioning"`
}

type categorySummary struct {
	Name string `json:"name"`
	// Kind is "event" or "command".
	Kind  string   `json:"kind"`
	Types []string `json:"types"`
	// PartitionKey is the payload field the handlers declared, "" for none.
	PartitionKey string `json:"partition_key,omitempty"`
	// Partitioned says events are routed to per-key streams at runtime: an event category
	// with a key, on a broker with stream partitioning.
	Partitioned bool `json:"partitioned"`
}

type handlerSummary struct {
	Name         string `json:"name"`
	Kind         string `json:"kind"`
	Category     string `json:"category"`
	SequentialBy string `json:"sequential_by,omitempty"`
	// Delivery is "http", "exec", "sql" or "go" (registered by Go code).
	Delivery string `json:"delivery"`
	// BatchMax is the most events one call takes (batch_max), set only above 1;
	// BatchWait is batch_wait ("20ms"), set only when it waits.
	BatchMax  int    `json:"batch_max,omitempty"`
	BatchWait string `json:"batch_wait,omitempty"`
}

// deliveryNote is the handler's delivery for a person, with its batches when it takes
// them: "http, up to 32 per call, waits 20ms".
func (h handlerSummary) deliveryNote() string {
	if h.BatchMax <= 1 {
		return h.Delivery
	}
	note := fmt.Sprintf("%s, up to %d per call", h.Delivery, h.BatchMax)
	if h.BatchWait != "" {
		note += ", waits " + h.BatchWait
	}
	return note
}

type pmSummary struct {
	Name         string            `json:"name"`
	SequentialBy bool              `json:"sequential_by"`
	Delivery     string            `json:"delivery"`
	Handles      []pmHandleSummary `json:"handles"`
}

type pmHandleSummary struct {
	Event      string `json:"event"`
	Category   string `json:"category"`
	PMField    string `json:"pm_field"`
	EventField string `json:"event_field"`
	Start      bool   `json:"start"`
}

func delivery(d *config.DeliverConfig) string {
	if d == nil {
		return "go"
	}
	return d.Mode()
}

// summarize describes a valid, initialised domain.
func summarize(cfg *config.Config, dom *engine.Domain) validateSummary {
	broker := cfg.BrokerInfo()
	s := validateSummary{
		File:            cfg.File,
		Name:            cfg.Name,
		Broker:          brokerSummary{Kind: broker.Kind(), StreamPartitioning: broker.Has(engine.StreamPartitioning)},
		Categories:      []categorySummary{},
		Handlers:        []handlerSummary{},
		ProcessManagers: []pmSummary{},
	}

	typeCategory := map[string]string{}
	index := map[string]int{} // kind + "/" + category -> index in s.Categories
	addType := func(kind, name, category string) {
		typeCategory[name] = category
		k := kind + "/" + category
		i, ok := index[k]
		if !ok {
			i = len(s.Categories)
			index[k] = i
			s.Categories = append(s.Categories, categorySummary{Name: category, Kind: kind})
		}
		s.Categories[i].Types = append(s.Categories[i].Types, name)
	}
	for _, e := range cfg.Events {
		addType("event", e.Name, e.Category)
	}
	for _, c := range cfg.Commands {
		addType("command", c.Name, c.Category)
	}

	keys := dom.PartitionKeys()
	for i := range s.Categories {
		c := &s.Categories[i]
		if c.Kind == "event" {
			c.PartitionKey = keys[c.Name]
			_, c.Partitioned = dom.PartitionField(c.Name)
		}
	}
	for _, h := range cfg.Handlers {
		cat := h.PartOf
		if cat == "" && len(h.Handles) > 0 {
			cat = typeCategory[h.Handles[0]]
		}
		hs := handlerSummary{
			Name: h.Name, Kind: h.Kind.String(), Category: cat, SequentialBy: h.SequentialBy, Delivery: delivery(h.Deliver),
		}
		if h.Batched() {
			hs.BatchMax = h.BatchMax
			if h.BatchWait > 0 {
				hs.BatchWait = h.BatchWait.String()
			}
		}
		s.Handlers = append(s.Handlers, hs)
		// A command category's key is checked by Init but never applied: show it anyway.
		if h.Kind == engine.CommandHandlerKind && h.SequentialBy != "" {
			if i, ok := index["command/"+cat]; ok {
				s.Categories[i].PartitionKey = h.SequentialBy
			}
		}
	}
	for _, p := range cfg.ProcessManagers {
		ps := pmSummary{Name: p.Name, SequentialBy: p.SequentialBy, Delivery: delivery(p.Deliver), Handles: []pmHandleSummary{}}
		for _, h := range p.Handles {
			ps.Handles = append(ps.Handles, pmHandleSummary{
				Event: h.Event, Category: typeCategory[h.Event],
				PMField: h.Correlate.PMField, EventField: h.Correlate.EventField, Start: h.Start,
			})
		}
		s.ProcessManagers = append(s.ProcessManagers, ps)
	}
	return s
}

// keyNote describes a category's partitioning for a person.
func (c categorySummary) keyNote(broker brokerSummary) string {
	switch {
	case c.PartitionKey == "":
		return "not partitioned"
	case c.Kind == "command":
		return c.PartitionKey + " (checked; inert: commands are not partitioned)"
	case !c.Partitioned:
		return c.PartitionKey + fmt.Sprintf(" (no-op on the %s broker)", broker.Kind)
	}
	return c.PartitionKey
}

// keyState is keyNote as one word, for plain rows.
func (c categorySummary) keyState() string {
	switch {
	case c.PartitionKey == "":
		return "-"
	case c.Kind == "command":
		return "inert"
	case !c.Partitioned:
		return "no-op"
	}
	return "partitioned"
}

// printSummary prints the summary for a terminal: a headline and aligned tables.
func printSummary(ios *cmdutil.IOStreams, s validateSummary) error {
	w := ios.Out
	brokerNote := "stream partitioning"
	if !s.Broker.StreamPartitioning {
		brokerNote = "no stream partitioning"
		if s.Broker.Kind == engine.BrokerKindInline {
			brokerNote = "sequential_by is a no-op: inline handles messages in order"
		}
	}
	fmt.Fprintf(w, "%s %s is valid: domain %q on the %s broker (%s)\n",
		ios.Green("✓"), s.File, s.Name, s.Broker.Kind, brokerNote)

	if len(s.Categories) > 0 {
		fmt.Fprintln(w)
		t := cmdutil.NewTablePrinter(ios, "CATEGORY", "KIND", "TYPES", "PARTITION KEY")
		for _, c := range s.Categories {
			t.AddRow(c.Name, c.Kind, strings.Join(c.Types, ", "), c.keyNote(s.Broker))
		}
		if err := t.Render(w); err != nil {
			return err
		}
	}
	if len(s.Handlers) > 0 {
		fmt.Fprintln(w)
		t := cmdutil.NewTablePrinter(ios, "HANDLER", "KIND", "CATEGORY", "SEQUENTIAL BY", "DELIVERY")
		for _, h := range s.Handlers {
			t.AddRow(h.Name, h.Kind, h.Category, cmdutil.OrDash(h.SequentialBy), h.deliveryNote())
		}
		if err := t.Render(w); err != nil {
			return err
		}
	}
	if len(s.ProcessManagers) > 0 {
		fmt.Fprintln(w)
		t := cmdutil.NewTablePrinter(ios, "PROCESS MANAGER", "SEQUENTIAL", "HANDLES", "DELIVERY")
		for _, p := range s.ProcessManagers {
			var hs []string
			for _, h := range p.Handles {
				corr := h.PMField
				if h.EventField != h.PMField {
					corr = h.PMField + " = " + h.EventField
				}
				desc := fmt.Sprintf("%s (%s by %s", h.Event, h.Category, corr)
				if h.Start {
					desc += ", starts"
				}
				hs = append(hs, desc+")")
			}
			seq := "no"
			if p.SequentialBy {
				seq = "yes"
			}
			t.AddRow(p.Name, seq, strings.Join(hs, ", "), p.Delivery)
		}
		if err := t.Render(w); err != nil {
			return err
		}
	}
	return nil
}

// printSummaryRows prints the summary for a pipe: one tab-separated row per item, the
// first cell naming the kind of row:
//
//	valid            FILE  DOMAIN  BROKER
//	category         NAME  KIND  KEY|-  partitioned|no-op|inert|-
//	handler          NAME  KIND  CATEGORY  SEQUENTIAL_BY|-  DELIVERY
//	process_manager  NAME  sequential|-  EVENT,EVENT  DELIVERY
func printSummaryRows(ios *cmdutil.IOStreams, s validateSummary) error {
	t := cmdutil.NewTablePrinter(ios)
	t.AddRow("valid", s.File, s.Name, s.Broker.Kind)
	for _, c := range s.Categories {
		t.AddRow("category", c.Name, c.Kind, cmdutil.OrDash(c.PartitionKey), c.keyState())
	}
	for _, h := range s.Handlers {
		t.AddRow("handler", h.Name, h.Kind, h.Category, cmdutil.OrDash(h.SequentialBy), h.Delivery)
	}
	for _, p := range s.ProcessManagers {
		var events []string
		for _, h := range p.Handles {
			events = append(events, h.Event)
		}
		seq := "-"
		if p.SequentialBy {
			seq = "sequential"
		}
		t.AddRow("process_manager", p.Name, seq, strings.Join(events, ","), p.Delivery)
	}
	return t.Render(ios.Out)
}
