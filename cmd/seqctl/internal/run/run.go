// Package run is 'seqctl run': the handlers of a domain.toml as a worker.
package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/outbox"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/deliver"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/inbox"
	"github.com/seqctl/seqctl/pkg/metrics"
)

// Options are the inputs of 'seqctl run'.
type Options struct {
	IO *cmdutil.IOStreams
	// ConfigPath is the domain.toml to run (the global --config; "domain.toml" when
	// not given).
	ConfigPath string
	// Redis are the global connection flags (see redisconn.Resolve).
	Redis redisconn.Flags
	// InstanceID names this instance in leases and the registry (--instance-id; "" lets
	// the engine pick host-pid-random).
	InstanceID string
	// MetricsAddr is where /metrics, /healthz and /readyz are served (--metrics-addr; ""
	// serves nothing).
	MetricsAddr string
	// LogFormat is "text" or "json" (--log-format).
	LogFormat string
	// LogLevel is "debug", "info", "warn" or "error" (--log-level).
	LogLevel string
	// ShutdownTimeout bounds the wait for in-flight events at shutdown (--shutdown-timeout).
	ShutdownTimeout time.Duration

	// signals replaces the process's SIGINT / SIGTERM delivery in tests.
	signals <-chan os.Signal
}

// Defaults of 'seqctl run'.
const (
	defaultShutdownTimeout = 30 * time.Second
	// startBackoffMin and startBackoffMax bound the wait between attempts to reach Redis
	// at startup.
	startBackoffMin = 250 * time.Millisecond
	startBackoffMax = 10 * time.Second
)

// NewCmd returns the 'seqctl run' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "run [--config FILE] [flags]",
		Short: "Run the handlers of a domain.toml as a worker",
		Long: `Run one engine instance with every event handler and process manager of a
domain.toml, delivering each event over HTTP or to a command as its [handlers.deliver]
table says (see docs/delivery.md):

  http = "URL"          the event envelope is POSTed as JSON; a 2xx answer means done
  exec = ["cmd", ...]   the envelope is written to the command's stdin; exit 0 means done

Per partition key, one event is delivered at a time, in publish order; different keys
are delivered in parallel, across every 'seqctl run' instance of the domain. Delivery
is at least once: after a crash the in-flight event of a partition may be delivered
again (X-Seq-Generation / SEQ_GENERATION tell a sink which owner is current). A failed
attempt is retried (max_retries, retry_delay); after the last one the partition halts
until an operator resolves its head.

Every event handler and process manager needs a deliver table; command handlers are
validated and stay inert (commands never reach a stream). Problems in the file, a
missing deliver table or a signing key that cannot be read exit with status 2,
every problem listed.

While Redis is unreachable at startup, seqctl run keeps trying with backoff and says so
in the log, until it connects or is stopped.

Signals: SIGTERM or SIGINT starts a graceful shutdown: no new events are started,
in-flight events get --shutdown-timeout to finish, leases are released so another
instance takes over at once, and the exit status is 0. A second SIGTERM or SIGINT
forces the exit (status 1): running exec commands are killed, and the partitions they
were on are retried by another instance once their lease expires.

Logs go to stderr (--log-format, --log-level). With --metrics-addr, Prometheus metrics
are served on /metrics (see docs/metrics.md), liveness on /healthz and readiness on
/readyz (200 once the engine runs with a live Redis session, 503 before and during
shutdown).

Traces: with OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) set, each handler
run is a consumer span exported over OTLP/HTTP, in the publisher's trace on the first
attempt and linked to it on a retry; OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_TRACES_SAMPLER and the other standard variables apply. Without them no span is
made, and the publisher's trace context still reaches the handlers (traceparent,
TRACEPARENT).`,
		Example: `  # run the handlers of ./domain.toml
  $ seqctl run

  # a named instance with metrics and JSON logs, against another Redis
  # (--config and --redis-url are global flags; SEQCTL_REDIS_URL works too)
  $ seqctl run --config deploy/domain.toml --instance-id worker-1 \
      --metrics-addr :9464 --log-format json --redis-url redis://redis:6379/0

  # stop it gracefully (a second signal forces the exit)
  $ kill -TERM <pid>`,
		Args: cmdutil.NoArgs,
		RunE: cmdutil.RunE(opts, func(cmd *cobra.Command, _ []string) error {
			opts.ConfigPath, opts.Redis = cmdutil.ConfigOrDefault(f.Global.ConfigPath), f.Global.RedisFlags()
			return opts.check(cmd.CommandPath())
		}, runF, runRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.InstanceID, "instance-id", "", "name of this instance in leases and the registry (default host-pid-random)")
	fl.StringVar(&opts.MetricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address, e.g. :9464 (default: off)")
	fl.StringVar(&opts.LogFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&opts.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long in-flight events may run after SIGTERM / SIGINT")
	return cmd
}

// check validates the flags.
func (o *Options) check(command string) error {
	switch {
	case o.LogFormat != "text" && o.LogFormat != "json":
		return cmdutil.UsageErrorf(command, "invalid value %q for --log-format: use text or json", o.LogFormat)
	case o.ShutdownTimeout <= 0:
		return cmdutil.UsageErrorf(command, "--shutdown-timeout must be positive, got %v", o.ShutdownTimeout)
	case strings.ContainsAny(o.InstanceID, " \t\r\n"):
		return cmdutil.UsageErrorf(command, "--instance-id %q contains white space", o.InstanceID)
	}
	if _, err := cmdutil.ParseLogLevel(o.LogLevel); err != nil {
		return cmdutil.UsageErrorf(command, "invalid value %q for --log-level: use debug, info, warn or error", o.LogLevel)
	}
	return nil
}

// runPlan is what 'seqctl run' will run: the loaded config, the initialised domain with
// its handler functions bound, and what was bound.
type runPlan struct {
	cfg      *config.Config
	dom      *engine.Domain
	bindings []deliver.Binding
	redis    *redisconn.Conn
	tracer   *sdktrace.TracerProvider // nil: no spans (tracing.go)
}

// loadRunPlan loads, checks and binds the config. Every failure is a config problem
// (exit 2).
func loadRunPlan(opts *Options, procs *deliver.Procs, log *slog.Logger) (*runPlan, error) {
	cfg, err := cmdutil.LoadConfigFile(opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	if !cfg.Broker.IsRedis() {
		return nil, &config.Error{File: cfg.File, Problems: []config.Problem{{Path: "broker.kind", Message: fmt.Sprintf(
			"seqctl run needs the redis broker, not %q: set kind = \"redis\", or \"redis-cluster\" for a Redis Cluster (the inline broker runs in one Go process, for tests)", cfg.Broker.Kind)}}}
	}
	conn, err := redisconn.Resolve(opts.Redis, cfg, os.Getenv)
	if err != nil {
		return nil, err
	}
	conn.EngineTimeouts()
	dom, err := cfg.InitDomain()
	if err != nil {
		return nil, err
	}
	bindings, err := deliver.Bind(cfg, dom, deliver.BindOptions{Procs: procs, Logger: log})
	if err != nil {
		return nil, err
	}
	runnable := 0
	for _, b := range bindings {
		if b.Mode != "" {
			runnable++
		}
	}
	if runnable == 0 {
		return nil, &config.Error{File: cfg.File, Problems: []config.Problem{{Message: "nothing to run: declare at least one event handler or process manager with a deliver table (command handlers are inert)"}}}
	}
	return &runPlan{cfg: cfg, dom: dom, bindings: bindings, redis: conn}, nil
}

// categories returns the categories a binding consumes, for the metrics' labels.
func (p *runPlan) categories(b deliver.Binding) []string {
	var out []string
	add := func(event string) {
		if et, ok := p.dom.Event(event); ok && !slices.Contains(out, et.Category) {
			out = append(out, et.Category)
		}
	}
	switch b.Kind {
	case "handler":
		for _, h := range p.cfg.Handlers {
			if h.Name == b.Name {
				if h.PartOf != "" {
					return []string{h.PartOf}
				}
				for _, e := range h.Handles {
					add(e)
				}
			}
		}
	case "process manager":
		for _, pm := range p.cfg.ProcessManagers {
			if pm.Name == b.Name {
				for _, h := range pm.Handles {
					add(h.Event)
				}
			}
		}
	}
	return out
}

func runRun(ctx context.Context, opts *Options) error {
	ctx = cmdutil.OrBackground(ctx)
	log := cmdutil.NewLogger(opts.IO.ErrOut, opts.LogFormat, opts.LogLevel)
	procs := &deliver.Procs{}
	plan, err := loadRunPlan(opts, procs, log)
	if err != nil {
		return err
	}
	running := plan.logBindings(log)
	ctx, forced, stopSignals := onSignals(ctx, opts, log)
	defer stopSignals()

	m := plan.newMetrics()
	if opts.MetricsAddr != "" {
		srv, err := serveMetrics(opts.MetricsAddr, m, log)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}

	tp, err := cmdutil.TracerProviderFromEnv(ctx, os.Getenv, log)
	if err != nil {
		return err
	}
	if tp != nil {
		defer cmdutil.ShutdownTracing(tp, log)
		plan.tracer = tp
	}

	stopSinks, err := startSinks(ctx, plan.bindings, m, log)
	if err != nil || stopSinks == nil {
		return err // nil: stopped by a signal while a database was awaited
	}
	defer stopSinks()

	redisconn.WarnInsecureTLS(plan.redis.TLSConfig(), func(msg string) { log.Warn(msg) })
	redisconn.RouteRedisLogs(log)
	rdb := plan.redis.NewClient() // a *redis.ClusterClient in cluster mode: the engine tells a cluster by it
	defer rdb.Close()
	eng, err := startEngine(ctx, plan.engineConfig(opts, rdb, log, m), plan.redis, log)
	if err != nil || eng == nil {
		return err // nil: stopped by a signal before Redis was reached
	}
	m.SetSource(eng)
	log.Info("seqctl run: ready", "instance", eng.InstanceID(), "handlers", running)

	waitRelay, err := runRelay(ctx, plan, rdb, m, log)
	if err != nil {
		_ = eng.Shutdown(context.Background())
		return err
	}
	defer waitRelay()

	<-ctx.Done()
	return shutDown(eng, forced, procs, opts.ShutdownTimeout, log)
}

// startSinks starts the SQL sinks of the bindings, before the engine takes any partition:
// each waits while its database cannot be reached (/readyz says which), and a problem
// waiting cannot fix (a DSN unset or unusable, refused credentials, a missing inbox table,
// a statement the database refuses) ends seqctl run with exit 1 and the handler's name.
// It returns nil, nil when ctx ends first; stop closes the sinks' databases.
func startSinks(ctx context.Context, bindings []deliver.Binding, m *metrics.Metrics, log *slog.Logger) (stop func(), err error) {
	var started []*inbox.Sink
	stop = func() {
		for _, s := range started {
			_ = s.Close()
		}
	}
	for _, b := range bindings {
		if b.Sink == nil {
			continue
		}
		m.AddReadiness(b.Sink.Ready)
		log.Info("connecting to the database of a SQL sink", "handler", b.Name, "dsn", b.Target)
		if err := b.Sink.Start(ctx); err != nil {
			_ = b.Sink.Close()
			stop()
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf("cannot start: %w", err)}
		}
		started = append(started, b.Sink)
	}
	return stop, nil
}

// logBindings logs what each binding delivers to, and the command handlers that stay
// inert; it returns how many bindings run.
func (p *runPlan) logBindings(log *slog.Logger) (running int) {
	var inert []string
	for _, b := range p.bindings {
		if b.Mode == "" {
			inert = append(inert, b.Name)
			continue
		}
		attrs := []any{"kind", b.Kind, "name", b.Name, "mode", b.Mode, "target", b.Target, "signed", b.Signed}
		if b.BatchMax > 1 {
			attrs = append(attrs, "batch_max", b.BatchMax, "batch_wait", b.BatchWait)
		}
		log.Info("delivering", attrs...)
	}
	if len(inert) > 0 {
		log.Info("command handlers are validated but inert: commands never reach a stream", "handlers", inert)
	}
	return len(p.bindings) - len(inert)
}

// onSignals makes the first SIGINT or SIGTERM (opts.signals in tests) end the returned
// context, a graceful shutdown, and sends the second on forced. stop stops listening.
func onSignals(ctx context.Context, opts *Options, log *slog.Logger) (_ context.Context, forced <-chan os.Signal, stop func()) {
	sigs := opts.signals
	unnotify := func() {}
	if sigs == nil {
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		unnotify = func() { signal.Stop(ch) }
		sigs = ch
	}
	ctx, cancel := context.WithCancel(ctx)
	second := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			log.Info("signal received: shutting down gracefully; send it again to force the exit", "signal", s.String(), "timeout", opts.ShutdownTimeout)
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			second <- s
		case <-done:
		}
	}()
	return ctx, second, func() {
		close(done)
		cancel()
		unnotify()
	}
}

// newMetrics returns the metrics of the run, with every running binding declared.
func (p *runPlan) newMetrics() *metrics.Metrics {
	m := metrics.New()
	for _, b := range p.bindings {
		if b.Mode != "" {
			m.Declare(b.Name, p.categories(b)...)
		}
	}
	return m
}

// engineConfig is the engine's configuration: the config's, with the flags of the run.
func (p *runPlan) engineConfig(opts *Options, rdb redis.UniversalClient, log *slog.Logger, m *metrics.Metrics) engine.EngineConfig {
	ecfg := p.cfg.EngineConfig(p.dom, rdb)
	ecfg.InstanceID = opts.InstanceID
	ecfg.Logger = log
	ecfg.Observer = m
	ecfg.ShutdownTimeout = opts.ShutdownTimeout
	if p.tracer != nil {
		ecfg.TracerProvider = p.tracer
	}
	return ecfg
}

// runRelay starts the outbox relay when [outbox] is configured; it stops when ctx ends
// and releases its category leases. wait waits for that and closes the outbox database
// (nothing to wait for without [outbox]).
func runRelay(ctx context.Context, plan *runPlan, rdb redis.UniversalClient, m *metrics.Metrics, log *slog.Logger) (wait func(), err error) {
	cfg := plan.cfg
	if cfg.Outbox == nil {
		return func() {}, nil
	}
	relay, ob, closeDB, err := outbox.NewRelay(cfg, rdb, plan.tracer, log.With("component", "relay"))
	if err != nil {
		return nil, err
	}
	outbox.StartBacklogGauge(ctx, ob, m)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := relay.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("outbox relay stopped", "err", err)
		}
	}()
	log.Info("outbox relay running")
	return func() {
		<-done
		closeDB()
	}, nil
}

// shutDown shuts the engine down, giving in-flight events timeout to finish; a second
// signal on forced ends it at once, killing the running exec commands (exit status 1).
func shutDown(eng *engine.Engine, forced <-chan os.Signal, procs *deliver.Procs, timeout time.Duration, log *slog.Logger) error {
	shut := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		shut <- eng.Shutdown(sctx)
	}()
	select {
	case err := <-shut:
		if err != nil {
			log.Warn("shutdown deadline passed: in-flight events were cancelled and will be delivered again by the next owner", "err", err)
		}
		log.Info("seqctl run: stopped")
		return nil
	case s := <-forced:
		n := procs.KillAll()
		log.Error("second signal: forcing the exit; in-flight events are retried by another instance once their leases expire", "signal", s.String(), "killed_commands", n)
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure}
	}
}

// startEngine logs where it connects and starts an engine, retrying with backoff while
// Redis cannot be reached. A problem that waiting cannot fix (a bad port, a database
// index Redis does not have, refused credentials, a missing permission) ends it at once
// with a message saying what to fix. It returns nil, nil when ctx ends first.
func startEngine(ctx context.Context, ecfg engine.EngineConfig, conn *redisconn.Conn, log *slog.Logger) (*engine.Engine, error) {
	if conn.IsCluster() {
		log.Info("connecting to Redis Cluster", conn.LogAttrs()...)
	} else {
		log.Info("connecting to Redis", conn.LogAttrs()...)
	}
	if err := redisconn.CheckAddr(conn); err != nil {
		if msg := redisconn.PermanentProblem(err, conn); msg != "" {
			return nil, &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: errors.New(msg)}
		}
	}
	backoff := startBackoffMin
	for attempt := 1; ; attempt++ {
		eng, err := engine.New(ecfg) // an Engine is used once: a new one per attempt
		if err != nil {
			return nil, err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = eng.Start(sctx)
		cancel()
		if err == nil {
			return eng, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if msg := redisconn.PermanentProblem(err, conn); msg != "" {
			return nil, &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: errors.New(msg)}
		}
		log.Warn("redis unreachable: retrying", append(conn.LogAttrs(), "attempt", attempt, "retry_in", backoff, "err", err)...)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		backoff = min(backoff*2, startBackoffMax)
	}
}

// serveMetrics listens on addr and serves the metrics endpoints in the background.
func serveMetrics(addr string, m *metrics.Metrics, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: cannot listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	return srv, nil
}
