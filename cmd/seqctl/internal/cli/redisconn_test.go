package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

// Cluster mode is on when --cluster, $SEQCTL_REDIS_CLUSTER or the config's kind asks
// for it; the URL, password and TLS settings then resolve as for one node, into cluster
// options.
func TestResolveRedisCluster(t *testing.T) {
	tlsFiles := redistest.WriteTLSFiles(t, t.TempDir())
	cfgNode := &config.Config{File: "d.toml", Broker: config.BrokerConfig{Kind: engine.BrokerKindRedis, URL: "redis://cfg:7000?addr=cfg:7001"}}
	cfgCluster := &config.Config{File: "d.toml", Broker: config.BrokerConfig{Kind: engine.BrokerKindRedisCluster, URL: "redis://cfg:7000?addr=cfg:7001"}}
	type want struct {
		Cluster     bool
		From        []string
		Addrs       []string
		Username    string
		Password    string
		TLS         bool
		ServerName  string
		Where       string
		DialTimeout time.Duration
		ReadTimeout time.Duration
	}
	clusterWant := func(w want) want {
		w.Cluster, w.DialTimeout, w.ReadTimeout = true, 5*time.Second, 30*time.Second
		return w
	}
	tests := []struct {
		name    string
		flags   redisFlags
		env     map[string]string
		cfg     *config.Config
		want    want
		wantErr []string
	}{
		{name: "nothing asks: one node", flags: redisFlags{URL: "redis://h:7000/0"},
			want: want{Addrs: []string{"h:7000"}, Where: "Redis at redis://h:7000/0", DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}},
		{name: "a kind = redis config: one node", cfg: cfgNode, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:1/0"},
			want: want{Addrs: []string{"env:1"}, Where: "Redis at redis://env:1/0", DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}},
		{name: "--cluster", flags: redisFlags{URL: "redis://h:7000?addr=h:7001&addr=h:7002", Cluster: true},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"h:7000", "h:7001", "h:7002"}, Where: "Redis Cluster at redis://h:7000?addr=h:7001&addr=h:7002"})},
		{name: "the environment", flags: redisFlags{URL: "redis://h:7000"}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "1"},
			want: clusterWant(want{From: []string{"$SEQCTL_REDIS_CLUSTER"}, Addrs: []string{"h:7000"}, Where: "Redis Cluster at redis://h:7000"})},
		{name: "the environment says true", flags: redisFlags{URL: "redis://h:7000"}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "true"},
			want: clusterWant(want{From: []string{"$SEQCTL_REDIS_CLUSTER"}, Addrs: []string{"h:7000"}, Where: "Redis Cluster at redis://h:7000"})},
		{name: "the environment says YES", flags: redisFlags{URL: "redis://h:7000"}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "YES"},
			want: clusterWant(want{From: []string{"$SEQCTL_REDIS_CLUSTER"}, Addrs: []string{"h:7000"}, Where: "Redis Cluster at redis://h:7000"})},
		{name: "the config's kind, with its URL", cfg: cfgCluster,
			want: clusterWant(want{From: []string{"d.toml"}, Addrs: []string{"cfg:7000", "cfg:7001"}, Where: "Redis Cluster at redis://cfg:7000?addr=cfg:7001"})},
		{name: "all three", cfg: cfgCluster, flags: redisFlags{Cluster: true}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "1"},
			want: clusterWant(want{From: []string{"--cluster", "$SEQCTL_REDIS_CLUSTER", "d.toml"}, Addrs: []string{"cfg:7000", "cfg:7001"}, Where: "Redis Cluster at redis://cfg:7000?addr=cfg:7001"})},
		{name: "environment URL over the config's", cfg: cfgCluster, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:7000?addr=env:7001"},
			want: clusterWant(want{From: []string{"d.toml"}, Addrs: []string{"env:7000", "env:7001"}, Where: "Redis Cluster at redis://env:7000?addr=env:7001"})},
		{name: "--redis-url over everything", cfg: cfgCluster, flags: redisFlags{URL: "redis://flag:7000"}, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:7000"},
			want: clusterWant(want{From: []string{"d.toml"}, Addrs: []string{"flag:7000"}, Where: "Redis Cluster at redis://flag:7000"})},
		{name: "default URL", flags: redisFlags{Cluster: true},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"127.0.0.1:6379"}, Where: "Redis Cluster at " + DefaultRedisURL})},
		{name: "password from the environment", flags: redisFlags{URL: "redis://app@h:7000", Cluster: true}, env: map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"h:7000"}, Username: "app", Password: "s3cret", Where: "Redis Cluster at redis://app@h:7000"})},
		{name: "password in the URL wins", flags: redisFlags{URL: "redis://app:inurl@h:7000", Cluster: true}, env: map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"h:7000"}, Username: "app", Password: "inurl", Where: "Redis Cluster at redis://app:xxxxx@h:7000"})},
		{name: "rediss", flags: redisFlags{URL: "rediss://redis.internal:6380?addr=10.0.0.2:6380", Cluster: true},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"redis.internal:6380", "10.0.0.2:6380"}, TLS: true, ServerName: "redis.internal", Where: "Redis Cluster at rediss://redis.internal:6380?addr=10.0.0.2:6380"})},
		{name: "TLS settings from the flags", flags: redisFlags{URL: "redis://h:7000", Cluster: true, TLS: config.TLSConfig{CAFile: tlsFiles.CA, ServerName: "redis.internal"}},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"h:7000"}, TLS: true, ServerName: "redis.internal", Where: "Redis Cluster at redis://h:7000"})},

		{name: "bad environment value", flags: redisFlags{Cluster: true}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "on"},
			wantErr: []string{`invalid value "on" for $SEQCTL_REDIS_CLUSTER`, "1, true or yes"}},
		{name: "0 is not a value either", env: map[string]string{"SEQCTL_REDIS_CLUSTER": "0"},
			wantErr: []string{`invalid value "0" for $SEQCTL_REDIS_CLUSTER`}},
		{name: "bad scheme", flags: redisFlags{URL: "unix:///run/redis.sock", Cluster: true},
			wantErr: []string{"invalid Redis Cluster URL unix:///run/redis.sock (from --redis-url)", config.ClusterURLForm}},
		{name: "a database", flags: redisFlags{URL: "redis://:pw@h:7000/3", Cluster: true},
			wantErr: []string{"invalid Redis Cluster URL redis://:xxxxx@h:7000/3", "only database 0"}},
		{name: "bad addr from the config", cfg: &config.Config{File: "d.toml", Broker: config.BrokerConfig{Kind: engine.BrokerKindRedisCluster, URL: "redis://h:7000?addr=nope"}},
			wantErr: []string{"(from d.toml: broker.url)", "addr param: nope"}},
		{name: "bad TLS setting", flags: redisFlags{URL: "rediss://h:7000", Cluster: true, TLS: config.TLSConfig{MinVersion: "1.1"}},
			wantErr: []string{"--redis-tls-min-version"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := resolveRedis(tt.flags, tt.cfg, func(k string) string { return tt.env[k] })
			if tt.wantErr != nil {
				checkUsageError(t, err, tt.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{Cluster: conn.isCluster(), From: conn.clusterFrom, Addrs: conn.addrs(), Where: conn.where(), TLS: conn.tlsConfig() != nil}
			if tc := conn.tlsConfig(); tc != nil {
				got.ServerName = tc.ServerName
			}
			if conn.isCluster() {
				o := conn.cluster
				got.Username, got.Password, got.DialTimeout, got.ReadTimeout = o.Username, o.Password, o.DialTimeout, o.ReadTimeout
				if o.WriteTimeout != o.ReadTimeout {
					t.Errorf("write timeout %v, read timeout %v", o.WriteTimeout, o.ReadTimeout)
				}
			} else {
				o := conn.node
				got.Username, got.Password, got.DialTimeout, got.ReadTimeout = o.Username, o.Password, o.DialTimeout, o.ReadTimeout
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("connection (-want +got):\n%s", diff)
			}
			rdb := conn.newClient()
			defer rdb.Close()
			if _, isCluster := rdb.(*redis.ClusterClient); isCluster != tt.want.Cluster {
				t.Errorf("newClient built a %T", rdb)
			}
		})
	}
}

// The global --cluster flag reaches the commands' options (seqctl dev, which runs on
// one Redis, refuses it), and its help teaches the URL form.
func TestClusterFlag(t *testing.T) {
	const url = "redis://h:7000?addr=h:7001"
	f := testFactory()
	var run *RunOptions
	if err := parseOps(t, f, "", newCmdRun(f, func(o *RunOptions) error { run = o; return nil }), "--cluster", "--redis-url", url); err != nil {
		t.Fatal(err)
	}
	if run == nil || !run.Redis.Cluster || run.Redis.URL != url {
		t.Errorf("run options %+v, want --cluster and the URL", run)
	}
	f = testFactory()
	var pub *PublishOptions
	if err := parseOps(t, f, "", newCmdPublish(f, func(o *PublishOptions) error { pub = o; return nil }), "--cluster", "--event", "E", "--data", "{}"); err != nil {
		t.Fatal(err)
	}
	if pub == nil || !pub.Redis.Cluster {
		t.Errorf("publish options %+v, want --cluster", pub)
	}
	f = testFactory()
	_ = parseOps(t, f, "", newCmdRelay(f), "--cluster", "--redis-url", url, "--config", "/nonexistent/domain.toml") // fails to load the config
	if got := f.Global.redisFlags(); got != (redisFlags{URL: url, Cluster: true}) {
		t.Errorf("relay: connection flags %+v", got)
	}
	f = testFactory()
	err := parseOps(t, f, "", newCmdDev(f, func(*DevOptions) error { return nil }), "--cluster")
	if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "drop --cluster") {
		t.Errorf("dev --cluster: %v (exit %d), want a usage error", err, ExitCode(err))
	}

	res := runCLI(t, false, "partitions", "list", "--help")
	for _, w := range []string{"--cluster", "?addr=", "SEQCTL_REDIS_CLUSTER", `kind = "redis-cluster"`} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("partitions list --help does not mention %q:\n%s", w, res.Stdout)
		}
	}

	t.Setenv(EnvRedisCluster, "maybe")
	res = runCLI(t, false, "partitions", "list", "--redis-url", "redis://127.0.0.1:1")
	if res.Code != ExitUsage || !strings.Contains(res.Stderr, "$"+EnvRedisCluster) {
		t.Errorf("bad %s: exit %d, stderr %q; want exit 2 naming the variable", EnvRedisCluster, res.Code, res.Stderr)
	}
}

// The operator commands never have go-redis resend a request: one node gets
// MaxRetries = -1; a cluster client keeps following redirects (MaxRedirects at its
// default) while its node clients neither retry nor let a network failure be resent.
func TestRedisConnNoRetries(t *testing.T) {
	node, err := resolveRedis(redisFlags{URL: "redis://h:1/0"}, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	node.noRetries()
	if node.node.MaxRetries != -1 {
		t.Errorf("node MaxRetries = %d, want -1", node.node.MaxRetries)
	}

	cluster, err := resolveRedis(redisFlags{URL: "redis://h:1", Cluster: true}, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cluster.noRetries()
	rdb := cluster.newClient()
	defer rdb.Close()
	opt := rdb.(*redis.ClusterClient).Options()
	if opt.MaxRetries != -1 || opt.MaxRedirects < 1 || !cluster.finalNetErrors {
		t.Errorf("cluster MaxRetries %d, MaxRedirects %d, final network errors %v; want -1, at least 1, true", opt.MaxRetries, opt.MaxRedirects, cluster.finalNetErrors)
	}
}

func TestFinalNetError(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	tests := []struct {
		name  string
		err   error
		final bool
	}{
		{"nil", nil, false},
		{"closed after the request", io.EOF, true},
		{"closed mid-reply", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{"read timeout", timeout, true},
		{"reset", reset, true},
		{"dial: nothing was sent", dial, false},
		{"a redirection", redis.Nil, false},
		{"a Redis reply", errors.New("MOVED 3999 127.0.0.1:7001"), false},
		{"cancelled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := finalNetError(tt.err)
			var sent sentRequestError
			if errors.As(got, &sent) != tt.final {
				t.Fatalf("finalNetError(%v) = %T %v, final %v", tt.err, got, got, !tt.final)
			}
			if !tt.final {
				if got != tt.err {
					t.Errorf("finalNetError(%v) changed it to %v", tt.err, got)
				}
				return
			}
			var ne net.Error
			if got.Error() != tt.err.Error() || errors.Is(got, io.EOF) || errors.Is(got, io.ErrUnexpectedEOF) || errors.As(got, &ne) {
				t.Errorf("final error %q still looks retryable to go-redis, or lost its text %q", got, tt.err)
			}
		})
	}
}

func TestRedisConnProblems(t *testing.T) {
	getenv := func(string) string { return "" }
	node, _ := resolveRedis(redisFlags{URL: "redis://:pw@h:1/0"}, nil, getenv)
	flagCluster, _ := resolveRedis(redisFlags{URL: "redis://:pw@h:1", Cluster: true}, nil, getenv)
	t.Setenv(EnvRedisCluster, "1")
	cfg := &config.Config{File: "d.toml", Broker: config.BrokerConfig{Kind: engine.BrokerKindRedisCluster}}
	everyCluster, _ := resolveRedis(redisFlags{URL: "redis://:pw@h:1", Cluster: true}, cfg, os.Getenv)
	disabled := errors.New("ERR This instance has cluster support disabled")
	moved := fmt.Errorf("head skip: %w", errors.New("MOVED 3999 10.0.0.2:7001"))

	tests := []struct {
		name string
		got  string
		want []string // "" for none
	}{
		{"not a cluster, --cluster", notClusterProblem(disabled, flagCluster),
			[]string{"Redis at redis://:xxxxx@h:1 is not a Redis Cluster (ERR This instance has cluster support disabled)", "to use it as one Redis, drop --cluster"}},
		{"not a cluster, every source", notClusterProblem(disabled, everyCluster),
			[]string{"drop --cluster, unset SEQCTL_REDIS_CLUSTER, set [broker] kind = \"redis\" in d.toml"}},
		{"not a cluster, one node asked", notClusterProblem(disabled, node), nil},
		{"a cluster node, one node asked", clusterNodeProblem(moved, node.where()),
			[]string{"Redis at redis://:xxxxx@h:1/0 is a node of a Redis Cluster (", "MOVED 3999 10.0.0.2:7001)", "--cluster", "SEQCTL_REDIS_CLUSTER=1", `kind = "redis-cluster"`, "?addr="}},
		{"a cluster node, server unknown", clusterNodeProblem(moved, ""), []string{"Redis is a node of a Redis Cluster"}},
		{"a redirection in cluster mode", clusterNodeProblem(moved, flagCluster.where()), nil},
		{"not a redirection", clusterNodeProblem(errors.New("the TASK 12 failed"), ""), nil},
		{"run: not a cluster", permanentRedisError(disabled, flagCluster), []string{"cannot start: Redis at redis://:xxxxx@h:1 is not a Redis Cluster", "drop --cluster"}},
		{"run: a cluster node", permanentRedisError(moved, node), []string{"cannot start: Redis at redis://:xxxxx@h:1/0 is a node of a Redis Cluster"}},
		{"run: credentials", permanentRedisError(errors.New("WRONGPASS invalid username-password pair"), flagCluster),
			[]string{"cannot start: Redis Cluster at redis://:xxxxx@h:1 refused the credentials"}},
		{"run: credentials, one node as before", permanentRedisError(errors.New("WRONGPASS invalid username-password pair"), node),
			[]string{"cannot start: Redis at redis://:xxxxx@h:1/0 refused the credentials"}},
		{"run: a bad port in the cluster", permanentRedisError(checkRedisAddr(&redisConn{cluster: &redis.ClusterOptions{Addrs: []string{"h:1", "h:99999"}}, shown: "x"}), &redisConn{cluster: &redis.ClusterOptions{Addrs: []string{"h:1", "h:99999"}}}),
			[]string{`the Redis Cluster address "h:99999" is not a valid host:port`}},
		{"TLS in cluster mode", tlsProblem(errors.New("tls: first record does not look like a TLS handshake"), flagCluster.where()),
			[]string{"TLS handshake with Redis Cluster at redis://:xxxxx@h:1 failed"}},
		{"TLS, one node as before", tlsProblem(errors.New("tls: first record does not look like a TLS handshake"), node.where()),
			[]string{"TLS handshake with Redis at redis://:xxxxx@h:1/0 failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == nil {
				if tt.got != "" {
					t.Fatalf("got %q, want none", tt.got)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(tt.got, w) {
					t.Errorf("%q does not contain %q", tt.got, w)
				}
			}
			if strings.Contains(tt.got, ":pw@") {
				t.Errorf("%q shows the password", tt.got)
			}
		})
	}
}

// TestClusterConnection connects to a real three-master Redis Cluster the way the
// commands do (--cluster, $SEQCTL_REDIS_CLUSTER, a kind = "redis-cluster" config): the
// client reaches every master, follows MOVED and ASK while a slot migrates, and a
// --cluster against one Redis says it is not a cluster.
func TestClusterConnection(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	t.Setenv(EnvRedisCluster, "")
	c := redistest.StartCluster(t, 3)
	ctx := context.Background()
	getenv := func(string) string { return "" }

	t.Run("connectAdmin", func(t *testing.T) {
		cfg := writeConfig(t, fmt.Sprintf("name = \"x\"\n[broker]\nkind = \"redis-cluster\"\nurl = %q\n", c.URL))
		for name, g := range map[string]struct {
			opts GlobalOptions
			env  map[string]string
		}{
			"--cluster":   {GlobalOptions{RedisURL: c.URL, RedisCluster: true}, nil},
			"environment": {GlobalOptions{}, map[string]string{"SEQCTL_REDIS_URL": c.URL, EnvRedisCluster: "yes"}},
			"config":      {GlobalOptions{ConfigPath: cfg}, nil},
		} {
			_, closeAdm, err := connectAdmin(ctx, g.opts, func(k string) string { return g.env[k] }, io.Discard)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			closeAdm()
		}
	})

	t.Run("keys on every master, redirects followed", func(t *testing.T) {
		conn, err := resolveRedis(redisFlags{URL: c.URL, Cluster: true}, nil, getenv)
		if err != nil {
			t.Fatal(err)
		}
		conn.noRetries()
		rdb := conn.newClient()
		defer rdb.Close()
		if _, ok := rdb.(*redis.ClusterClient); !ok {
			t.Fatalf("newClient built a %T", rdb)
		}
		if err := conn.ping(ctx, rdb); err != nil {
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
		strict, err := resolveRedis(redisFlags{URL: c.URL, Cluster: true}, nil, getenv)
		if err != nil {
			t.Fatal(err)
		}
		strict.cluster.MaxRedirects = -1
		srdb := strict.newClient()
		defer srdb.Close()
		if err := strict.ping(ctx, srdb); err != nil {
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
		_, _, err := connectAdmin(ctx, GlobalOptions{RedisURL: srv.URL, RedisCluster: true}, getenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "Redis at "+srv.URL+" is not a Redis Cluster") || !strings.Contains(err.Error(), "drop --cluster") {
			t.Fatalf("err = %v, want one saying the server is not a cluster and to drop --cluster", err)
		}
		cfg := writeConfig(t, fmt.Sprintf("name = \"x\"\n[broker]\nkind = \"redis-cluster\"\nurl = %q\n", strings.TrimSuffix(srv.URL, "/0")))
		res := runCLI(t, false, "partitions", "list", "--config", cfg)
		if res.Code != ExitFailure || !strings.Contains(res.Stderr, "is not a Redis Cluster") || !strings.Contains(res.Stderr, `set [broker] kind = "redis" in `+cfg) {
			t.Errorf("partitions list with a redis-cluster config against one Redis: exit %d\n%s", res.Code, res.Stderr)
		}
	})
}

// A network failure after a request reached a cluster node is not resent by the
// operator commands' client (the request may have run), while go-redis alone would
// resend it. The request is a script that counts its runs and outlasts the client's
// read timeout.
func TestClusterRequestNotResent(t *testing.T) {
	t.Setenv(EnvRedisCluster, "")
	c := redistest.StartCluster(t, 3)
	ctx := context.Background()
	const slow = `redis.call('INCR', KEYS[1])
local t0 = redis.call('TIME')
repeat local t = redis.call('TIME') until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 300000
return 1`
	for _, tt := range []struct {
		name      string
		noRetries bool
		resent    bool
	}{
		{"operator commands", true, false},
		{"go-redis defaults", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "runs:" + tt.name
			conn, err := resolveRedis(redisFlags{URL: c.URL, Cluster: true}, nil, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if tt.noRetries {
				conn.noRetries()
			}
			conn.cluster.ReadTimeout = 100 * time.Millisecond
			rdb := conn.newClient()
			defer rdb.Close()
			if err := rdb.Eval(ctx, slow, []string{key}).Err(); err == nil {
				t.Fatal("the script outlasted the read timeout without an error")
			}
			// Every resend has reached the node by now; wait for the node to run them.
			time.Sleep(time.Second)
			node := c.Nodes[c.NodeOf(t, key)].Client(t)
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			runs, err := node.Get(pctx, key).Int()
			if err != nil {
				t.Fatal(err)
			}
			if resent := runs > 1; resent != tt.resent {
				t.Errorf("the script ran %d times; resent %v, want %v", runs, resent, tt.resent)
			}
		})
	}
}
