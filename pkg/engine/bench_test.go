package engine

// Benchmarks of the partitioned consumer against a private redis-server, with the
// figures docs/benchmarks.md compares to the peers harness (shared/bench/peers).
//
//	go test -run '^$' -bench . -benchtime 1x ./pkg/engine/
//
// Each benchmark does its measured work once, whatever b.N is, and reports its figures
// with b.ReportMetric (ns/op is suppressed: it would only be the wall time of the set-up).
// Nothing here fails on slowness; a figure below its goal is reported, not asserted.
//
// Engines run with the default timing (lease TTL 15s, heartbeat 3s, discovery 2s,
// batch 16), as a user gets them. Environment:
//
//	SEQCTL_BENCH_CPUPROFILE=/path/prefix  a CPU profile of each measured window (not the
//	                                      set-up) in /path/prefix-<benchmark>.pprof
//	SEQCTL_BENCH_CLUSTER=1                each benchmark on one node and on a 3-master
//	                                      Redis Cluster, side by side (target_bench_test.go)
//	SEQCTL_BENCH_LATENCY_KEYS=N           BenchmarkLatency over N partitions (default 64)
//	SEQCTL_BENCH_IDLE_PARTS=N             the idle-cost benchmarks over N partitions (1,000)
//	SEQCTL_BENCH_DRAIN_KEYS=N             BenchmarkDrainKeys over N keys (10,000)
//	SEQCTL_BENCH_INSTANCES=N              engines of BenchmarkThroughput (2; 4 on a cluster)
//	SEQCTL_BENCH_WINDOW=S                 BenchmarkLatency and the idle costs measured over
//	                                      S seconds (10), BenchmarkDiscoveryCost (30)
//	SEQCTL_BENCH_TRACING=drop             the engines get a tracer provider whose sampler
//	                                      drops every span (the cost of tracing switched
//	                                      on, exporting nothing)
//	SEQCTL_BENCH_EVENTS=N                 BenchmarkThroughput over N events (a quick check)
//
// Metrics: rcpu% is redis-server CPU, ccpu% this process (engines, handlers, harness) and
// other% every other process on the machine, each in % of one core over the window; a
// large other% means the figures were taken on a busy machine. On a cluster rcpu% and the
// command counts are the sums over the masters.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ---------------------------------------------------------------------------
// Harness helpers.

// rtHook counts client round trips (a pipeline or a script call is one).
type rtHook struct{ n *atomic.Int64 }

func (h rtHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h rtHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h rtHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// benchEngine starts an engine with the default timing (as a user gets it) on its own
// client, counting the client's round trips in rt (on a cluster, those to each master:
// a pipeline over three masters is three). It is shut down at cleanup.
func benchEngine(b *testing.B, t *benchTarget, d *Domain, id string, rt *atomic.Int64) *Engine {
	b.Helper()
	return benchEngineWith(b, t, d, id, rt, nil)
}

// benchEngineWith is benchEngine with the configuration changed by mod.
func benchEngineWith(b *testing.B, t *benchTarget, d *Domain, id string, rt *atomic.Int64, mod func(*EngineConfig)) *Engine {
	b.Helper()
	c := t.tg.client(b)
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(rtHook{rt}) })
	} else {
		c.AddHook(rtHook{rt})
	}
	maxUnacked, _ := strconv.Atoi(os.Getenv("SEQCTL_BENCH_MAX_UNACKED")) // 0: the default, 1
	cfg := EngineConfig{
		Domain: d, Client: c, InstanceID: id, ShutdownTimeout: 10 * time.Second, MaxUnacked: maxUnacked,
		KeyspaceNotifications: os.Getenv("SEQCTL_BENCH_KEYSPACE"), // "": the default, auto
		Logger:                slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	switch v := os.Getenv("SEQCTL_BENCH_TRACING"); v {
	case "":
	case "drop":
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		cfg.TracerProvider = tp
	default:
		b.Fatalf("SEQCTL_BENCH_TRACING=%s: want drop or nothing", v)
	}
	if mod != nil {
		mod(&cfg)
	}
	return runEngine(b, cfg)
}

// benchPayload is the payload of event seq of key index k (testPayload's JSON shape).
func benchPayload(k, seq int) []byte {
	return fmt.Appendf(nil, `{"client_id":"client-%d","seq":%d}`, k, seq)
}

// payloadSeq reads "seq" from a benchPayload without a JSON decoder (kept off the
// handler's measured time as far as possible).
func payloadSeq(data []byte) int {
	s := string(data)
	i := strings.Index(s, `"seq":`)
	if i < 0 {
		return -1
	}
	n, ok := 0, false
	for _, c := range s[i+6:] {
		if c < '0' || c > '9' {
			break
		}
		n, ok = n*10+int(c-'0'), true
	}
	if !ok {
		return -1
	}
	return n
}

// keyIndex returns N of "client-N".
func keyIndex(key string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(key, "client-"))
	if err != nil {
		return -1
	}
	return n
}

// publishAll appends n events, event i to key i%keys with per-key sequence seqBase+i/keys,
// through RedisBroker.Publish (the product's publish path) from up to 16 goroutines, each
// owning a subset of the keys so that each key's events are appended in sequence order.
// It returns the publish rate (not a figure of the benchmark).
func publishAll(b *testing.B, rdb redis.UniversalClient, d *Domain, n, keys, seqBase int) float64 {
	b.Helper()
	broker := NewRedisBroker(rdb)
	workers := min(keys, 16)
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; i < n; i++ {
				if k := i % keys; k%workers == g {
					if _, err := broker.Publish(ctx, d, "OrderPlaced", benchPayload(k, seqBase+i/keys), PublishOptions{}); err != nil {
						errs <- fmt.Errorf("publish %d: %w", i, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return float64(n) / time.Since(t0).Seconds()
}

// redisSnap is a reading of INFO commandstats and cpu, summed over the masters.
type redisSnap struct {
	at time.Time
	// watchMGets is harnessMGets at the reading: the lease watch's own MGETs, which the
	// call counts leave out (the engine's drain script runs MGETs too).
	watchMGets int64
	calls      map[string]int64 // command -> calls (including calls made inside Lua scripts)
	usec       map[string]int64 // command -> microseconds spent (a script's includes its calls)
	cpu        float64          // used_cpu_sys + used_cpu_user, seconds
}

func snapRedis(b *testing.B, t *benchTarget) redisSnap {
	b.Helper()
	s := redisSnap{calls: map[string]int64{}, usec: map[string]int64{}}
	for _, n := range t.nodes {
		txt, err := n.Info(context.Background(), "commandstats", "cpu").Result()
		if err != nil {
			b.Fatalf("INFO: %v", err)
		}
		s.add(txt)
	}
	s.at = time.Now()
	s.watchMGets = harnessMGets.Load()
	return s
}

// harnessMGets counts the MGET commands the lease watch sent (leaseGetter).
var harnessMGets atomic.Int64

// add adds one master's INFO reply to the reading.
func (s *redisSnap) add(txt string) {
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		if name, rest, ok := strings.Cut(line, ":"); ok {
			switch {
			case strings.HasPrefix(name, "cmdstat_"):
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "calls="); ok {
						n, _ := strconv.ParseInt(v, 10, 64)
						s.calls[strings.TrimPrefix(name, "cmdstat_")] += n
					}
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						n, _ := strconv.ParseInt(v, 10, 64)
						s.usec[strings.TrimPrefix(name, "cmdstat_")] += n
					}
				}
			case name == "used_cpu_sys" || name == "used_cpu_user":
				v, _ := strconv.ParseFloat(rest, 64)
				s.cpu += v
			}
		}
	}
}

// callsBetween returns per-command call deltas and their total, leaving out the
// harness's own INFO and CONFIG calls (the engine uses none) and the lease watch's MGETs
// (counted by the watch: the engine's MGETs stay in).
func callsBetween(a, z redisSnap) (map[string]int64, int64) {
	out := map[string]int64{}
	var total int64
	for k, v := range z.calls {
		if k == "info" || strings.HasPrefix(k, "config") {
			continue
		}
		d := v - a.calls[k]
		if k == "mget" {
			d -= z.watchMGets - a.watchMGets
		}
		if d > 0 {
			out[k] = d
			total += d
		}
	}
	return out, total
}

// logWatchCost logs what the lease watch's MGETs cost Redis between two readings: they
// are left out of the call counts, not out of rcpu% (on a cluster a poll is one MGET per
// partition).
func logWatchCost(b *testing.B, a, z redisSnap) {
	b.Helper()
	win := z.at.Sub(a.at).Seconds()
	b.Logf("lease watch (left out of the counts): %.0f MGET/s; all MGETs (the engine's in its scripts too): %.0f µs/s of Redis time", float64(z.watchMGets-a.watchMGets)/win, float64(z.usec["mget"]-a.usec["mget"])/win)
}

// usecBetween returns per-command microseconds spent in Redis between two readings (the
// harness's own commands left out, and with them every MGET: the engine calls MGET only
// inside its scripts, whose time includes the commands they call).
func usecBetween(a, z redisSnap) map[string]int64 {
	out := map[string]int64{}
	for k, v := range z.usec {
		if k == "info" || k == "mget" || strings.HasPrefix(k, "config") {
			continue
		}
		if d := v - a.usec[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// breakdown renders per-command figures, biggest first: count/div with the unit.
func breakdown(m map[string]int64, div float64, unit string) string {
	type kv struct {
		k string
		v int64
	}
	var xs []kv
	for k, v := range m {
		xs = append(xs, kv{k, v})
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].v > xs[j].v || (xs[i].v == xs[j].v && xs[i].k < xs[j].k) })
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%s=%.3g", x.k, float64(x.v)/div)
	}
	return strings.Join(parts, " ") + " (" + unit + ")"
}

// processCPU is this process's user+system CPU time in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// hostBusy is the machine's busy CPU time (all processes) in seconds, from /proc/stat;
// busy minus Redis minus this process is what other processes took during a window
// (the "other%" metric: a noisy neighbour shows up there).
func hostBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var total, idle float64
	for i, x := range f[1:] {
		v, _ := strconv.ParseFloat(x, 64)
		if i == 7 { // steal: not ours, not theirs
			continue
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return (total - idle) / 100 // USER_HZ
}

// cpuWindow reads the CPU counters at the start and end of a measured window.
type cpuWindow struct {
	redis, proc, host float64
	at                time.Time
}

func readCPU(s redisSnap) cpuWindow {
	return cpuWindow{redis: s.cpu, proc: processCPU(), host: hostBusy(), at: time.Now()}
}

// report adds rcpu% (redis-server), ccpu% (this process: engines, handlers, harness) and
// other% (every other process on the machine), each in % of one core.
func (a cpuWindow) report(b *testing.B, z cpuWindow) {
	win := z.at.Sub(a.at).Seconds()
	r, c, h := z.redis-a.redis, z.proc-a.proc, z.host-a.host
	b.ReportMetric(100*r/win, "rcpu%")
	b.ReportMetric(100*c/win, "ccpu%")
	b.ReportMetric(max(100*(h-r-c)/win, 0), "other%")
}

// startProfile starts a CPU profile of the measured window when SEQCTL_BENCH_CPUPROFILE
// is set; the returned func stops it.
func startProfile(b *testing.B) func() {
	prefix := os.Getenv("SEQCTL_BENCH_CPUPROFILE")
	if prefix == "" {
		return func() {}
	}
	name := prefix + "-" + strings.NewReplacer("/", "-").Replace(b.Name()) + ".pprof"
	f, err := os.Create(name)
	if err != nil {
		b.Logf("cpu profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Logf("cpu profile: %v", err)
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close(); b.Logf("cpu profile of the measured window: %s", name) }
}

func ownedBy(es ...*Engine) []int {
	out := make([]int, len(es))
	for i, e := range es {
		out[i] = len(e.Owned())
	}
	return out
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// waitUntil polls cond every 10ms until it holds or timeout passes; it reports whether
// cond held (a benchmark reports a miss instead of failing on it).
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spinWait waits d precisely: time.Sleep rounds sub-millisecond waits up to about 1ms.
// It yields between checks, so other goroutines run, but it does burn idle CPU.
func spinWait(d time.Duration) {
	t := time.Now()
	for time.Since(t) < d {
		runtime.Gosched()
	}
}

// leaseWatch polls the lease of every partition (MGETs of 500 keys, every 20ms per 1,000
// partitions, left out of the call counts) and records each change of hands, so that a
// latency outlier can be told apart from a partition that had no owner for a while. The
// period grows with the partitions: an MGET of 10,000 keys every 20ms kept Redis busy for
// 12% of the time and allocated 25 MB/s here, which showed as latency of the engine. On a
// cluster a poll is one MGET per partition (leaseGetter), so it polls every 100ms per
// 1,000 partitions.
type leaseWatch struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	changes []string                 // "+offset key old->new"
	gaps    map[string]time.Duration // partition -> time seen without an owner

	freeSince []time.Time // per partition: unowned since (zero: owned); written by the poller
}

// With owned set, every partition is expected to have an owner from the start, so one
// without is counted as unowned from the first reading; otherwise first acquisitions are
// not counted as changes.
func watchLeases(t *benchTarget, keys int, t0 time.Time, owned bool) *leaseWatch {
	lw := &leaseWatch{stop: make(chan struct{}), done: make(chan struct{}), gaps: map[string]time.Duration{}, freeSince: make([]time.Time, keys)}
	names := make([]string, keys)
	for k := range names {
		names[k] = t.keys.LeaseKey(t.keys.PartitionStream("order", "client-"+strconv.Itoa(k)), "Projector")
	}
	get := leaseGetter(t, names)
	period := 20 * time.Millisecond
	if t.cluster() {
		period = 100 * time.Millisecond
	}
	go func() {
		defer close(lw.done)
		prev := make([]string, keys)
		freeSince := lw.freeSince
		tick := time.NewTicker(time.Duration(max(1, keys/1000)) * period)
		defer tick.Stop()
		first := true
		for {
			select {
			case <-lw.stop:
				return
			case <-tick.C:
			}
			vals, err := get(context.Background())
			if err != nil {
				continue
			}
			now := time.Now()
			lw.mu.Lock()
			for k, v := range vals {
				cur, _ := v.(string)
				if first && owned && cur == "" {
					freeSince[k] = now
				}
				if cur == prev[k] {
					continue
				}
				if prev[k] != "" || !freeSince[k].IsZero() {
					lw.changes = append(lw.changes, fmt.Sprintf("+%.2fs client-%d %q->%q", now.Sub(t0).Seconds(), k, prev[k], cur))
				}
				if cur == "" {
					freeSince[k] = now
				} else if !freeSince[k].IsZero() {
					lw.gaps["client-"+strconv.Itoa(k)] += now.Sub(freeSince[k])
					freeSince[k] = time.Time{}
				}
				prev[k] = cur
			}
			lw.mu.Unlock()
			first = false
		}
	}()
	return lw
}

// finish stops the watch, logs the changes of hands and the unowned spells, and returns
// the number of changes.
func (lw *leaseWatch) finish(b *testing.B) int {
	close(lw.stop)
	<-lw.done
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for k, since := range lw.freeSince {
		if !since.IsZero() {
			lw.gaps["client-"+strconv.Itoa(k)] += time.Since(since)
			lw.changes = append(lw.changes, fmt.Sprintf("client-%d still without an owner at the end", k))
		}
	}
	if len(lw.changes) > 0 {
		b.Logf("%d lease changes during the window: %s", len(lw.changes), strings.Join(lw.changes[:min(len(lw.changes), 40)], "; "))
		var gs []string
		for k, g := range lw.gaps {
			gs = append(gs, fmt.Sprintf("%s=%.0fms", k, float64(g)/1e6))
		}
		sort.Strings(gs)
		b.Logf("time without an owner per partition: %s", strings.Join(gs, " "))
	}
	return len(lw.changes)
}

// settle waits until every event published so far is handled (handled() >= want) and
// the parts partitions are owned in fair shares (each instance within one of
// ceil(parts/instances)), steadily for one second. It returns how long that took from
// start (the engines' start), or a negative value when it did not happen within limit.
func settle(b *testing.B, start time.Time, limit time.Duration, handled func() int64, want int64, parts int, es ...*Engine) float64 {
	b.Helper()
	return settleOwned(b, start, limit, handled, want, parts, len(es), func() []int { return ownedBy(es...) })
}

// settleOwned is settle for instances whose shares owned reports.
func settleOwned(b *testing.B, start time.Time, limit time.Duration, handled func() int64, want int64, parts, instances int, owned func() []int) float64 {
	b.Helper()
	target := (parts + instances - 1) / instances
	ok := func() bool {
		if handled() < want {
			return false
		}
		o := owned()
		for _, n := range o {
			if n < target-1 || n > target+1 {
				return false
			}
		}
		return sum(o) == parts
	}
	var since time.Time
	done := waitUntil(limit, func() bool {
		if !ok() {
			since = time.Time{}
			return false
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= time.Second
	})
	if !done {
		b.Logf("NOT SETTLED within %v: handled %d of %d, owned per instance %v (fair share %d each)", limit, handled(), want, owned(), target)
		return -1
	}
	took := since.Sub(start).Seconds()
	b.Logf("settled %.2fs after start: owned per instance %v", took, owned())
	return took
}

// ---------------------------------------------------------------------------
// BenchmarkIdleCost: Redis calls per second of 1,000 idle partitions (SEQCTL_BENCH_IDLE_PARTS
// to change) owned by two instances. Goal: at most 20 calls/s in total. It also reports
// the memory the two engines added to this process, per instance: the Go heap in use and
// the resident set, each after a GC, against a reading taken before they started
// (BenchmarkIdleProcs measures each instance as a process of its own).

func BenchmarkIdleCost(b *testing.B) {
	onTargets(b, benchIdleCost)
}

func benchIdleCost(b *testing.B, t *benchTarget) {
	parts := envInt("SEQCTL_BENCH_IDLE_PARTS", 1000)
	ip := startIdlePair(b, t, parts, 3*time.Minute)
	rt, e1, e2, settled, handled := &ip.rt, ip.e1, ip.e2, ip.settled, &ip.handled

	stop := startProfile(b)
	s0, rt0 := snapRedis(b, t), rt.Load()
	c0 := readCPU(s0)
	time.Sleep(time.Duration(envInt("SEQCTL_BENCH_WINDOW", 10)) * time.Second)
	s1, rt1 := snapRedis(b, t), rt.Load()
	c1 := readCPU(s1)
	stop()
	win := s1.at.Sub(s0.at).Seconds()
	bd, total := callsBetween(s0, s1)
	t.logDormant(b, parts)
	b.Logf("%d partitions; redis calls/s by command over %.1fs: %s", parts, win, breakdown(bd, win, "calls/s"))
	b.Logf("redis time: %s", breakdown(usecBetween(s0, s1), win, "µs/s"))
	mem := readMem()
	b.Logf("this process: heap in use %.1f MiB before the engines, %.1f MiB after (%.1f MiB per instance); RSS %.1f -> %.1f MiB; %d goroutines (%d before the engines)",
		mib(ip.mem0.heap), mib(mem.heap), mib(mem.heap-ip.mem0.heap)/2, mib(ip.mem0.rss), mib(mem.rss), mem.goroutines, ip.mem0.goroutines)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(total)/win, "calls/s")
	b.ReportMetric(float64(rt1-rt0)/win, "rt/s")
	b.ReportMetric(settled, "settle_s")
	b.ReportMetric(mib(mem.heap-ip.mem0.heap)/2, "heapMiB/inst")
	b.ReportMetric(mib(mem.rss-ip.mem0.rss)/2, "rssMiB/inst")
	b.Logf("owned per instance after the window: %v", ownedBy(e1, e2))
	c0.report(b, c1)
	if handled.Load() != int64(parts) {
		b.Logf("handled %d events, want %d", handled.Load(), parts)
	}
}

// idlePair is two engines that own parts idle partitions (one event each, handled), in
// fair shares, after a warm-up, on a private redis-server or cluster.
type idlePair struct {
	rt      atomic.Int64 // the engines' client round trips
	handled atomic.Int64
	e1, e2  *Engine
	settled float64  // seconds from start until the shares and the events settled
	mem0    memUsage // this process before the engines started
}

// startIdlePair publishes one event to each of parts partitions, starts two engines with
// the default timing, waits (at most limit) until the events are handled and the shares
// settle, then lets the doorbell's first blocking reads time out (the warm-up the peers
// harness also makes).
func startIdlePair(b *testing.B, t *benchTarget, parts int, limit time.Duration) *idlePair {
	b.Helper()
	ip := &idlePair{}
	d := testDomain(b, func(context.Context, Event) error { ip.handled.Add(1); return nil }, nil)
	publishAll(b, t.admin, d, parts, parts, 0)
	ip.mem0 = readMem()
	started := time.Now()
	ip.e1 = benchEngine(b, t, d, "bench-a", &ip.rt)
	ip.e2 = benchEngine(b, t, d, "bench-b", &ip.rt)
	ip.settled = settle(b, started, limit, ip.handled.Load, int64(parts), parts, ip.e1, ip.e2)
	time.Sleep(t.idleWarmup())
	return ip
}

// ---------------------------------------------------------------------------
// BenchmarkHaltedIdleCost: Redis calls per second of 1,000 halted partitions owned by two
// instances, waiting for an operator. Goal: at most 20 calls/s in total.

func BenchmarkHaltedIdleCost(b *testing.B) {
	onTargets(b, benchHaltedIdleCost)
}

func benchHaltedIdleCost(b *testing.B, t *benchTarget) {
	const parts = 1000
	d := testDomain(b, func(context.Context, Event) error { return errors.New("poison: refused") }, nil)
	publishAll(b, t.admin, d, parts, parts, 0)

	var rt atomic.Int64
	e1 := benchEngine(b, t, d, "bench-a", &rt)
	e2 := benchEngine(b, t, d, "bench-b", &rt)
	deadline := time.Now().Add(3 * time.Minute)
	for e1.Stats().Halted+e2.Stats().Halted < parts {
		if time.Now().After(deadline) {
			b.Fatalf("halted %d+%d of %d partitions within 3 minutes", e1.Stats().Halted, e2.Stats().Halted, parts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(doorbellBlock + 2*time.Second) // warm-up, as in BenchmarkIdleCost

	s0, rt0 := snapRedis(b, t), rt.Load()
	c0 := readCPU(s0)
	time.Sleep(10 * time.Second)
	s1, rt1 := snapRedis(b, t), rt.Load()
	c1 := readCPU(s1)
	win := s1.at.Sub(s0.at).Seconds()
	bd, total := callsBetween(s0, s1)
	b.Logf("halted partitions %d+%d; redis calls/s by command over %.1fs: %s", e1.Stats().Halted, e2.Stats().Halted, win, breakdown(bd, win, "calls/s"))
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(total)/win, "calls/s")
	b.ReportMetric(float64(rt1-rt0)/win, "rt/s")
	c0.report(b, c1)
}

// ---------------------------------------------------------------------------
// BenchmarkLatency: publish-to-handler-start latency at 200 events/s over 64 partitions
// owned by two idle instances. Goal: p50 <= 1ms, p99 <= 5ms.

func BenchmarkLatency(b *testing.B) {
	onTargets(b, benchLatency)
}

func benchLatency(b *testing.B, t *benchTarget) {
	const rate = 200
	window := time.Duration(envInt("SEQCTL_BENCH_WINDOW", 10)) * time.Second
	// SEQCTL_BENCH_LATENCY_KEYS: to see how the cost per event grows with the partitions
	// an instance owns.
	keys := envInt("SEQCTL_BENCH_LATENCY_KEYS", 64)
	n := int(rate * window.Seconds())
	pubc := t.tg.client(b)
	broker := NewRedisBroker(pubc)

	var (
		sent    sync.Map // event id -> time.Time just before the publish call
		mu      sync.Mutex
		lats    []time.Duration
		slow    []string // "key@publish offset=latency" of events slower than 5ms
		handled atomic.Int64
	)
	var pubStart time.Time // set before the first measured publish; guarded by mu
	d := testDomain(b, func(_ context.Context, ev Event) error {
		now := time.Now()
		if v, ok := sent.LoadAndDelete(ev.ID); ok {
			t := v.(time.Time)
			lat := now.Sub(t)
			mu.Lock()
			lats = append(lats, lat)
			if lat > 5*time.Millisecond {
				slow = append(slow, fmt.Sprintf("%s@+%.3fs=%.1fms", ev.Key, t.Sub(pubStart).Seconds(), float64(lat)/1e6))
			}
			mu.Unlock()
		}
		handled.Add(1)
		return nil
	}, nil)
	// The partitions exist before the measurement (one event each, handled), as the
	// peers' streams and leases exist before theirs.
	publishAll(b, t.admin, d, keys, keys, 0)
	var rt atomic.Int64
	started := time.Now()
	e1 := benchEngine(b, t, d, "bench-a", &rt)
	e2 := benchEngine(b, t, d, "bench-b", &rt)
	settled := settle(b, started, 90*time.Second, handled.Load, int64(keys), keys, e1, e2)
	// Idle first; on Redis Cluster until the leases went dormant, so the events measure
	// the wake-up of dormant partitions: the steady state of 10,000 partitions at 200 ev/s,
	// where a partition sees an event every 50 s.
	idle := 2 * time.Second
	if t.cluster() {
		idle = t.idleWarmup()
	}
	time.Sleep(idle)

	ctx := context.Background()
	stop := startProfile(b)
	s0 := snapRedis(b, t)
	c0 := readCPU(s0)
	t0 := time.Now()
	lw := watchLeases(t, keys, t0, true)
	mu.Lock()
	pubStart = t0
	mu.Unlock()
	interval := time.Second / rate
	for i := 0; i < n; i++ {
		if w := time.Until(t0.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		id := NewEventID()
		data := benchPayload(i%keys, 1+i/keys)
		sent.Store(id, time.Now())
		if _, err := broker.Publish(ctx, d, "OrderPlaced", data, PublishOptions{ID: id}); err != nil {
			b.Fatalf("publish %d: %v", i, err)
		}
	}
	if !waitUntil(10*time.Second, func() bool { return handled.Load() >= int64(keys+n) }) {
		b.Logf("NOT ALL HANDLED 10s after publishing ended: %d of %d", handled.Load()-int64(keys), n)
	}
	s1 := snapRedis(b, t)
	c1 := readCPU(s1)
	stop()
	moves := lw.finish(b)
	b.Logf("owned per instance after the window: %v", ownedBy(e1, e2))

	mu.Lock()
	v := append([]time.Duration(nil), lats...)
	mu.Unlock()
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	pct := func(p float64) float64 {
		if len(v) == 0 {
			return math.NaN()
		}
		i := max(int(math.Ceil(p*float64(len(v))))-1, 0)
		return float64(v[i]) / 1e6
	}
	bd, total := callsBetween(s0, s1)
	b.Logf("%d of %d events measured; redis calls per event (publisher included): %s", len(v), n, breakdown(bd, float64(len(v)), "calls/ev"))
	b.Logf("redis time per event: %s", breakdown(usecBetween(s0, s1), float64(max(len(v), 1)), "µs/ev; a script's time includes its calls"))
	logWatchCost(b, s0, s1)
	mu.Lock()
	if len(slow) > 0 {
		b.Logf("%d events slower than 5ms (key@publish offset=latency): %s", len(slow), strings.Join(slow[:min(len(slow), 40)], " "))
	}
	mu.Unlock()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.90), "p90_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(pct(1), "max_ms")
	b.ReportMetric(float64(moves), "lease_moves")
	b.ReportMetric(settled, "settle_s")
	b.ReportMetric(float64(total)/float64(max(len(v), 1)), "cmd/ev")
	c0.report(b, c1)
}

// ---------------------------------------------------------------------------
// BenchmarkThroughput: a backlog published while no engine runs, then drained by two
// instances (four on a cluster; see benchInstances); events/s from the first handler
// start to the last handler end. rcpu_us/ev is the Redis CPU time (summed over the
// masters) from the engines' start to the last event, per event; ccpu_us/ev this
// process's (the engines, the handlers and the harness's bookkeeping) over the same
// window.
// Goals: noop >= 60,000 ev/s; handler100us >= 40,000 ev/s; onepartition >= 15,000 ev/s;
// on a cluster, rcpu_us/ev at most 1.2 times one node's.

func BenchmarkThroughput(b *testing.B) {
	b.Run("noop", func(b *testing.B) {
		onTargets(b, func(b *testing.B, t *benchTarget) { benchThroughput(b, t, 200_000, 64, 0) })
	})
	b.Run("handler100us", func(b *testing.B) {
		onTargets(b, func(b *testing.B, t *benchTarget) { benchThroughput(b, t, 200_000, 64, 100*time.Microsecond) })
	})
	b.Run("onepartition", func(b *testing.B) {
		onTargets(b, func(b *testing.B, t *benchTarget) { benchThroughput(b, t, 100_000, 1, 0) })
	})
}

// tpTracker checks what the handlers saw: each event once, per-key order by sequence
// number and by stream entry id, no two events of one key in a handler at once.
type tpTracker struct {
	n, keys int
	work    time.Duration
	base    time.Time

	counts    []atomic.Uint32
	keyMu     []sync.Mutex
	lastSeq   []int
	lastEntry []string
	inflight  []atomic.Int32

	unique, dups, inversions, overlaps, bad atomic.Int64
	first, last, handlerNs, calls           atomic.Int64
}

func newTPTracker(n, keys int, work time.Duration) *tpTracker {
	t := &tpTracker{
		n: n, keys: keys, work: work, base: time.Now(),
		counts: make([]atomic.Uint32, n), keyMu: make([]sync.Mutex, keys),
		lastSeq: make([]int, keys), lastEntry: make([]string, keys), inflight: make([]atomic.Int32, keys),
	}
	for i := range t.lastSeq {
		t.lastSeq[i] = -1
	}
	return t
}

// streamIDLess compares stream entry ids "ms-seq".
func streamIDLess(a, z string) bool {
	am, as, _ := strings.Cut(a, "-")
	zm, zs, _ := strings.Cut(z, "-")
	ami, _ := strconv.ParseUint(am, 10, 64)
	zmi, _ := strconv.ParseUint(zm, 10, 64)
	if ami != zmi {
		return ami < zmi
	}
	asi, _ := strconv.ParseUint(as, 10, 64)
	zsi, _ := strconv.ParseUint(zs, 10, 64)
	return asi < zsi
}

func (t *tpTracker) handle(ctx context.Context, ev Event) error {
	start := int64(time.Since(t.base))
	t.first.CompareAndSwap(0, start)
	k, seq := keyIndex(ev.Key), payloadSeq(ev.Data)
	i := seq*t.keys + k
	if k < 0 || k >= t.keys || seq < 0 || i >= t.n {
		t.bad.Add(1)
		return nil
	}
	if t.inflight[k].Add(1) != 1 {
		t.overlaps.Add(1)
	}
	c := t.counts[i].Add(1)
	if c == 1 {
		d, _ := DeliveryFrom(ctx)
		t.keyMu[k].Lock()
		if seq < t.lastSeq[k] {
			t.inversions.Add(1)
		} else {
			t.lastSeq[k] = seq
		}
		if d.EntryID != "" {
			if t.lastEntry[k] != "" && !streamIDLess(t.lastEntry[k], d.EntryID) {
				t.inversions.Add(1)
			} else {
				t.lastEntry[k] = d.EntryID
			}
		}
		t.keyMu[k].Unlock()
	}
	if t.work > 0 {
		spinWait(t.work)
	}
	t.inflight[k].Add(-1)
	end := int64(time.Since(t.base))
	t.handlerNs.Add(end - start)
	t.calls.Add(1)
	for {
		old := t.last.Load()
		if end <= old || t.last.CompareAndSwap(old, end) {
			break
		}
	}
	if c == 1 {
		t.unique.Add(1)
	} else {
		t.dups.Add(1)
	}
	return nil
}

// tpRun is one measured drain of a backlog: its events, published for the handler of a
// tpTracker, and the measurement, begun once they are published.
type tpRun struct {
	t    *tpTracker
	d    *Domain
	rt   atomic.Int64 // the engines' Redis round trips
	stop func()       // ends the CPU profile
	s0   redisSnap
	c0   cpuWindow
}

// startTPRun publishes n events over keys (not measured) for handlers that work work
// each, then resets Redis's statistics and begins the measurement.
func startTPRun(b *testing.B, tgt *benchTarget, n, keys int, work time.Duration) *tpRun {
	r := &tpRun{t: newTPTracker(n, keys, work)}
	r.d = testDomain(b, r.t.handle, nil)
	pubRate := publishAll(b, tgt.admin, r.d, n, keys, 0)
	b.Logf("published %d events over %d keys at %.0f ev/s (publishing is not measured)", n, keys, pubRate)
	tgt.resetStats(b)
	r.stop = startProfile(b)
	r.s0 = snapRedis(b, tgt)
	r.c0 = readCPU(r.s0)
	return r
}

// finish waits up to 120 s for every event to be handled, then ends the measurement.
func (r *tpRun) finish(b *testing.B, tgt *benchTarget) (s1 redisSnap, c1 cpuWindow) {
	if !waitUntil(120*time.Second, func() bool { return r.t.unique.Load() >= int64(r.t.n) }) {
		b.Logf("TIME LIMIT: handled %d of %d in 120s", r.t.unique.Load(), r.t.n)
	}
	s1 = snapRedis(b, tgt)
	c1 = readCPU(s1)
	r.stop()
	return s1, c1
}

// report logs Redis's calls and time per handled event, and reports what every drain
// measures: events lost, run twice or out of order; Redis commands, round trips and
// Redis CPU per event; CPU use.
func (r *tpRun) report(b *testing.B, s1 redisSnap, c1 cpuWindow, handled int64) {
	per := float64(max(handled, 1))
	bd, total := callsBetween(r.s0, s1)
	b.Logf("redis calls per event: %s", breakdown(bd, per, "calls/ev"))
	b.Logf("redis time per event: %s", breakdown(usecBetween(r.s0, s1), per, "µs/ev; a script's time includes its calls"))
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(int64(r.t.n)-handled), "loss")
	b.ReportMetric(float64(r.t.dups.Load()), "dups")
	b.ReportMetric(float64(r.t.inversions.Load()), "inversions")
	b.ReportMetric(float64(total)/per, "cmd/ev")
	b.ReportMetric(float64(r.rt.Load())/per, "rt/ev")
	b.ReportMetric(1e6*(c1.redis-r.c0.redis)/per, "rcpu_us/ev")
	b.ReportMetric(1e6*(c1.proc-r.c0.proc)/per, "ccpu_us/ev") // engines, handlers and harness
	r.c0.report(b, c1)
}

func benchThroughput(b *testing.B, tgt *benchTarget, n, keys int, work time.Duration) {
	n = envInt("SEQCTL_BENCH_EVENTS", n)
	r := startTPRun(b, tgt, n, keys, work)
	t := r.t
	lw := watchLeases(tgt, keys, r.c0.at, false)
	es := make([]*Engine, benchInstances(tgt))
	for i := range es {
		es[i] = benchEngine(b, tgt, r.d, "bench-"+string(rune('a'+i)), &r.rt)
	}
	s1, c1 := r.finish(b, tgt)
	moves := lw.finish(b)
	owned := ownedBy(es...)

	handled := t.unique.Load()
	first, last := t.first.Load(), t.last.Load()
	eps := 0.0
	if last > first {
		eps = float64(handled) / (float64(last-first) / 1e9)
	}
	win := c1.at.Sub(r.c0.at).Seconds()
	b.Logf("owned per instance: %v; drain window %.2fs of %.2fs since start", owned, float64(last-first)/1e9, win)
	logWatchCost(b, r.s0, s1)
	if inv := t.inversions.Load(); inv > 0 {
		b.Logf("ORDER BUG: %d per-key order inversions", inv)
	}
	if ov := t.overlaps.Load(); ov > 0 {
		b.Logf("ORDER BUG: %d times two events of one key were in a handler at once", ov)
	}
	if bad := t.bad.Load(); bad > 0 {
		b.Logf("%d events with an unexpected payload", bad)
	}
	r.report(b, s1, c1, handled)
	b.ReportMetric(eps, "ev/s")
	b.ReportMetric(float64(t.overlaps.Load()), "overlaps")
	if c := t.calls.Load(); c > 0 {
		b.ReportMetric(float64(t.handlerNs.Load())/float64(c)/1e3, "hdlr_us")
	}
	b.ReportMetric(float64(moves), "lease_moves")
}

// ---------------------------------------------------------------------------
// BenchmarkPausedIdleCost: Redis calls per second of 1,000 partitions paused by an
// operator, owned by two instances. Goal: no more than 1,000 idle ones
// (BenchmarkIdleCost with SEQCTL_BENCH_IDLE_PARTS=1000, run beside it).

func BenchmarkPausedIdleCost(b *testing.B) {
	onTargets(b, benchPausedIdleCost)
}

func benchPausedIdleCost(b *testing.B, t *benchTarget) {
	const parts = 1000
	ip := startIdlePair(b, t, parts, 3*time.Minute)
	broker := NewRedisBroker(t.admin)
	ctx := context.Background()
	for i := range parts {
		ref := HeadRef{Group: "Projector", Category: "order", Key: fmt.Sprintf("client-%d", i)}
		if _, _, err := broker.Pause(ctx, ref, PauseRecord{Reason: "bench", By: "bench"}, 0); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for ip.e1.Stats().Paused+ip.e2.Stats().Paused < parts {
		if time.Now().After(deadline) {
			b.Fatalf("paused %d+%d of %d partitions within a minute", ip.e1.Stats().Paused, ip.e2.Stats().Paused, parts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(t.idleWarmup())
	s0, rt0 := snapRedis(b, t), ip.rt.Load()
	time.Sleep(time.Duration(envInt("SEQCTL_BENCH_WINDOW", 10)) * time.Second)
	s1, rt1 := snapRedis(b, t), ip.rt.Load()
	win := s1.at.Sub(s0.at).Seconds()
	bd, total := callsBetween(s0, s1)
	mem := readMem()
	b.Logf("paused partitions %d+%d; redis calls/s by command over %.1fs: %s; %d goroutines (%d before the engines)",
		ip.e1.Stats().Paused, ip.e2.Stats().Paused, win, breakdown(bd, win, "calls/s"), mem.goroutines, ip.mem0.goroutines)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(total)/win, "calls/s")
	b.ReportMetric(float64(rt1-rt0)/win, "rt/s")
}
