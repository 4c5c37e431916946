package root

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/dev"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/outbox"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/publish"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/run"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
)

// The global --cluster flag reaches the commands' options (seqctl dev, which runs on
// one Redis, refuses it), and its help teaches the URL form.
func TestClusterFlag(t *testing.T) {
	const url = "redis://h:7000?addr=h:7001"
	f := cmdtest.NewFactory()
	var runOpts *run.Options
	if err := cmdtest.ParseOps(t, f, "", run.NewCmd(f, func(o *run.Options) error { runOpts = o; return nil }), "--cluster", "--redis-url", url); err != nil {
		t.Fatal(err)
	}
	if runOpts == nil || !runOpts.Redis.Cluster || runOpts.Redis.URL != url {
		t.Errorf("run options %+v, want --cluster and the URL", runOpts)
	}
	f = cmdtest.NewFactory()
	var pub *publish.Options
	if err := cmdtest.ParseOps(t, f, "", publish.NewCmd(f, func(o *publish.Options) error { pub = o; return nil }), "--cluster", "--event", "E", "--data", "{}"); err != nil {
		t.Fatal(err)
	}
	if pub == nil || !pub.Redis.Cluster {
		t.Errorf("publish options %+v, want --cluster", pub)
	}
	f = cmdtest.NewFactory()
	_ = cmdtest.ParseOps(t, f, "", outbox.NewCmdRelay(f), "--cluster", "--redis-url", url, "--config", "/nonexistent/domain.toml") // fails to load the config
	if got := f.Global.RedisFlags(); got != (redisconn.Flags{URL: url, Cluster: true}) {
		t.Errorf("relay: connection flags %+v", got)
	}
	f = cmdtest.NewFactory()
	err := cmdtest.ParseOps(t, f, "", dev.NewCmd(f, func(*dev.Options) error { return nil }), "--cluster")
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "drop --cluster") {
		t.Errorf("dev --cluster: %v (exit %d), want a usage error", err, cmdutil.ExitCode(err))
	}

	res := cmdtest.RunCLI(t, false, "partitions", "list", "--help")
	for _, w := range []string{"--cluster", "?addr=", "SEQCTL_REDIS_CLUSTER", `kind = "redis-cluster"`} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("partitions list --help does not mention %q:\n%s", w, res.Stdout)
		}
	}

	t.Setenv(redisconn.EnvRedisCluster, "maybe")
	res = cmdtest.RunCLI(t, false, "partitions", "list", "--redis-url", "redis://127.0.0.1:1")
	if res.Code != cmdutil.ExitUsage || !strings.Contains(res.Stderr, "$"+redisconn.EnvRedisCluster) {
		t.Errorf("bad %s: exit %d, stderr %q; want exit 2 naming the variable", redisconn.EnvRedisCluster, res.Code, res.Stderr)
	}
}

// TestClusterConnection connects to a real three-master Redis Cluster the way the
// commands do (--cluster, $SEQCTL_REDIS_CLUSTER, a kind = "redis-cluster" config): the
// client reaches every master, follows MOVED and ASK while a slot migrates, and a
// --cluster against one Redis says it is not a cluster.
func TestClusterConnection(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	t.Setenv(redisconn.EnvRedisCluster, "")
	c := redistest.StartCluster(t, 3)
	ctx := context.Background()
	getenv := func(string) string { return "" }

	t.Run("ConnectAdmin", func(t *testing.T) {
		cfg := cmdtest.WriteConfig(t, fmt.Sprintf("name = \"x\"\n[broker]\nkind = \"redis-cluster\"\nurl = %q\n", c.URL))
		for name, g := range map[string]struct {
			opts cmdutil.GlobalOptions
			env  map[string]string
		}{
			"--cluster":   {cmdutil.GlobalOptions{RedisURL: c.URL, RedisCluster: true}, nil},
			"environment": {cmdutil.GlobalOptions{}, map[string]string{"SEQCTL_REDIS_URL": c.URL, redisconn.EnvRedisCluster: "yes"}},
			"config":      {cmdutil.GlobalOptions{ConfigPath: cfg}, nil},
		} {
			_, _, closeAdm, err := cmdutil.ConnectAdmin(ctx, g.opts, func(k string) string { return g.env[k] }, io.Discard)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			closeAdm()
		}
	})

	t.Run("keys on every master, redirects followed", func(t *testing.T) {
		conn, err := redisconn.Resolve(redisconn.Flags{URL: c.URL, Cluster: true}, nil, getenv)
		if err != nil {
			t.Fatal(err)
		}
		conn.NoRetries()
		rdb := conn.NewClient()
		defer rdb.Close()
		if _, ok := rdb.(*redis.ClusterClient); !ok {
			t.Fatalf("newClient built a %T", rdb)
		}
		if err := conn.Ping(ctx, rdb); err != nil {
			t.Fatal(err)
		}
		perNode := map[int]string{}
		for i := 0; len(perNode) < len(c.Nodes) && i < 1000; i++ {
			k := fmt.Sprintf("key-%d", i)
			if n := c.NodeOf(t, k); perNode[n] == "" {
				perNode[n] = k
			}
		}
		for n, k := range perNode {
			if err := rdb.Set(ctx, k, n, 0).Err(); err != nil {
				t.Fatalf("SET %s (node %d): %v", k, n, err)
			}
		}
		for n, k := range perNode {
			direct := c.Nodes[n].Client(t)
			if v, err := direct.Get(ctx, k).Int(); err != nil || v != n {
				t.Errorf("%s on node %d itself = %d, %v", k, n, v, err)
			}
		}
		// Move the slot of one key: the client's slot map is now stale, and the GET
		// that follows is answered with MOVED, which the client follows. A client that
		// follows no redirection shows that the GET did get one.
		strict, err := redisconn.Resolve(redisconn.Flags{URL: c.URL, Cluster: true}, nil, getenv)
		if err != nil {
			t.Fatal(err)
		}
		strict.Cluster.MaxRedirects = -1
		srdb := strict.NewClient()
		defer srdb.Close()
		if err := strict.Ping(ctx, srdb); err != nil {
			t.Fatal(err)
		}
		k := perNode[0]
		c.MoveSlot(t, redistest.Slot(k), 0, 1)
		if err := srdb.Get(ctx, k).Err(); err == nil || !strings.Contains(err.Error(), "MOVED") {
			t.Fatalf("GET %s after its slot moved, without redirections: %v, want MOVED", k, err)
		}
		if v, err := rdb.Get(ctx, k).Int(); err != nil || v != 0 {
			t.Fatalf("GET %s after its slot moved = %d, %v", k, v, err)
		}
		if err := rdb.Incr(ctx, k).Err(); err != nil {
			t.Fatalf("INCR %s after its slot moved: %v", k, err)
		}
	})

	t.Run("one Redis is not a cluster", func(t *testing.T) {
		srv := redistest.Start(t)
		_, _, _, err := cmdutil.ConnectAdmin(ctx, cmdutil.GlobalOptions{RedisURL: srv.URL, RedisCluster: true}, getenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "Redis at "+srv.URL+" is not a Redis Cluster") || !strings.Contains(err.Error(), "drop --cluster") {
			t.Fatalf("err = %v, want one saying the server is not a cluster and to drop --cluster", err)
		}
		cfg := cmdtest.WriteConfig(t, fmt.Sprintf("name = \"x\"\n[broker]\nkind = \"redis-cluster\"\nurl = %q\n", strings.TrimSuffix(srv.URL, "/0")))
		res := cmdtest.RunCLI(t, false, "partitions", "list", "--config", cfg)
		if res.Code != cmdutil.ExitFailure || !strings.Contains(res.Stderr, "is not a Redis Cluster") || !strings.Contains(res.Stderr, `set [broker] kind = "redis" in `+cfg) {
			t.Errorf("partitions list with a redis-cluster config against one Redis: exit %d\n%s", res.Code, res.Stderr)
		}
	})
}

// TestConnectAdmin connects for real: the password comes from SEQCTL_REDIS_PASSWORD, a
// wrong one or an unreachable server is an error that names the (masked) URL.
func TestConnectAdmin(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if err := rdb.ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"}
	adm, _, closeAdm, err := cmdutil.ConnectAdmin(context.Background(), cmdutil.GlobalOptions{RedisURL: srv.URL}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ListPartitions(context.Background(), admin.Filter{}); err != nil {
		t.Errorf("list over an authenticated connection: %v", err)
	}
	closeAdm()

	_, _, _, err = cmdutil.ConnectAdmin(context.Background(), cmdutil.GlobalOptions{RedisURL: strings.Replace(srv.URL, "redis://", "redis://:wrong@", 1)}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis at redis://:xxxxx@") {
		t.Errorf("wrong password: err = %v, want a masked URL", err)
	}

	path := cmdtest.WriteConfig(t, "name = \"x\"\n[broker]\nkind = \"kafka\"\n")
	_, _, _, err = cmdutil.ConnectAdmin(context.Background(), cmdutil.GlobalOptions{ConfigPath: path, RedisURL: srv.URL}, func(k string) string { return env[k] }, io.Discard)
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("invalid config: err = %v, want exit 2", err)
	}
}
