package engine

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
)

// ---------------------------------------------------------------------------
// BenchmarkIdleProcs: 1,000 idle partitions (SEQCTL_BENCH_IDLE_PARTS to change), one event
// each, owned by two engine instances that each run as a process of their own (the test
// binary re-executed as BenchmarkIdleInstance), with the default timing and a no-op
// handler. After the shares settle and a warm-up: Redis calls per second over 10 s, and
// each process's resident set (VmRSS of /proc/<pid>/status) as it runs (rssMiB/inst, the
// larger of the two), then again once the process has run a GC and returned the freed
// memory to the OS (rssgcMiB/inst), and its Go heap in use. With
// SEQCTL_BENCH_HEAPPROFILE=/path/prefix each process writes a heap profile to
// /path/prefix-<instance>.pprof at that point.
// Goals: at most 20 calls/s in total, at most 100 MiB RSS per instance.

func BenchmarkIdleProcs(b *testing.B) {
	onTargets(b, benchIdleProcs)
}

func benchIdleProcs(b *testing.B, t *benchTarget) {
	parts := envInt("SEQCTL_BENCH_IDLE_PARTS", 1000)
	d := testDomain(b, func(context.Context, Event) error { return nil }, nil)
	publishAll(b, t.admin, d, parts, parts, 0)
	started := time.Now()
	ps := []*engineProc{startEngineProc(b, t, "bench-a"), startEngineProc(b, t, "bench-b")}
	owned := func() []int { return []int{int(ps[0].owned.Load()), int(ps[1].owned.Load())} }
	handled := func() int64 { return ps[0].handled.Load() + ps[1].handled.Load() }
	settled := settleOwned(b, started, 3*time.Minute, handled, int64(parts), parts, 2, owned)
	time.Sleep(t.idleWarmup()) // as in BenchmarkIdleCost

	s0 := snapRedis(b, t)
	c0 := readCPU(s0)
	time.Sleep(time.Duration(envInt("SEQCTL_BENCH_WINDOW", 10)) * time.Second)
	s1 := snapRedis(b, t)
	c1 := readCPU(s1)
	win := s1.at.Sub(s0.at).Seconds()
	bd, total := callsBetween(s0, s1)
	t.logDormant(b, parts)
	b.Logf("%d partitions, owned per process %v; redis calls/s by command over %.1fs: %s", parts, owned(), win, breakdown(bd, win, "calls/s"))
	b.Logf("redis time: %s", breakdown(usecBetween(s0, s1), win, "µs/s"))
	var maxRSS, maxGC, maxHeap float64
	for _, p := range ps {
		rss, hwm := procRSS(p.cmd.Process.Pid)
		m := p.memory(b)
		gc, _ := procRSS(p.cmd.Process.Pid)
		b.Logf("%s (pid %d): VmRSS %.1f MiB (peak VmHWM %.1f MiB), %.1f MiB after a GC that returned freed memory; Go heap in use %.1f MiB, obtained from the OS %.1f MiB, %d goroutines",
			p.id, p.cmd.Process.Pid, mib(rss), mib(hwm), mib(gc), mib(m.heap), mib(m.sys), m.goroutines)
		maxRSS, maxGC, maxHeap = max(maxRSS, mib(rss)), max(maxGC, mib(gc)), max(maxHeap, mib(m.heap))
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(total)/win, "calls/s")
	b.ReportMetric(settled, "settle_s")
	b.ReportMetric(maxRSS, "rssMiB/inst")
	b.ReportMetric(maxGC, "rssgcMiB/inst")
	b.ReportMetric(maxHeap, "heapMiB/inst")
	c0.report(b, c1) // ccpu% is the harness alone here: the engines are other processes
	if handled() != int64(parts) {
		b.Logf("handled %d events, want %d", handled(), parts)
	}
}

// engineProc is an engine instance of BenchmarkIdleProcs in its own process. It reports
// its state on stdout: "stat <owned> <handled>" every 200 ms, and
// "mem <heap> <sys> <goroutines>" on SIGUSR1.
type engineProc struct {
	id      string
	cmd     *exec.Cmd
	stderr  *testkit.Buffer
	owned   atomic.Int64
	handled atomic.Int64
	mem     chan memUsage
}

// Environment of an engine process.
const (
	benchInstanceEnv        = "SEQCTL_BENCH_INSTANCE_URL"
	benchInstanceIDEnv      = "SEQCTL_BENCH_INSTANCE_ID"
	benchInstanceClusterEnv = "SEQCTL_BENCH_INSTANCE_CLUSTER"
)

// startEngineProc re-executes the test binary as BenchmarkIdleInstance on the target and
// waits until its engine has started. It is stopped (SIGTERM, then SIGKILL) at cleanup.
func startEngineProc(b *testing.B, t *benchTarget, id string) *engineProc {
	b.Helper()
	url, cluster := t.tg.urlForProc()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkIdleInstance$", "-test.benchtime=1x")
	cmd.Env = append(os.Environ(), benchInstanceEnv+"="+url, benchInstanceIDEnv+"="+id, benchInstanceClusterEnv+"="+cluster)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	p := &engineProc{id: id, cmd: cmd, stderr: &testkit.Buffer{}, mem: make(chan memUsage, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	ready := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "ready":
				close(ready)
			case len(f) == 3 && f[0] == "stat":
				o, _ := strconv.ParseInt(f[1], 10, 64)
				h, _ := strconv.ParseInt(f[2], 10, 64)
				p.owned.Store(o)
				p.handled.Store(h)
			case len(f) == 4 && f[0] == "mem":
				var m memUsage
				m.heap, _ = strconv.ParseInt(f[1], 10, 64)
				m.sys, _ = strconv.ParseInt(f[2], 10, 64)
				m.goroutines, _ = strconv.Atoi(f[3])
				select {
				case p.mem <- m:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case <-ready:
	case <-exited:
		b.Fatalf("engine process %s exited before it started; stderr:\n%s", id, p.stderr)
	case <-time.After(30 * time.Second):
		b.Fatalf("engine process %s did not start; stderr:\n%s", id, p.stderr)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return p
}

// memory asks the process for its Go memory figures (SIGUSR1).
func (p *engineProc) memory(b *testing.B) memUsage {
	b.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGUSR1)
	select {
	case m := <-p.mem:
		return m
	case <-time.After(5 * time.Second):
		b.Logf("%s did not report its memory", p.id)
		return memUsage{}
	}
}

// BenchmarkIdleInstance is an engine process of BenchmarkIdleProcs; on its own it skips.
func BenchmarkIdleInstance(b *testing.B) {
	url := os.Getenv(benchInstanceEnv)
	if url == "" {
		b.Skip("an engine process of BenchmarkIdleProcs: it runs only when started by it")
	}
	rdb, err := clientForURL(url, os.Getenv(benchInstanceClusterEnv))
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	var handled atomic.Int64
	d := testDomain(b, func(context.Context, Event) error { handled.Add(1); return nil }, nil)
	e, err := New(EngineConfig{
		Domain: d, Client: rdb, InstanceID: os.Getenv(benchInstanceIDEnv), ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	if err := e.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	fmt.Println("ready")
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-usr1:
			m := readMem()
			if prefix := os.Getenv("SEQCTL_BENCH_HEAPPROFILE"); prefix != "" {
				if f, err := os.Create(prefix + "-" + os.Getenv(benchInstanceIDEnv) + ".pprof"); err == nil {
					_ = pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
			fmt.Println("mem", m.heap, m.sys, m.goroutines)
		case <-tick.C:
			fmt.Println("stat", e.Stats().Owned, handled.Load())
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(sctx); err != nil {
		b.Log(err)
	}
	b.ReportMetric(0, "ns/op")
}

// memUsage is the memory of this process: the Go heap in use, everything the Go runtime
// holds from the OS, the resident set, and the goroutines.
type memUsage struct {
	heap, sys, rss int64 // bytes
	goroutines     int
}

// readMem reads this process's memory after a GC that also returns freed memory to the
// OS, so that the resident set is comparable between two readings.
func readMem() memUsage {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, _ := procRSS(os.Getpid())
	return memUsage{heap: int64(ms.HeapInuse), sys: int64(ms.Sys), rss: rss, goroutines: runtime.NumGoroutine()}
}

// procRSS reads VmRSS and VmHWM (the peak resident set) of a process, in bytes.
func procRSS(pid int) (rss, hwm int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		if name == "VmRSS" {
			rss = kb * 1024
		} else {
			hwm = kb * 1024
		}
	}
	return rss, hwm
}

// mib converts bytes to MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
