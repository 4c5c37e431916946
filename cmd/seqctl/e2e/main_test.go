// Package e2e runs the seqctl binary as real processes against a private redis-server:
// 'seqctl run' instances delivering to exec and HTTP handlers, killed and stopped for
// real, and 'seqctl publish' feeding them. The binary is built once, in TestMain.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// seqctlBin is the binary under test, built by TestMain.
var seqctlBin string

// fixtures is the directory of the domain files and the exec handler script.
var fixtures = filepath.Join("..", "internal", "run", "testdata", "run")

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "seqctl-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	seqctlBin = filepath.Join(dir, "seqctl")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", seqctlBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command(goBin, append(args, "github.com/seqctl/seqctl/cmd/seqctl")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building seqctl:", err)
		return 1
	}
	return m.Run()
}

// fixture is one test's world: a redis-server, a scratch directory and a domain.toml.
type fixture struct {
	t      *testing.T
	srv    *redistest.Server  // one node; nil on a cluster
	cl     *redistest.Cluster // a Redis Cluster; nil on one node
	url    string             // the --redis-url of every command
	rdb    redis.UniversalClient
	dir    string
	config string
	// global are arguments every seqctl command gets after --config and --redis-url
	// (TLS flags, say); publishURL, when set, is the --redis-url of publish.
	global     []string
	publishURL string
}

// newFixture starts Redis and writes the domain file named by fixtureFile into the
// scratch directory, replacing each "@NAME@" by its value.
func newFixture(t *testing.T, fixtureFile string, subst map[string]string) *fixture {
	t.Helper()
	return newFixtureWith(t, fixtureFile, subst, redistest.Options{})
}

// newFixtureWith is newFixture with a redis-server started with options (AOF, say).
func newFixtureWith(t *testing.T, fixtureFile string, subst map[string]string, o redistest.Options) *fixture {
	t.Helper()
	srv := redistest.StartWith(t, o)
	f := &fixture{t: t, srv: srv, url: srv.URL, rdb: srv.Client(t), dir: t.TempDir()}
	f.writeConfig(fixtureFile, subst)
	return f
}

// newClusterFixture is newFixture on a 3-master Redis Cluster: every command gets
// --cluster and the cluster's URL.
func newClusterFixture(t *testing.T, fixtureFile string, subst map[string]string) *fixture {
	t.Helper()
	c := redistest.StartCluster(t, 3)
	f := &fixture{t: t, cl: c, url: c.URL, rdb: c.Client(t), dir: t.TempDir(), global: []string{"--cluster"}}
	f.writeConfig(fixtureFile, subst)
	return f
}

// writeConfig writes the domain file named by fixtureFile into the scratch directory,
// replacing each "@NAME@" by its value.
func (f *fixture) writeConfig(fixtureFile string, subst map[string]string) {
	t := f.t
	b, err := os.ReadFile(filepath.Join(fixtures, fixtureFile))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for k, v := range subst {
		s = strings.ReplaceAll(s, "@"+k+"@", v)
	}
	f.config = filepath.Join(f.dir, "domain.toml")
	if err := os.WriteFile(f.config, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.dir, "locks"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// proc is one seqctl process.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  string // file holding stderr
	done chan struct{}
	code int // valid after done
}

// start runs seqctl with args (after --config and --redis-url), stderr to a log file.
func (f *fixture) start(name string, env []string, args ...string) *proc {
	f.t.Helper()
	p := &proc{t: f.t, name: name, log: filepath.Join(f.dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		f.t.Fatal(err)
	}
	argv := append(append([]string{"--config", f.config, "--redis-url", f.url}, f.global...), args...)
	p.cmd = exec.Command(seqctlBin, argv...)
	p.cmd.Env = append(append(os.Environ(), "SEQTEST_DIR="+f.dir, config.EnvRedisURL+"="), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		logf.Close()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	f.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if f.t.Failed() {
			b, _ := os.ReadFile(p.log)
			f.t.Logf("--- %s log (exit %d):\n%s", p.name, p.code, tail(b, 6000))
		}
	})
	return p
}

// run starts 'seqctl run' as instance name.
func (f *fixture) run(name string, env []string, extra ...string) *proc {
	f.t.Helper()
	args := append([]string{"run", "--instance-id", name, "--log-format", "json", "--shutdown-timeout", "5s"}, extra...)
	return f.start(name, env, args...)
}

// runTwo starts 'seqctl run' as the instances a and b, both with env and extra (and each
// with SEQTEST_INSTANCE set to its name, for handlers that record who ran them), and waits
// until both are ready.
func (f *fixture) runTwo(env []string, extra ...string) (a, b *proc) {
	f.t.Helper()
	a = f.run("a", append(slices.Clip(env), "SEQTEST_INSTANCE=a"), extra...)
	b = f.run("b", append(slices.Clip(env), "SEQTEST_INSTANCE=b"), extra...)
	a.waitReady(10 * time.Second)
	b.waitReady(10 * time.Second)
	return a, b
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// logText returns what the process logged so far.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// stop sends sig and fails the test unless the process exits 0 within timeout.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) {
	p.t.Helper()
	p.signal(sig)
	if code := p.wait(timeout); code != 0 {
		p.t.Errorf("%s exited %d after %v, want 0", p.name, code, sig)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %v", p.name, timeout)
		return -1
	}
}

// waitLog waits for a log line containing substr.
func (p *proc) waitLog(substr string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(p.log)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if strings.Contains(sc.Text(), substr) {
				return sc.Text()
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no log line with %q within %v", p.name, substr, timeout)
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited (code %d) before logging %q", p.name, p.code, substr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady waits until 'seqctl run' logs that it is ready.
func (p *proc) waitReady(timeout time.Duration) {
	p.t.Helper()
	p.waitLog("seqctl run: ready", timeout)
}

// publish runs 'seqctl publish --event Step --data @FILE' with one payload line per step
// and fails the test unless it exits 0.
func (f *fixture) publish(steps []step) {
	f.t.Helper()
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, `{"key":%q,"seq":%d}`+"\n", s.key, s.seq)
	}
	file := filepath.Join(f.dir, fmt.Sprintf("steps-%d.jsonl", time.Now().UnixNano()))
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		f.t.Fatal(err)
	}
	url := f.url
	if f.publishURL != "" {
		url = f.publishURL
	}
	out, err := exec.Command(seqctlBin, append(append([]string{"publish", "--config", f.config, "--redis-url", url}, f.global...),
		"--event", "Step", "--data", "@"+file)...).CombinedOutput()
	if err != nil {
		f.t.Fatalf("seqctl publish: %v\n%s", err, tail(out, 2000))
	}
}

// step is one published event.
type step struct {
	key string
	seq int
}

// steps returns keys × seqs events in publish order: seq-major, so every key advances
// together.
func steps(keys []string, from, to int) []step {
	var out []step
	for s := from; s <= to; s++ {
		for _, k := range keys {
			out = append(out, step{k, s})
		}
	}
	return out
}

func keyNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// completeLines returns the lines of a file that handlers append to while the test reads
// it: a last line without its newline is still being written and is left out. A file
// not written yet has none.
func completeLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		return nil
	}
	return strings.Split(string(b[:i]), "\n")
}

// firstOccurrences reduces each key's log to the first occurrence of every seq (an event
// redelivered after a failover may appear twice).
func firstOccurrences(log map[string][]int) map[string][]int {
	out := map[string][]int{}
	for k, seqs := range log {
		seen := map[int]bool{}
		for _, s := range seqs {
			if !seen[s] {
				seen[s] = true
				out[k] = append(out[k], s)
			}
		}
	}
	return out
}

// checkOrder fails unless every key's first occurrences are exactly 1..n in order.
func checkOrder(t *testing.T, log map[string][]int, keys []string, n int) {
	t.Helper()
	first := firstOccurrences(log)
	for _, k := range keys {
		got := first[k]
		ok := len(got) == n
		for i := 0; ok && i < n; i++ {
			ok = got[i] == i+1
		}
		if !ok {
			t.Errorf("key %s: first occurrences %v, want 1..%d in order (full log %v)", k, got, n, log[k])
		}
	}
}

// complete reports whether every key has seen seqs 1..n.
func complete(log map[string][]int, keys []string, n int) bool {
	first := firstOccurrences(log)
	for _, k := range keys {
		if len(first[k]) < n {
			return false
		}
	}
	return true
}

// streamsOf returns the partition streams of the keys in category step.
func (f *fixture) streamsOf(keys []string) []string {
	streams := make([]string, len(keys))
	for i, k := range keys {
		streams[i] = keyspace.For(f.rdb).PartitionStream("step", k)
	}
	return streams
}

// leaseOwners returns, for each given partition stream, the instance id holding
// Stepper's lease ("" when free).
func (f *fixture) leaseOwners(streams []string) map[string]string {
	f.t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	for _, s := range streams {
		v, err := f.rdb.Get(ctx, keyspace.For(f.rdb).LeaseKey(s, "Stepper")).Result()
		if err != nil && err != redis.Nil {
			f.t.Fatal(err)
		}
		// The lease is "{instance}.{incarnation}:{generation}".
		if i := strings.LastIndexByte(v, ':'); i >= 0 {
			v = v[:i]
		}
		if i := strings.LastIndexByte(v, '.'); i >= 0 {
			v = v[:i]
		}
		out[s] = v
	}
	return out
}

// syncMap is a mutex-guarded value for handlers running on server goroutines.
type syncMap[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

func (s *syncMap[K, V]) update(k K, fn func(V) V) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[K]V{}
	}
	s.m[k] = fn(s.m[k])
}

func (s *syncMap[K, V]) snapshot() map[K]V {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[K]V, len(s.m))
	for k, v := range s.m {
		out[k] = v
	}
	return out
}
