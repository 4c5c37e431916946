// Package outbox is 'seqctl outbox' (create the outbox table and report on it) and 'seqctl
// relay' (publish outbox rows to their partition streams), whose relay 'seqctl run'
// starts too.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/metrics"
	"github.com/seqctl/seqctl/pkg/outbox"
)

// Options are the options of seqctl outbox migrate|status and seqctl relay.
type Options struct {
	IO     *cmdutil.IOStreams
	Global *cmdutil.GlobalOptions
	Limit  int  // status: how many abandoned / failing rows to show
	Once   bool // relay: publish what is there, then exit
	LogFmt string
}

// NewCmd returns the 'seqctl outbox' command with its subcommands.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	return cmdutil.GroupOf(&cobra.Command{
		Use:   "outbox <command>",
		Short: "Create the outbox table and report on it",
		Long: `The outbox is a table in the application's database ([outbox] dsn in domain.toml:
sqlite://file.db or postgres://...). An application writes an event into it inside its own
transaction; the relay (seqctl relay, or seqctl run when [outbox] is configured) publishes
each row to its partition stream in per-key commit order. See docs/outbox.md.`,
		Example: `  $ seqctl outbox migrate --config domain.toml
  $ seqctl outbox status --config domain.toml -o json`,
	}, newCmdOutboxMigrate(f), newCmdOutboxStatus(f))
}

func newCmdOutboxMigrate(f *cmdutil.Factory) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Global: &f.Global}
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or update the outbox table, its CHECK constraint and triggers",
		Long: `migrate creates the outbox table when it is missing and brings its partition-key CHECK
constraint in line with the configured backfill suffix. It is idempotent. If rows already
in the table break the new rules, nothing is changed and it exits 4.`,
		Example: `  $ seqctl outbox migrate --config domain.toml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ob, closeDB, err := openOutbox(opts.Global)
			if err != nil {
				return err
			}
			defer closeDB()
			if err := ob.Migrate(cmdutil.CmdContext(cmd)); err != nil {
				if errors.Is(err, outbox.ErrSchema) {
					return &cmdutil.ExitError{Code: cmdutil.ExitConflict, Err: err}
				}
				return err
			}
			fmt.Fprintln(opts.IO.Out, "outbox table is up to date")
			return nil
		},
	}
}

func newCmdOutboxStatus(f *cmdutil.Factory) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Global: &f.Global}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Counts per status, backlog and oldest unpublished age, recent abandoned rows",
		Long: `status reads the outbox table: how many rows are pending, failed, published and
abandoned; the backlog per category and the age of the oldest unpublished row; the most
recent ABANDONED rows with their reasons and the rows that keep failing; and which relay
holds each category's lease.`,
		Example: `  $ seqctl outbox status --config domain.toml
  $ seqctl outbox status --config domain.toml --limit 50 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cmdutil.CheckFormat(cmd, opts.Global.Output); err != nil {
				return err
			}
			if opts.Limit < 0 {
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("--limit must not be negative")}
			}
			ob, closeDB, err := openOutbox(opts.Global)
			if err != nil {
				return err
			}
			defer closeDB()
			rep, err := ob.Status(cmdutil.CmdContext(cmd), outbox.StatusOptions{Limit: opts.Limit})
			if err != nil {
				return err
			}
			return printOutboxStatus(opts, rep)
		},
	}
	cmd.Flags().IntVar(&opts.Limit, "limit", 10, "abandoned and failing rows to list")
	return cmd
}

func printOutboxStatus(opts *Options, rep outbox.StatusReport) error {
	if cmdutil.Structured(opts.Global.Output) {
		return cmdutil.WriteData(opts.IO.Out, opts.Global.Output, rep)
	}
	w := opts.IO.Out
	c := rep.Counts
	fmt.Fprintf(w, "table %s (%s)\n", rep.Table, rep.Dialect)
	fmt.Fprintf(w, "pending %d  failed %d  published %d  abandoned %d\n", c.Pending, c.Failed, c.Published, c.Abandoned)
	fmt.Fprintf(w, "backlog %d rows, oldest unpublished %.1fs\n", rep.Backlog.Rows, rep.Backlog.OldestAgeSeconds)
	for _, cb := range rep.Backlog.Categories {
		fmt.Fprintf(w, "  %s\t%d rows\toldest %.1fs\n", cb.Category, cb.Rows, cb.OldestAgeSeconds)
	}
	for _, title := range []struct {
		name string
		rows []outbox.RowInfo
	}{{"abandoned", rep.Abandoned}, {"failing", rep.Failing}} {
		if len(title.rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s rows:\n", title.name)
		for _, r := range title.rows {
			fmt.Fprintf(w, "  #%d\t%s\t%s\t%s\tattempts %d\t%s\n", r.RowID, r.Type, r.Category, r.Key, r.Attempts, r.Reason)
		}
	}
	return nil
}

// NewCmdRelay returns the 'seqctl relay' command (the outbox's relay on its own).
func NewCmdRelay(f *cmdutil.Factory) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Global: &f.Global}
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Publish outbox rows to their partition streams (on its own, without handlers)",
		Long: `relay publishes the rows of the [outbox] table to Redis in per-key commit order: a
failing row holds back only the later rows of its key, a row whose key is invalid is
marked ABANDONED at once, and a crash between the XADD and the row update never publishes a
row twice. Several relays may run: one publishes a category at a time, under a lease.
seqctl run starts the same relay when [outbox] is configured.`,
		Example: `  $ seqctl relay --config domain.toml
  $ seqctl relay --config domain.toml --once`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return relayRun(cmdutil.CmdContext(cmd), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Once, "once", false, "publish what is in the table now, then exit")
	cmd.Flags().StringVar(&opts.LogFmt, "log-format", "text", "json or text")
	return cmd
}

func relayRun(ctx context.Context, opts *Options) error {
	cfg, conn, err := opts.Global.ConfigRedis()
	if err != nil {
		return err
	}
	rdb := conn.NewClient()
	defer rdb.Close()
	log := cmdutil.NewLogger(opts.IO.ErrOut, opts.LogFmt, "info")
	redisconn.WarnInsecureTLS(conn.TLSConfig(), func(msg string) { log.Warn(msg) })
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tp, err := cmdutil.TracerProviderFromEnv(ctx, os.Getenv, log)
	if err != nil {
		return err
	}
	if tp != nil {
		defer cmdutil.ShutdownTracing(tp, log)
	}
	r, _, closeDB, err := NewRelay(cfg, rdb, tp, log)
	if err != nil {
		return err
	}
	defer closeDB()
	if opts.Once {
		res, err := r.Drain(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(opts.IO.Out, "%+v\n", res)
		return nil
	}
	log.Info("relay running")
	return r.Run(ctx)
}

// NewRelay opens the configured outbox and returns a relay publishing through rdb (with
// a span per append when tp is not nil), the outbox (for the backlog gauge) and the
// function closing the database.
func NewRelay(cfg *config.Config, rdb redis.UniversalClient, tp *sdktrace.TracerProvider, log *slog.Logger) (*outbox.Relay, *outbox.Outbox, func(), error) {
	if cfg.Outbox == nil {
		return nil, nil, nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("%s has no [outbox] table: add one with dsn = \"sqlite://outbox.db\" or \"postgres://...\"", cfg.File)}
	}
	broker := engine.NewRedisBroker(rdb)
	dom, err := cfg.Domain()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := dom.Init(broker); err != nil {
		return nil, nil, nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
	}
	db, dialect, err := outbox.Open(cfg.Outbox.DSN)
	if err != nil {
		return nil, nil, nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
	}
	ob, err := outbox.New(db, dialect, dom)
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	rc := outbox.RelayConfig{Publisher: broker, Logger: log,
		MinReplicas: cfg.Broker.MinReplicas, ReplicaTimeout: cfg.Broker.ReplicaTimeout}
	if tp != nil {
		rc.TracerProvider = tp
	}
	r, err := outbox.NewRelay(ob, rc)
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return r, ob, func() { db.Close() }, nil
}

// openOutbox opens the configured outbox for migrate and status (no Redis needed).
func openOutbox(g *cmdutil.GlobalOptions) (*outbox.Outbox, func(), error) {
	cfg, err := cmdutil.LoadConfigFile(cmdutil.ConfigOrDefault(g.ConfigPath))
	if err != nil {
		return nil, nil, err
	}
	if cfg.Outbox == nil {
		return nil, nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("%s has no [outbox] table: add one with dsn = \"sqlite://outbox.db\" or \"postgres://...\"", cfg.File)}
	}
	dom, err := cfg.InitDomain()
	if err != nil {
		return nil, nil, err
	}
	db, dialect, err := outbox.Open(cfg.Outbox.DSN)
	if err != nil {
		return nil, nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
	}
	ob, err := outbox.New(db, dialect, dom)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return ob, func() { db.Close() }, nil
}

// StartBacklogGauge keeps seqctl_relay_backlog current from the outbox table.
func StartBacklogGauge(ctx context.Context, ob *outbox.Outbox, m *metrics.Metrics) {
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			if b, err := ob.Backlog(ctx); err == nil {
				m.SetRelayBacklog(int(b.Rows))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
