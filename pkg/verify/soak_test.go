package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
)

// TestSoak runs the checkable workload on a 3-master Redis Cluster with a replica per
// master for SEQCTL_SOAK (a duration, e.g. 1h; the test does not run without it: it is a
// soak, not a unit test), with limit keys and batches on, while faults come at random
// from a seed (SEQCTL_SOAK_SEED, default the time; printed), about every
// SEQCTL_SOAK_EVERY (default 30s):
//
//   - an engine instance stopped abruptly and started again;
//   - one crashed (its connections closed before it stops: no acknowledgement flushed,
//     no lease released) and started again;
//   - one stalled for 20 to 30 s, past the lease TTL: every write of its connections is
//     held, its session renewals included, so its partitions move, and what it sends
//     when it wakes must be fenced;
//   - a master failed over to its replica (CLUSTER FAILOVER on the replica, which takes
//     every write of its master first, as an operator or a managed Redis does: a master
//     that crashes loses the writes it confirmed and had not passed on, which no client
//     can prevent on Redis Cluster, docs/concepts.md);
//   - slots resharded between masters while events flow;
//   - a master paused for a second (a stall below the node timeout).
//
// At the end every event must be applied, in order, never two runs of a key at once,
// re-runs within the bound, no stale generation, no limit cap exceeded. The report goes
// to the log and, as JSON, to SEQCTL_SOAK_REPORT when set.
//
//	SEQCTL_SOAK=1h go test -run TestSoak -timeout 90m -v ./pkg/verify/
func TestSoak(t *testing.T) {
	dur, seed, every := soakSettings(t)
	s := &soak{t: t, cl: redistest.StartClusterReplicated(t, 3, redistest.Options{}), counts: map[string]int{}, gates: map[string]*gate{},
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	const keys, rate = 200, 400
	o := Options{
		Client: s.cl.Client(t), NewClient: s.newClient,
		Keys: keys, Rate: rate, Events: int(dur.Seconds()) * rate / keys,
		Instances: 3, BatchMax: 8, Tenants: 10, TenantCap: 2,
		Timeout: 5 * time.Minute,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	ctls := make(chan *Control, 1)
	o.Faults = func(ctx context.Context, c *Control) {
		ctls <- c
		<-ctx.Done()
	}
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := Run(context.Background(), o)
		done <- outcome{res, err}
	}()

	// The faults, driven from the test goroutine (the cluster helpers fail the test).
	c := <-ctls
	s.start = time.Now()
	var out outcome
	for {
		wait := every*2/3 + time.Duration(s.rng.Int64N(int64(every)*2/3+1))
		select {
		case out = <-done:
			if out.err != nil {
				t.Fatal(out.err)
			}
			s.report(out.res.Report, dur, seed)
			return
		case <-time.After(wait):
		}
		if time.Since(s.start) <= dur { // after it, the publishing is over: let the run drain
			s.fault(c)
		}
	}
}

// soakSettings reads the soak's duration (the test is skipped without one), seed and
// mean time between faults from the environment.
func soakSettings(t *testing.T) (dur time.Duration, seed uint64, every time.Duration) {
	dur, err := time.ParseDuration(os.Getenv("SEQCTL_SOAK"))
	if err != nil || dur <= 0 {
		t.Skip("a soak: set SEQCTL_SOAK to a duration (1h) to run it")
	}
	seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("SEQCTL_SOAK_SEED"); v != "" {
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SEQCTL_SOAK_SEED: %v", err)
		}
	}
	every = 30 * time.Second
	if v := os.Getenv("SEQCTL_SOAK_EVERY"); v != "" {
		if every, err = time.ParseDuration(v); err != nil || every <= 0 {
			t.Fatalf("SEQCTL_SOAK_EVERY: %q is not a positive duration", v)
		}
	}
	t.Logf("seed %d (SEQCTL_SOAK_SEED=%d replays the same faults), a fault about every %v", seed, seed, every)
	return dur, seed, every
}

// soak is a soak's cluster, its faults and what they did.
type soak struct {
	t      *testing.T
	cl     *redistest.Cluster
	rng    *rand.Rand
	start  time.Time
	counts map[string]int // faults by kind

	gatesMu sync.Mutex
	gates   map[string]*gate // by instance client name; guarded by gatesMu
}

// gateOf returns the gate of the instance client named name.
func (s *soak) gateOf(name string) *gate {
	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	if s.gates[name] == nil {
		s.gates[name] = &gate{}
	}
	return s.gates[name]
}

// newClient is Options.NewClient: every connection an instance dials (its client's and
// its session's, which copies the client's options) goes through the gate of its name:
// a frozen gate holds every write to Redis, so the instance is stalled as Redis sees
// it, its renewals included.
func (s *soak) newClient(name string) redis.UniversalClient {
	opt, err := redis.ParseClusterURL(s.cl.URL)
	if err != nil {
		panic(err)
	}
	opt.ContextTimeoutEnabled, opt.ClientName = true, name
	g := s.gateOf(name)
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return gatedConn{Conn: c, g: g}, nil
	}
	return redis.NewClusterClient(opt)
}

func (s *soak) logf(format string, args ...any) {
	s.t.Helper()
	s.t.Logf("%v: "+format, append([]any{time.Since(s.start).Round(time.Second)}, args...)...)
}

// fault injects one fault, chosen at random.
func (s *soak) fault(c *Control) {
	t, cl, rng := s.t, s.cl, s.rng
	masters := mastersOf(t, cl)
	switch rng.IntN(6) {
	case 5:
		i := rng.IntN(c.Instances())
		g := s.gateOf(c.Name(i))
		d := 20*time.Second + time.Duration(rng.IntN(10))*time.Second
		s.logf("instance %d stalled for %v (every write to Redis held; the lease TTL is 15 s)", i, d)
		g.freeze()
		time.Sleep(d)
		g.thaw()
		s.counts["instance stalled past the lease TTL"]++
	case 4:
		s.bounce(c, "crashed (its connections closed first)", "instance crashed and started again", c.Crash)
	case 0:
		s.bounce(c, "stopped abruptly", "instance stopped and started again", c.Stop)
	case 1:
		i := masters[rng.IntN(len(masters))]
		j := replicaOf(t, cl, i)
		s.logf("failover of master %s to its replica %s (CLUSTER FAILOVER)", cl.Nodes[i].Addr, cl.Nodes[j].Addr)
		failover(t, cl, j)
		s.counts["master failed over"]++
	case 2:
		from := masters[rng.IntN(len(masters))]
		to := masters[(indexOf(masters, from)+1+rng.IntN(len(masters)-1))%len(masters)]
		n := 50 + rng.IntN(200)
		s.logf("resharding %d slots from %s to %s", n, cl.Nodes[from].Addr, cl.Nodes[to].Addr)
		cl.Reshard(t, from, to, n)
		s.counts["reshard"]++
	case 3:
		i := masters[rng.IntN(len(masters))]
		s.logf("master %s paused for 1 s", cl.Nodes[i].Addr)
		cl.Nodes[i].Pause()
		time.Sleep(time.Second)
		cl.Nodes[i].Resume()
		s.counts["master paused"]++
	}
}

// bounce stops a random instance with stop and starts it again 1 to 5 s later.
func (s *soak) bounce(c *Control, how, kind string, stop func(int)) {
	i := s.rng.IntN(c.Instances())
	s.logf("instance %d %s", i, how)
	stop(i)
	time.Sleep(time.Duration(1+s.rng.IntN(5)) * time.Second)
	if err := c.Start(i); err != nil {
		s.t.Fatalf("start instance %d again: %v", i, err)
	}
	s.counts[kind]++
}

// report logs the soak's figures, writes them to SEQCTL_SOAK_REPORT when set, and fails
// the test on any violation.
func (s *soak) report(r Report, dur time.Duration, seed uint64) {
	t := s.t
	t.Logf("faults: %v", s.counts)
	t.Logf("published %d over %d keys in %v; applied %d; runs %d, re-runs %d, failures %d; %.0f ev/s; first-run latency p50 %v, p99 %v, max %v",
		r.Published, r.Keys, dur, r.Applied, r.Runs, r.ReRuns, r.Failures, r.Throughput, r.P50, r.P99, r.Max)
	for _, k := range r.Kinds {
		t.Logf("%-16s %d %v", k.Kind, k.Count, k.First)
	}
	if p := os.Getenv("SEQCTL_SOAK_REPORT"); p != "" {
		b, _ := json.MarshalIndent(map[string]any{"seed": seed, "duration": dur.String(), "faults": s.counts, "report": r}, "", "  ")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Error(err)
		}
	}
	if !r.OK() || r.Applied != r.Published {
		t.Errorf("the soak found violations (seed %d): applied %d of %d", seed, r.Applied, r.Published)
	}
}

// gate holds the writes of an instance's connections while it is frozen.
type gate struct {
	mu     sync.Mutex
	frozen chan struct{} // closed at the thaw; nil when open; guarded by mu
}

func (g *gate) freeze() {
	g.mu.Lock()
	if g.frozen == nil {
		g.frozen = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) thaw() {
	g.mu.Lock()
	if g.frozen != nil {
		close(g.frozen)
		g.frozen = nil
	}
	g.mu.Unlock()
}

func (g *gate) wait() {
	g.mu.Lock()
	ch := g.frozen
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// gatedConn is a connection whose writes wait while its gate is frozen.
type gatedConn struct {
	net.Conn
	g *gate
}

func (c gatedConn) Write(b []byte) (int, error) {
	c.g.wait()
	return c.Conn.Write(b)
}

// mastersOf returns the indexes in cl.Nodes of the nodes that are masters now.
func mastersOf(t *testing.T, cl *redistest.Cluster) []int {
	t.Helper()
	var out []int
	for i, n := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := c.Info(context.Background(), "replication").Result()
		c.Close()
		if err == nil && strings.Contains(info, "role:master") {
			out = append(out, i)
		}
	}
	if len(out) < 2 {
		t.Fatalf("fewer than 2 masters: %v", out)
	}
	return out
}

// replicaOf returns the index in cl.Nodes of a replica of master i.
func replicaOf(t *testing.T, cl *redistest.Cluster, i int) int {
	t.Helper()
	port := fmt.Sprintf("master_port:%d", cl.Nodes[i].Port())
	for j, n := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := c.Info(context.Background(), "replication").Result()
		c.Close()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, port) {
			return j
		}
	}
	t.Fatalf("master %s has no replica", cl.Nodes[i].Addr)
	return -1
}

// failover promotes replica j with CLUSTER FAILOVER (it takes its master's writes
// first) and waits until it is a master and the cluster is ok.
func failover(t *testing.T, cl *redistest.Cluster, j int) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: cl.Nodes[j].Addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.ClusterFailover(ctx).Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", cl.Nodes[j].Addr, err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		info, _ := c.Info(ctx, "replication").Result()
		state, _ := c.ClusterInfo(ctx).Result()
		if strings.Contains(info, "role:master") && strings.Contains(state, "cluster_state:ok") {
			return
		}
	}
	t.Fatalf("%s did not become a master within 30 s", cl.Nodes[j].Addr)
}

func indexOf(xs []int, x int) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
