// Package dev is 'seqctl dev': the whole system in one process, on an embedded Redis,
// with a live dashboard.
package dev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/top"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/demo"
	"github.com/seqctl/seqctl/pkg/tui"
)

// Options are the options of seqctl dev.
type Options struct {
	IO        *cmdutil.IOStreams
	Global    *cmdutil.GlobalOptions
	Rate      int
	Instances int
	Headless  bool
	Duration  time.Duration
	Every     time.Duration
	Poison    int
}

// NewCmd returns the 'seqctl dev' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Global: &f.Global}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole system in one process, on an embedded Redis, with a live dashboard",
		Long: `dev runs a complete demo with nothing to install: an embedded Redis on a loopback port
(printed, so other seqctl commands can connect with --redis-url), the demo domain
(testdata/demo/domain.toml: orders partitioned by client_id, payments by order_id, a
process manager per order), three engine instances with demo handlers (a few ms of work
each, and a poison order about once a minute that halts its client's partition), a
publisher, and the seqctl top dashboard attached.

From the dashboard, select a halted partition and skip it (s), move it to its DLQ (d) or
retry it (r). --headless prints a summary line every few seconds instead, for scripts.
With --redis-url the demo runs on that Redis instead of the embedded one.`,
		Example: `  # the demo with the dashboard (q quits)
  $ seqctl dev

  # 20 seconds without a terminal UI, then exit
  $ seqctl dev --headless --duration 20s

  # meanwhile, from another shell, with the URL dev printed
  $ seqctl partitions list --redis-url redis://127.0.0.1:40123/0`,
		Args: cobra.NoArgs,
		RunE: cmdutil.RunE(opts, func(*cobra.Command, []string) error {
			switch {
			case opts.Rate <= 0:
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("--rate must be a positive number of events per second")}
			case opts.Instances <= 0:
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("--instances must be at least 1")}
			case opts.Duration < 0 || opts.Every <= 0:
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("--duration must not be negative and --every must be positive")}
			case opts.Global.RedisCluster:
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("seqctl dev runs on one Redis (the embedded one, or --redis-url's), not on a Redis Cluster: drop --cluster")}
			}
			return nil
		}, runF, devRun),
	}
	cmd.Flags().IntVar(&opts.Rate, "rate", 50, "events published per second")
	cmd.Flags().IntVar(&opts.Instances, "instances", 3, "engine instances to run")
	cmd.Flags().BoolVar(&opts.Headless, "headless", false, "print summaries instead of the dashboard")
	cmd.Flags().DurationVar(&opts.Duration, "duration", 0, "stop after this long (0: until interrupted)")
	cmd.Flags().DurationVar(&opts.Every, "every", 3*time.Second, "summary period with --headless")
	cmd.Flags().IntVar(&opts.Poison, "poison-every", demo.DefaultPoisonEvery, "every n-th order is poison, about one a minute at the default rate (negative: never)")
	return cmd
}

// otherShellHint says how to reach the demo from another shell. Under 'go run' there is
// usually no seqctl on the PATH, so it says how to get one first.
func otherShellHint(url string, lookPath func(string) (string, error)) string {
	cmd := "seqctl partitions list --redis-url " + url
	if _, err := lookPath("seqctl"); err != nil {
		return "  other shells: no seqctl on the PATH; install it with 'go install ./cmd/seqctl' (or 'make build' for bin/seqctl), then: " + cmd
	}
	return "  other shells: " + cmd
}

func devRun(ctx context.Context, opts *Options) error {
	ctx = cmdutil.OrBackground(ctx)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	url := opts.Global.RedisURL
	if url == "" {
		url = os.Getenv(config.EnvRedisURL)
	}
	d, err := demo.Start(ctx, demo.Options{RedisURL: url, Rate: opts.Rate, Instances: opts.Instances, PoisonEvery: opts.Poison})
	if err != nil {
		return err
	}
	defer d.Close()
	where := "embedded Redis"
	if !d.Embedded {
		where = "Redis"
	}
	shown := cmdutil.MaskURL(d.URL) // a password is masked in the hint too: the operator knows it
	fmt.Fprintf(opts.IO.ErrOut, "seqctl dev: %s at %s\n%s\n", where, shown, otherShellHint(shown, exec.LookPath))

	if opts.Headless {
		t := time.NewTicker(opts.Every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				fmt.Fprintln(opts.IO.Out, "final: "+d.Summary().String())
				return nil
			case <-t.C:
				fmt.Fprintln(opts.IO.Out, d.Summary().String())
			}
		}
	}

	cfg, err := config.Parse("demo/domain.toml", demo.DomainTOML)
	if err != nil {
		return err
	}
	aopts, err := admin.FromConfig(cfg)
	if err != nil {
		return err
	}
	ropt, err := redis.ParseURL(d.URL)
	if err != nil {
		return err
	}
	ropt.MaxRetries = -1 // compare-and-act calls are never retried blindly
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	src := &top.Source{Admin: admin.New(rdb, aopts), Actor: cmdutil.Actor("dev")}
	return tui.Run(ctx, tui.Options{Source: src, Refresh: time.Second, NoColor: !opts.IO.Color, Addr: shown}, opts.IO.In, opts.IO.Out)
}
