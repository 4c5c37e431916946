package redistest

import (
	"context"
	"fmt"
	"github.com/seqctl/seqctl/internal/hashslot"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of private redis-server processes on loopback, one master
// per node and no replicas, for tests that must run against a cluster. Each node is a
// Server, so a test can stop, pause or restart one of them.
type Cluster struct {
	Nodes []*Server
	// URL is the cluster in go-redis's cluster URL form:
	// redis://127.0.0.1:p1?addr=127.0.0.1:p2&addr=127.0.0.1:p3
	URL string

	tb testing.TB
}

// StartCluster starts n (at least 3) cluster-enabled redis-servers, joins them with
// `redis-cli --cluster create` (the slots split evenly, no replicas) and waits until
// every node reports cluster_state:ok. A cluster needs servers the test owns: with
// SEQCTL_TEST_REDIS_URL set, the test skips.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return StartClusterWith(tb, n, Options{})
}

// StartClusterWith is StartCluster with options for every node (Options.AOF: a node
// stopped and started again reloads its data and its cluster configuration, and rejoins).
func StartClusterWith(tb testing.TB, n int, o Options) *Cluster {
	tb.Helper()
	return startCluster(tb, n, 0, o)
}

// StartClusterReplicated starts a cluster of n masters with one replica each (2n nodes in
// Nodes), for failover tests: a master stopped for longer than the node timeout (2 s) is
// replaced by its replica. It returns once every replica is in sync with its master.
func StartClusterReplicated(tb testing.TB, n int, o Options) *Cluster {
	tb.Helper()
	return startCluster(tb, n, 1, o)
}

func startCluster(tb testing.TB, n, replicas int, o Options) *Cluster {
	tb.Helper()
	if n < 3 {
		tb.Fatalf("a Redis Cluster needs at least 3 masters, got %d", n)
	}
	cli, err := cliBinary()
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{tb: tb}
	var addrs []string
	for range n * (1 + replicas) {
		// The cluster bus port defaults to port+10000, which may be taken or out of
		// range for an ephemeral port: give each node a free one.
		no := o
		no.clusterBus = true
		no.Args = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-node-timeout", "2000", "--cluster-config-file", "nodes.conf",
		}, o.Args...)
		s := StartWith(tb, no) // skips with SEQCTL_TEST_REDIS_URL set: a cluster needs servers the test owns
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.URL = "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "?"
		if i > 0 {
			sep = "&"
		}
		c.URL += sep + "addr=" + a
	}
	c.waitOK()
	if replicas > 0 {
		c.waitReplicas()
	}
	return c
}

// waitReplicas waits until every replica's link to its master is up, at most 20 s.
func (c *Cluster) waitReplicas() {
	c.tb.Helper()
	c.waitEach("in sync", func(cl *redis.Client) (string, error) {
		info, err := cl.Info(context.Background(), "replication").Result()
		if err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
			return "", nil
		}
		return info, err
	})
}

// WaitFailover waits until a node other than old serves key's slot as a master and
// that node sees the cluster as ok (at most 20 s): the replica of a stopped master took
// over. It asks only the nodes that answer.
func (c *Cluster) WaitFailover(tb testing.TB, key string, old *Server) *Server {
	tb.Helper()
	slot := Slot(key)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.Nodes {
			if s == old {
				continue
			}
			cl := redis.NewClient(&redis.Options{Addr: s.Addr})
			slots, err := cl.ClusterSlots(context.Background()).Result()
			info, _ := cl.ClusterInfo(context.Background()).Result()
			cl.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				continue
			}
			for _, r := range slots {
				if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 && r.Nodes[0].Addr == s.Addr {
					return s
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("no replica took over slot %d of %q within 20s", slot, key)
	return nil
}

// cliBinary finds redis-cli next to the redis-server in use, or on PATH.
func cliBinary() (string, error) {
	if srv, err := Binary(); err == nil {
		p := filepath.Join(filepath.Dir(srv), "redis-cli")
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", fmt.Errorf("redis-cli not found on PATH (it comes with redis-server: Debian: apt-get install redis-server)")
	}
	return p, nil
}

// waitOK waits until every node sees the whole cluster as ok (slots assigned, gossip
// converged), at most 20 s.
func (c *Cluster) waitOK() {
	c.tb.Helper()
	c.waitEach("ok", func(cl *redis.Client) (string, error) {
		info, err := cl.ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))) {
			return "", nil
		}
		return info, err
	})
}

// waitEach polls every node until check reports it ready (an empty state and no error),
// all within 20 s; otherwise the test fails with the node's last state, named by what.
func (c *Cluster) waitEach(what string, check func(cl *redis.Client) (state string, err error)) {
	c.tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr})
		for {
			state, err := check(cl)
			if err == nil && state == "" {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				c.tb.Fatalf("cluster node %s not %s within 20s: %v\n%s", s.Addr, what, err, state)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
}

// Client returns a new cluster client, closed at cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	opt, err := redis.ParseClusterURL(c.URL)
	if err != nil {
		tb.Fatal(err)
	}
	cl := redis.NewClusterClient(opt)
	tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NodeOf returns the index in Nodes of the master serving key's slot.
func (c *Cluster) NodeOf(tb testing.TB, key string) int {
	tb.Helper()
	slot := Slot(key)
	for i, s := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr})
		addr, err := servedBy(cl, slot)
		cl.Close()
		if err != nil {
			tb.Fatalf("CLUSTER SLOTS on %s: %v", s.Addr, err)
		}
		if addr == s.Addr {
			return i
		}
	}
	tb.Fatalf("no node serves slot %d of %q", slot, key)
	return -1
}

// OnEachMaster returns n names, the i-th served by master i: key(j) gives the j-th
// candidate name and the Redis key whose slot decides (a partition stream, say). It tries
// the first 1,000 candidates.
func (c *Cluster) OnEachMaster(tb testing.TB, n int, key func(j int) (name, redisKey string)) []string {
	tb.Helper()
	out := make([]string, n)
	found := 0
	for j := 0; found < n && j < 1000; j++ {
		name, k := key(j)
		if node := c.NodeOf(tb, k); node < n && out[node] == "" {
			out[node] = name
			found++
		}
	}
	if found < n {
		tb.Fatalf("no name found on each of %d masters: %q", n, out)
	}
	return out
}

// MoveSlot migrates one slot, with its keys, from node from to node to while the
// cluster serves traffic (redis-cli --cluster reshard of a single slot is not
// addressable, so this drives CLUSTER SETSLOT / MIGRATE as redis-cli does). Clients see
// ASK and then MOVED redirections.
func (c *Cluster) MoveSlot(tb testing.TB, slot, from, to int) {
	tb.Helper()
	ctx := context.Background()
	src := redis.NewClient(&redis.Options{Addr: c.Nodes[from].Addr})
	dst := redis.NewClient(&redis.Options{Addr: c.Nodes[to].Addr})
	defer src.Close()
	defer dst.Close()
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("moving slot %d: %v", slot, err)
		}
	}
	// The destination takes the slot under a new config epoch only if it knows no higher
	// one (CLUSTER SETSLOT NODE bumps it "without consensus" from its own view): right
	// after another move, gossip may not have told it yet, and the source's older claim
	// would win the slot back. So every node must know every node's epoch first.
	c.waitEpochs()
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	host, port, _ := strings.Cut(c.Nodes[to].Addr, ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	// The destination first (it takes the slot with a new config epoch), then the source,
	// then the others: told in another order, the source and the destination can send
	// clients back and forth with MOVED until gossip settles.
	order := []int{to, from}
	for i := range c.Nodes {
		if i != to && i != from {
			order = append(order, i)
		}
	}
	for _, i := range order {
		n := redis.NewClient(&redis.Options{Addr: c.Nodes[i].Addr})
		err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		n.Close()
		must(err)
	}
	c.waitOK()
	c.waitEach(fmt.Sprintf("agreed that %s serves slot %d", c.Nodes[to].Addr, slot), func(cl *redis.Client) (string, error) {
		if addr, err := servedBy(cl, slot); err != nil || addr != c.Nodes[to].Addr {
			return "served by " + addr, err
		}
		return "", nil
	})
}

// servedBy returns the address of the master that node cl says serves slot ("" for
// none).
func servedBy(cl *redis.Client, slot int) (string, error) {
	slots, err := cl.ClusterSlots(context.Background()).Result()
	if err != nil {
		return "", err
	}
	for _, r := range slots {
		if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", nil
}

// waitEpochs waits until every node reports the config epochs the first node reports,
// at most 20 s (no move runs meanwhile, so agreeing with the first is agreeing).
func (c *Cluster) waitEpochs() {
	c.tb.Helper()
	first := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr})
	defer first.Close()
	c.waitEach("agreed on the config epochs", func(cl *redis.Client) (string, error) {
		want, err := first.ClusterNodes(context.Background()).Result()
		if err != nil {
			return "", err
		}
		got, err := cl.ClusterNodes(context.Background()).Result()
		if err != nil {
			return "", err
		}
		if configEpochs(got) != configEpochs(want) {
			return got, nil
		}
		return "", nil
	})
}

// configEpochs returns "id=epoch ..." of a CLUSTER NODES reply, sorted by id.
func configEpochs(nodes string) string {
	var out []string
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) >= 7 {
			out = append(out, f[0]+"="+f[6])
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// Slot is the Redis Cluster hash slot of key (hashslot.Of).
func Slot(key string) int { return hashslot.Of(key) }

// Reshard moves n slots from node from to node to with `redis-cli --cluster reshard`,
// as an operator would, while the cluster serves traffic. redis-cli takes the source's
// lowest-numbered slots (see LowestSlots).
func (c *Cluster) Reshard(tb testing.TB, from, to, n int) {
	tb.Helper()
	cli, err := cliBinary()
	if err != nil {
		tb.Fatal(err)
	}
	id := func(i int) string {
		cl := redis.NewClient(&redis.Options{Addr: c.Nodes[i].Addr})
		defer cl.Close()
		v, err := cl.ClusterMyID(context.Background()).Result()
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
	out, err := exec.Command(cli, "--cluster", "reshard", c.Nodes[from].Addr,
		"--cluster-from", id(from), "--cluster-to", id(to), "--cluster-slots", strconv.Itoa(n), "--cluster-yes").CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
	}
	c.waitOK()
}

// LowestSlots returns the n lowest-numbered slots node i serves: the ones Reshard moves
// first.
func (c *Cluster) LowestSlots(tb testing.TB, i, n int) []int {
	tb.Helper()
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[i].Addr})
	defer cl.Close()
	ranges, err := cl.ClusterSlots(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	var out []int
	for s := 0; s < 16384 && len(out) < n; s++ {
		for _, r := range ranges {
			if s >= r.Start && s <= r.End && len(r.Nodes) > 0 && r.Nodes[0].Addr == c.Nodes[i].Addr {
				out = append(out, s)
			}
		}
	}
	return out
}
