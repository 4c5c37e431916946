// Package inbox is 'seqctl inbox': create and prune the inbox tables of the SQL sinks.
package inbox

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/deliver"
	"github.com/seqctl/seqctl/pkg/inbox"
	"github.com/seqctl/seqctl/pkg/outbox"
	"github.com/seqctl/seqctl/pkg/redact"
)

// Options are the options of seqctl inbox migrate|prune.
type Options struct {
	IO     *cmdutil.IOStreams
	Global *cmdutil.GlobalOptions
	DryRun bool // prune: count, change nothing
}

// NewCmd returns the 'seqctl inbox' command with its subcommands.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	return cmdutil.GroupOf(&cobra.Command{
		Use:   "inbox <command>",
		Short: "Create and prune the inbox tables of the SQL sinks",
		Long: `A SQL sink ([handlers.deliver.sql] in domain.toml) runs its statement once per event,
in the same database transaction as a row of its inbox table (default seqctl_inbox): one
row per handler and lane stream, holding the last entry applied and the generation of
the owner that applied it. A redelivered entry is acknowledged without running again, and
a stalled owner's late commit is refused. See docs/concepts.md, "Exactly-once effects".

Each command works on the inbox of every SQL sink in --config, reaching its database by
the DSN in its dsn_env variable or dsn_file, as seqctl run does.`,
		Example: `  $ ORDERS_DB=postgres://app@db:5432/app seqctl inbox migrate --config domain.toml
  $ seqctl inbox prune --config domain.toml --dry-run`,
	}, newCmdInboxMigrate(f), newCmdInboxPrune(f))
}

func newCmdInboxMigrate(f *cmdutil.Factory) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Global: &f.Global}
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create the inbox table of each SQL sink",
		Long: `migrate creates the inbox table of each SQL sink in its database when it is missing.
It is idempotent. seqctl run refuses to start a SQL sink whose inbox table is missing.
With -o json it prints [{"handler", "table", "dialect"}].`,
		Example: `  $ seqctl inbox migrate --config domain.toml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cmdutil.CheckFormat(cmd, opts.Global.Output); err != nil {
				return err
			}
			type migrated struct {
				Handler string `json:"handler"`
				Table   string `json:"table"`
				Dialect string `json:"dialect"`
			}
			var out []migrated
			err := eachInbox(cmdutil.CmdContext(cmd), opts.Global, func(ctx context.Context, handler string, ib *inbox.Inbox, d outbox.Dialect) error {
				if err := ib.Migrate(ctx); err != nil {
					return err
				}
				out = append(out, migrated{Handler: handler, Table: ib.Table(), Dialect: d.String()})
				return nil
			})
			if err != nil {
				return err
			}
			if cmdutil.Structured(opts.Global.Output) {
				return cmdutil.WriteData(opts.IO.Out, opts.Global.Output, out)
			}
			for _, m := range out {
				fmt.Fprintf(opts.IO.Out, "handler %s: inbox table %s is up to date (%s)\n", m.Handler, m.Table, m.Dialect)
			}
			return nil
		},
	}
}

func newCmdInboxPrune(f *cmdutil.Factory) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Global: &f.Global}
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove the inbox rows of partitions that were reaped",
		Long: `An inbox table holds one row per handler and lane stream. A row is needed while its
stream may deliver an entry at or below the one it records; once the partition is reaped
(its streams deleted after reap_idle_ms without events), its entries are gone, and a
stream created again under the same name gets higher entry ids. prune removes the rows
whose stream no longer exists in Redis, each only if it still records what prune read.
Run it from time to time (a cron job) when partitions come and go. With -o json it prints
[{"handler", "table", "rows", "removed", "dry_run"}].`,
		Example: `  # what would go
  $ seqctl inbox prune --config domain.toml --dry-run
  $ seqctl inbox prune --config domain.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cmdutil.CheckFormat(cmd, opts.Global.Output); err != nil {
				return err
			}
			return inboxPruneRun(cmdutil.CmdContext(cmd), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "count the rows to remove, remove nothing")
	return cmd
}

func inboxPruneRun(ctx context.Context, opts *Options) error {
	_, conn, err := opts.Global.ConfigRedis()
	if err != nil {
		return err
	}
	rdb := conn.NewClient()
	defer rdb.Close()
	gone := func(ctx context.Context, streams []string) ([]bool, error) {
		pipe := rdb.Pipeline()
		for _, s := range streams {
			pipe.Exists(ctx, s)
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading which streams exist in Redis (%s): %w", conn.Shown, err)
		}
		out := make([]bool, len(cmds))
		for k, c := range cmds {
			n, _ := c.(interface{ Val() int64 })
			out[k] = n != nil && n.Val() == 0
		}
		return out, nil
	}
	type pruned struct {
		Handler string `json:"handler"`
		inbox.PruneReport
	}
	var out []pruned
	err = eachInbox(ctx, opts.Global, func(ctx context.Context, handler string, ib *inbox.Inbox, _ outbox.Dialect) error {
		rep, err := ib.Prune(ctx, gone, opts.DryRun)
		out = append(out, pruned{Handler: handler, PruneReport: rep})
		return err
	})
	if err != nil {
		return err
	}
	if cmdutil.Structured(opts.Global.Output) {
		return cmdutil.WriteData(opts.IO.Out, opts.Global.Output, out)
	}
	verb := "removed"
	if opts.DryRun {
		verb = "would remove"
	}
	for _, p := range out {
		fmt.Fprintf(opts.IO.Out, "handler %s: inbox %s: %d rows, %s %d of reaped partitions\n", p.Handler, p.Table, p.Rows, verb, p.Removed)
	}
	return nil
}

// eachInbox opens the inbox of each SQL sink of the config and calls fn with it. An
// unreadable DSN or a database that refuses exits 1, naming the handler.
func eachInbox(ctx context.Context, g *cmdutil.GlobalOptions, fn func(ctx context.Context, handler string, ib *inbox.Inbox, d outbox.Dialect) error) error {
	cfg, err := cmdutil.LoadConfigFile(cmdutil.ConfigOrDefault(g.ConfigPath))
	if err != nil {
		return err
	}
	sinks := sqlSinks(cfg)
	if len(sinks) == 0 {
		return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("%s declares no SQL sink ([handlers.deliver.sql]): there is no inbox to work on", cfg.File)}
	}
	for _, s := range sinks {
		if err := withInbox(ctx, s, fn); err != nil {
			return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf("handler %s: %w", s.handler, err)}
		}
	}
	return nil
}

// sqlSink is a handler's or process manager's SQL sink in a config.
type sqlSink struct {
	handler string
	sc      *config.SQLSinkConfig
}

// sqlSinks lists the SQL sinks of cfg, in file order.
func sqlSinks(cfg *config.Config) []sqlSink {
	var out []sqlSink
	for _, h := range cfg.Handlers {
		if h.Deliver != nil && h.Deliver.SQL != nil {
			out = append(out, sqlSink{h.Name, h.Deliver.SQL})
		}
	}
	for _, p := range cfg.ProcessManagers {
		if p.Deliver != nil && p.Deliver.SQL != nil {
			out = append(out, sqlSink{p.Name, p.Deliver.SQL})
		}
	}
	return out
}

// withInbox opens one sink's database and inbox for fn.
func withInbox(ctx context.Context, s sqlSink, fn func(ctx context.Context, handler string, ib *inbox.Inbox, d outbox.Dialect) error) error {
	dsn, err := deliver.SQLDSN(s.sc, deliver.BindOptions{})()
	if err != nil {
		return err
	}
	db, d, err := outbox.Open(dsn)
	if err != nil {
		return redact.Error(err, dsn)
	}
	defer db.Close()
	ib, err := inbox.New(db, d, inbox.WithTable(s.sc.Table))
	if err != nil {
		return err
	}
	if err := fn(ctx, s.handler, ib, d); err != nil {
		return redact.Error(err, dsn)
	}
	return nil
}
