// Package exporter is 'seqctl exporter': every partition's backlog and lag as Prometheus
// gauges.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/metrics"
)

// Options are the inputs of 'seqctl exporter'.
type Options struct {
	IO *cmdutil.IOStreams
	// Global holds the config path ("" discovers categories and handlers in Redis) and
	// the connection flags.
	Global cmdutil.GlobalOptions
	// Listen is where /metrics and /healthz are served (--listen).
	Listen string
	// Interval is the time between two refreshes (--interval).
	Interval time.Duration
	// LogFormat is "text" or "json" (--log-format).
	LogFormat string
}

// Defaults of 'seqctl exporter'.
const (
	// defaultExporterListen is one port above the :9464 of the 'seqctl run --metrics-addr'
	// examples, so the two can share a host.
	defaultExporterListen   = ":9465"
	defaultExporterInterval = 10 * time.Second
	// exporterGCPercent is the exporter's GC target (see exporterRun).
	exporterGCPercent = 400
	// minExporterInterval keeps a typo (1ms for 1m) from listing every partition in a loop.
	minExporterInterval = 100 * time.Millisecond
)

const exporterLong = `exporter serves Prometheus gauges of the backlog of every partition, read from
Redis, whether any 'seqctl run' instance runs or not: the signal an autoscaler (KEDA's
Prometheus scaler, say) needs to start a worker when an event waits and none runs.

Every --interval it lists every partition as 'seqctl partitions list' does, a page of
about 1,000 keys at a time in a few pipelined round trips, and aggregates each page per
category and handler as it comes, so its memory is that of a page and the aggregate,
whatever the number of partitions. A refresh may last twice --interval (at least 10s);
a longer one fails and is counted, and the next ones may last twice as long again (up to
10m) until one succeeds, with a warning that names a larger --interval. Its time grows
with the partitions (docs/benchmarks.md has the figures: tens of seconds at a million),
so give a large deployment an --interval of half that or more. A scrape of /metrics
serves the last aggregate and never reads Redis:

  seqctl_lag_seconds{category,handler}
      age of the oldest event not yet handled, by Redis time; 0 when caught up
  seqctl_backlog_events{category,handler}
      entries not yet handled (delivered and not acknowledged, or not delivered)
  seqctl_backlog_unknown_partitions{category,handler}
      partitions whose backlog Redis cannot tell; backlog_events counts their lower bound
  seqctl_backlog_partitions{category,handler,state}
      partitions per state: halted, paused, throttled, unowned, running, idle
  seqctl_limit_waiting_partitions{handler,value}
      partitions waiting for a permit of their handler's limit key, per value (a
      tenant): the 10 values of each handler with the most
  seqctl_dlq_entries{category}, seqctl_dlq_partitions{category}
      entries in the partition DLQs of a category, and the partitions with one
      (found with a SCAN for "*:dlq" streams: a DLQ outlives its partition)

seqctl_lag_seconds has the name and labels of the gauge of 'seqctl run', which counts
only the partitions an instance owns, so max by (category, handler) (seqctl_lag_seconds)
works with or without instances. No label carries a partition key, and a limit key's
values only for the 10 values of a handler with the most waiting partitions.

With --config, every handler of the domain has its series from the start, at 0, and the
categories are the file's (no SCAN). Without it, categories and handlers are discovered
in Redis, and a handler's series appear with its first partition.

When a refresh fails (Redis unreachable, say), the gauges keep the values of the last
successful one, seqctl_exporter_refresh_errors_total counts the failure and stderr says
so once until a refresh succeeds again; seqctl_exporter_last_refresh_timestamp_seconds
tells how old the values are. A problem that waiting cannot fix (refused credentials, a
missing permission, an address that is not one) ends it at start, exit status 1.

It serves /metrics and /healthz on --listen (default :9465, next to the :9464 that the
'seqctl run --metrics-addr' examples use). One exporter per domain is enough: it reads
Redis, not the instances. SIGINT or SIGTERM stops it, exit status 0. docs/metrics.md
lists its series; docs/operator-runbook.md scales a deployment from zero on them.`

// NewCmd returns the 'seqctl exporter' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "exporter [--config FILE] [--listen ADDR] [--interval D]",
		Short: "Export every partition's backlog and lag as Prometheus gauges, for autoscaling",
		Long:  exporterLong,
		Example: `  # export the backlog of the handlers of domain.toml on :9465
  $ seqctl exporter --config domain.toml

  # refresh every 30 s, against another Redis, with JSON logs
  $ seqctl exporter --config deploy/domain.toml --redis-url redis://redis:6379/0 \
      --listen :9465 --interval 30s --log-format json

  # what an autoscaler reads
  $ curl -s localhost:9465/metrics | grep '^seqctl_backlog_events'
  seqctl_backlog_events{category="order",handler="OrderProjector"} 1`,
		Args: cmdutil.NoArgs,
		RunE: cmdutil.RunE(opts, func(cmd *cobra.Command, _ []string) error {
			opts.Global = f.Global
			return opts.check(cmd.CommandPath())
		}, runF, exporterRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Listen, "listen", defaultExporterListen, "serve /metrics and /healthz on this address")
	fl.DurationVar(&opts.Interval, "interval", defaultExporterInterval, "time between two reads of every partition, e.g. 10s (at least 100ms)")
	fl.StringVar(&opts.LogFormat, "log-format", "text", "log format: text or json")
	return cmd
}

// check validates the flags.
func (o *Options) check(command string) error {
	if o.Interval < minExporterInterval {
		return cmdutil.UsageErrorf(command, "--interval must be at least %v, got %v (e.g. --interval 10s)", minExporterInterval, o.Interval)
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		return cmdutil.UsageErrorf(command, "invalid value %q for --log-format: use text or json", o.LogFormat)
	}
	if _, port, err := net.SplitHostPort(o.Listen); err != nil || port == "" {
		return cmdutil.UsageErrorf(command, "invalid value %q for --listen: want host:port or :port, e.g. %s or 127.0.0.1:9465", o.Listen, defaultExporterListen)
	}
	return nil
}

// exporterSource is what the exporter reads: the operator API on its Redis, and the
// (category, handler) pairs of the config.
type exporterSource struct {
	adm      *admin.Admin
	conn     *redisconn.Conn
	rdb      redis.UniversalClient
	declared []metrics.HandlerCategory
}

// openExporterSource loads the config when one is given and builds the client, without
// reaching Redis yet. Every failure is a problem of the command line or the config
// (exit 2).
func openExporterSource(g cmdutil.GlobalOptions, log *slog.Logger) (*exporterSource, error) {
	var cfg *config.Config
	opts := admin.Options{}
	if g.ConfigPath != "" {
		var err error
		if cfg, err = cmdutil.LoadConfigFile(g.ConfigPath); err != nil {
			return nil, err
		}
		if !cfg.Broker.IsRedis() {
			return nil, &config.Error{File: cfg.File, Problems: []config.Problem{{Path: "broker.kind", Message: fmt.Sprintf(
				"seqctl exporter reads the partitions from Redis, not from the %q broker: set kind = \"redis\" or \"redis-cluster\"", cfg.Broker.Kind)}}}
		}
		if opts, err = admin.FromConfig(cfg); err != nil {
			return nil, err
		}
	}
	conn, err := redisconn.Resolve(g.RedisFlags(), cfg, os.Getenv)
	if err != nil {
		return nil, err
	}
	redisconn.WarnInsecureTLS(conn.TLSConfig(), func(msg string) { log.Warn(msg) })
	conn.EngineTimeouts() // each refresh's deadline reaches the socket
	redisconn.RouteRedisLogs(log)
	rdb := conn.NewClient()
	return &exporterSource{
		adm: admin.New(rdb, opts), conn: conn, rdb: rdb, declared: metrics.DeclaredPairs(opts.Topology),
	}, nil
}

// permanentProblem reaches Redis once and returns what to fix when the answer is a
// problem that waiting cannot fix, or "" (reachable, or not yet: the refreshes retry).
func (s *exporterSource) permanentProblem(ctx context.Context) string {
	if err := redisconn.CheckAddr(s.conn); err != nil {
		if msg := redisconn.PermanentProblem(err, s.conn); msg != "" {
			return msg
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.conn.Ping(pctx, s.rdb); err != nil && ctx.Err() == nil {
		return redisconn.PermanentProblem(err, s.conn)
	}
	return ""
}

func exporterRun(ctx context.Context, opts *Options) error {
	ctx = cmdutil.OrBackground(ctx)
	log := cmdutil.NewLogger(opts.IO.ErrOut, opts.LogFormat, "info")
	src, err := openExporterSource(opts.Global, log)
	if err != nil {
		return err
	}
	defer src.rdb.Close()
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf(
			"--listen: cannot listen on %s: %v; another process (a second exporter, or seqctl run --metrics-addr) may serve there: pass --listen with a free address", opts.Listen, err)}
	}
	defer ln.Close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	log.Info("connecting to Redis", src.conn.LogAttrs()...)
	if msg := src.permanentProblem(ctx); msg != "" {
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: errors.New(msg)}
	}
	if len(src.declared) == 0 {
		log.Info("no --config: categories and handlers are discovered in Redis; a handler's series appear with its first partition")
	}
	// A refresh's live heap is a page or two and the aggregate, whatever the number of
	// partitions, so the default GC target collects every few pages: at 400 % a refresh
	// spends a fraction of the CPU on it, for some tens of MB (docs/benchmarks.md).
	debug.SetGCPercent(exporterGCPercent)
	exp := metrics.NewBacklogExporter(metrics.BacklogOptions{Lister: src.adm, Declared: src.declared, Logger: log})
	return serveExporter(ctx, exp, ln, opts.Interval, log)
}

// serveExporter serves the exporter's endpoints on ln and refreshes it every interval
// until ctx ends (SIGINT or SIGTERM) or the server fails.
func serveExporter(ctx context.Context, exp *metrics.BacklogExporter, ln net.Listener, interval time.Duration, log *slog.Logger) error {
	srv := &http.Server{Handler: exp.Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving metrics", "addr", ln.Addr().String(), "paths", "/metrics /healthz", "interval", interval)

	rctx, stopRefreshing := context.WithCancel(ctx)
	refreshed := make(chan struct{})
	go func() { defer close(refreshed); exp.Run(rctx, interval) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
		err = fmt.Errorf("metrics server on %s stopped: %w", ln.Addr(), err)
	}
	stopRefreshing()
	<-refreshed
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err != nil {
		return err
	}
	log.Info("seqctl exporter: stopped")
	return nil
}
