package engine

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
)

// The fault tests run engine instances as separate OS processes: the test binary itself,
// re-executed with helperEnv set, runs one engine with the sink handler until SIGTERM.
const helperEnv = "SEQCTL_TEST_HELPER"

func helperMain() int {
	url := os.Getenv("SEQCTL_HELPER_URL")
	id := os.Getenv("SEQCTL_HELPER_ID")
	ttl, _ := strconv.Atoi(os.Getenv("SEQCTL_HELPER_TTL_MS"))
	work, _ := strconv.Atoi(os.Getenv("SEQCTL_HELPER_WORK_MS"))
	rdb, err := clientForURL(url, os.Getenv("SEQCTL_HELPER_CLUSTER"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer rdb.Close()
	s := &sink{rdb: rdb, instance: id, work: time.Duration(work) * time.Millisecond, fenced: true}
	d := testDomain(nopTB{}, s.handle, nil)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e, err := New(EngineConfig{
		Domain: d, Client: rdb, InstanceID: id, Timing: fastTiming(time.Duration(ttl) * time.Millisecond),
		DiscoveryInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second, Logger: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := e.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// nopTB lets the helper process reuse testDomain outside a test.
type nopTB struct{ testing.TB }

// urlForProc returns what an engine process needs to reach the target: its URL, and "1"
// for a Redis Cluster ("0" for one node); clientForURL builds the client from them.
func (tg redisTarget) urlForProc() (url, cluster string) {
	if tg.cl != nil {
		return tg.cl.URL, "1"
	}
	return tg.srv.URL, "0"
}

// clientForURL returns a client of one node, or of a Redis Cluster when cluster is "1".
func clientForURL(url, cluster string) (redis.UniversalClient, error) {
	if cluster == "1" {
		opt, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, err
		}
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

func (nopTB) Helper()           {}
func (nopTB) Fatal(args ...any) { fmt.Fprintln(os.Stderr, args...); os.Exit(2) }
func (nopTB) Fatalf(f string, args ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", args...)
	os.Exit(2)
}

// proc is an engine instance running in its own process.
type proc struct {
	cmd    *exec.Cmd
	stderr *testkit.Buffer
	exited chan error
}

func startProc(tb testing.TB, url, id string, ttl time.Duration, work time.Duration) *proc {
	tb.Helper()
	return startProcOn(tb, redisTarget{srv: &redistest.Server{URL: url}}, id, ttl, work)
}

// startProcOn starts an engine process on a target (one node or a Redis Cluster).
func startProcOn(tb testing.TB, tg redisTarget, id string, ttl time.Duration, work time.Duration) *proc {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	url, cluster := tg.urlForProc()
	cmd.Env = append(os.Environ(), helperEnv+"=1", "SEQCTL_HELPER_CLUSTER="+cluster,
		"SEQCTL_HELPER_URL="+url, "SEQCTL_HELPER_ID="+id,
		"SEQCTL_HELPER_TTL_MS="+strconv.FormatInt(ttl.Milliseconds(), 10),
		"SEQCTL_HELPER_WORK_MS="+strconv.FormatInt(work.Milliseconds(), 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: &testkit.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		p.exited <- cmd.Wait()
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		tb.Fatalf("helper %s did not start; stderr:\n%s", id, p.stderr)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }
