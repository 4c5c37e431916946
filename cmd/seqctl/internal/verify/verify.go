// Package verify is 'seqctl verify': prove seqctl's promises on a deployment's own Redis
// with a checkable workload, optionally under faults.
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/pkg/verify"
)

// NewCmd returns the 'seqctl verify' command with its subcommands.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	return cmdutil.GroupOf(&cobra.Command{
		Use:   "verify <command>",
		Short: "Check seqctl's promises on your own Redis with a checkable workload",
		Long: `Check seqctl's promises on your own Redis, network and fleet: publish a workload
whose every event says which key it belongs to and where it comes in that key's
sequence, run engine instances whose handler records every run, and check the record:
nothing lost, each key's events applied in publish order, never two runs of one key at
once, re-runs only as documented, no stale generation after a newer one, no limit cap
exceeded. docs/verify.md tells how to read the report.`,
		Example: `  # a quick check of the Redis in $SEQCTL_REDIS_URL
  $ seqctl verify run

  # ten minutes under faults on a staging Redis Cluster, the report as JSON
  $ seqctl verify run --redis-url redis://staging:6379 --cluster --rate 500 --duration 10m --faults -o json`,
	}, newCmdRun(f, nil))
}

// RunOptions are the inputs of 'seqctl verify run'.
type RunOptions struct {
	IO     *cmdutil.IOStreams
	Redis  redisconn.Flags
	Output string

	Keys, Events, Rate, Instances int
	Duration                      time.Duration
	MaxUnacked, BatchMax          int
	Tenants, TenantCap            int
	Poison                        int
	Timeout                       time.Duration
	Keep                          bool
	Faults                        bool
	FaultEvery                    time.Duration
	Seed                          uint64
}

func newCmdRun(f *cmdutil.Factory, runF func(*RunOptions) error) *cobra.Command {
	opts := &RunOptions{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "run [flags]",
		Short: "Publish a checkable workload, run engine instances on it, check every run",
		Long: `Publish a checkable workload into a category of its own (verify_{id}, never one of
yours), run engine instances in this process whose handler records every run with its
key, its place in the key's sequence, the lease generation and attempt and its times,
wait until every event was applied (or --timeout), delete the workload's keys (unless
--keep), and check the record.

The workload: --keys keys with --events events each, published before the instances
start (a backlog), or with --rate at that many events a second while they run (with
--duration, --events is what the rate publishes in that time). --max-unacked and
--batch-max set the engines' acknowledgement mode and the handler's batches;
--tenants puts the keys under a limit key with a cap of --tenant-cap runs at once;
--poison gives that many keys a poison event (one that always fails) in the middle of
their sequence: each must halt on it after its retries (2, 50 ms apart), with nothing
after it applied.

--faults is for a staging deployment: about every --fault-every, one fault at random
from --seed (printed; the same seed gives the same faults): an instance stopped
abruptly and started again, an instance crashed (its connections closed first: nothing
acknowledged or released; its partitions move once its session expires, after the lease
TTL) and started again, every connection of an instance closed by the server
(CLIENT KILL), SCRIPT FLUSH on every master, or CLIENT PAUSE of writes for 500 ms on
every master (every client of that Redis waits). Never use it on a Redis
that serves production traffic.

The report: one row per kind of violation (lost, out_of_order, overlap, rerun,
stale_generation, cap_exceeded, wrong_halt) with its count and the first one found,
naming the key and the events; then throughput and first-run latency. -o json prints
{category, seed, faults, report}. Exit status 0 when nothing was found, 1 when a
violation was (or the run failed).`,
		Example: `  $ seqctl verify run --keys 200 --events 50
  $ seqctl verify run --rate 400 --duration 5m --batch-max 8 --tenants 10 --faults --seed 42`,
		Args: cmdutil.NoArgs,
		RunE: cmdutil.RunE(opts, func(cmd *cobra.Command, _ []string) error {
			opts.Redis, opts.Output = f.Global.RedisFlags(), f.Global.Output
			if err := cmdutil.CheckFormat(cmd, opts.Output); err != nil {
				return err
			}
			return opts.check(cmd)
		}, runF, verifyRun),
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Keys, "keys", 100, "partition keys of the workload")
	fl.IntVar(&opts.Events, "events", 20, "events per key (with --rate and --duration: computed)")
	fl.IntVar(&opts.Rate, "rate", 0, "events a second published while the instances run (0: all before they start)")
	fl.DurationVar(&opts.Duration, "duration", 0, "with --rate: how long to publish")
	fl.IntVar(&opts.Instances, "instances", 2, "engine instances to run")
	fl.IntVar(&opts.MaxUnacked, "max-unacked", 1, "the engines' max_unacked")
	fl.IntVar(&opts.BatchMax, "batch-max", 1, "events per handler call (above 1: batches)")
	fl.IntVar(&opts.Tenants, "tenants", 0, "put the keys in this many tenants under a limit key (0: no limit)")
	fl.IntVar(&opts.TenantCap, "tenant-cap", 2, "with --tenants: runs of a tenant at once")
	fl.IntVar(&opts.Poison, "poison", 0, "give this many keys a poison event (always fails) in the middle: each must halt on it")
	fl.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "how long to wait for every event to be applied, after the last publish")
	fl.BoolVar(&opts.Keep, "keep", false, "leave the workload's keys in Redis")
	fl.BoolVar(&opts.Faults, "faults", false, "inject faults at random (staging only: see above)")
	fl.DurationVar(&opts.FaultEvery, "fault-every", 10*time.Second, "with --faults: the mean time between two faults")
	fl.Uint64Var(&opts.Seed, "seed", 0, "with --faults: the seed of the faults (0: a random one, printed)")
	return cmd
}

func (o *RunOptions) check(cmd *cobra.Command) error {
	path := cmd.CommandPath()
	for _, v := range []struct {
		name string
		n    int
		min  int
	}{{"--keys", o.Keys, 1}, {"--events", o.Events, 1}, {"--instances", o.Instances, 1}, {"--max-unacked", o.MaxUnacked, 1},
		{"--batch-max", o.BatchMax, 1}, {"--rate", o.Rate, 0}, {"--tenants", o.Tenants, 0}, {"--tenant-cap", o.TenantCap, 1}, {"--poison", o.Poison, 0}} {
		if v.n < v.min {
			return cmdutil.UsageErrorf(path, "%s is %d; it must be at least %d", v.name, v.n, v.min)
		}
	}
	switch {
	case o.Duration < 0 || o.Timeout <= 0 || o.FaultEvery <= 0:
		return cmdutil.UsageErrorf(path, "--duration must not be negative, --timeout and --fault-every must be positive")
	case o.Duration > 0 && o.Rate == 0:
		return cmdutil.UsageErrorf(path, "--duration needs --rate: it is how long the rate publishes")
	case o.Seed != 0 && !o.Faults:
		return cmdutil.UsageErrorf(path, "--seed chooses the faults: add --faults")
	case o.BatchMax > 1000:
		return cmdutil.UsageErrorf(path, "--batch-max is %d; it must be at most 1000", o.BatchMax)
	}
	if o.Duration > 0 {
		o.Events = max(1, int(o.Duration.Seconds()*float64(o.Rate))/o.Keys)
	}
	return nil
}

// runReport is the JSON of a run.
type runReport struct {
	Category string         `json:"category"`
	Seed     uint64         `json:"seed,omitempty"`
	Faults   map[string]int `json:"faults,omitempty"`
	Report   verify.Report  `json:"report"`
}

func verifyRun(ctx context.Context, opts *RunOptions) error {
	ios := opts.IO
	conn, rdb, err := redisconn.Connect(ctx, opts.Redis, nil, os.Getenv, ios.ErrOut)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// The engines' error lines and the fault notes go to stderr from other goroutines.
	errOut := &lockedWriter{w: ios.ErrOut}
	vo := verify.Options{
		Client: rdb, NewClient: conn.NewNamedClient,
		Keys: opts.Keys, Events: opts.Events, Rate: opts.Rate, Instances: opts.Instances,
		MaxUnacked: opts.MaxUnacked, BatchMax: opts.BatchMax, Tenants: opts.Tenants, TenantCap: opts.TenantCap, Poison: opts.Poison,
		Timeout: opts.Timeout, Keep: opts.Keep,
		Logger: slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	out := runReport{}
	if opts.Faults {
		if opts.Seed == 0 {
			opts.Seed = rand.Uint64()
		}
		out.Seed, out.Faults = opts.Seed, map[string]int{}
		fmt.Fprintf(errOut, "faults from seed %d (--seed %d replays them)\n", opts.Seed, opts.Seed)
		vo.Faults = verify.RandomFaults(opts.Seed, opts.FaultEvery, func(s string) {
			fmt.Fprintf(errOut, "%s fault: %s\n", time.Now().Format(time.TimeOnly), s)
		}, out.Faults)
	}
	fmt.Fprintf(errOut, "publishing %d events over %d keys to %s; %d instances\n", opts.Keys*opts.Events, opts.Keys, conn.Where(), opts.Instances)
	res, err := verify.Run(ctx, vo)
	out.Category, out.Report = res.Category, res.Report
	if res.CleanupErr != nil {
		fmt.Fprintf(errOut, "seqctl: warning: the workload's keys could not all be deleted (%v): delete the keys matching *%s* (SCAN, DEL; on every master of a cluster)\n",
			res.CleanupErr, strings.TrimPrefix(res.Category, "verify_"))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if cmdutil.Structured(opts.Output) {
		if werr := cmdutil.WriteData(ios.Out, opts.Output, out); werr != nil {
			return werr
		}
	} else if perr := printReport(ios, out); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	if !res.Report.OK() {
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: errors.New(firstViolations(res.Report))}
	}
	return nil
}

func printReport(ios *cmdutil.IOStreams, out runReport) error {
	r := out.Report
	t := cmdutil.NewTablePrinter(ios, "VIOLATION", "COUNT", "FIRST")
	for _, k := range r.Kinds {
		first := "-"
		if k.First != nil {
			first = fmt.Sprintf("key %s, events %v: %s", k.First.Key, k.First.Seqs, k.First.Detail)
		}
		count := strconv.Itoa(k.Count)
		if k.Count > 0 {
			count = ios.Red(count)
		}
		t.AddRow(string(k.Kind), count, first)
	}
	if err := t.Render(ios.Out); err != nil {
		return err
	}
	fmt.Fprintf(ios.Out, "\ncategory %s: %d keys, %d events published, %d applied; %d runs, %d re-runs, %d failed\n",
		out.Category, r.Keys, r.Published, r.Applied, r.Runs, r.ReRuns, r.Failures)
	fmt.Fprintf(ios.Out, "%.0f events/s; first-run latency p50 %v, p99 %v, max %v\n", r.Throughput,
		r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond))
	if len(out.Faults) > 0 {
		fmt.Fprintf(ios.Out, "faults (seed %d): %v\n", out.Seed, out.Faults)
	}
	return nil
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// firstViolations names the first violation of each kind found.
func firstViolations(r verify.Report) string {
	s := "verify: violations found:"
	for _, k := range r.Kinds {
		if k.First != nil {
			s += fmt.Sprintf("\n  %d %s; the first: key %s, events %v: %s", k.Count, k.Kind, k.First.Key, k.First.Seqs, k.First.Detail)
		}
	}
	return s
}
