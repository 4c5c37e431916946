package redisconn

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
		flags   Flags
		env     map[string]string
		cfg     *config.Config
		want    want
		wantErr []string
	}{
		{name: "nothing asks: one node", flags: Flags{URL: "redis://h:7000/0"},
			want: want{Addrs: []string{"h:7000"}, Where: "Redis at redis://h:7000/0", DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}},
		{name: "a kind = redis config: one node", cfg: cfgNode, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:1/0"},
			want: want{Addrs: []string{"env:1"}, Where: "Redis at redis://env:1/0", DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}},
		{name: "--cluster", flags: Flags{URL: "redis://h:7000?addr=h:7001&addr=h:7002", Cluster: true},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"h:7000", "h:7001", "h:7002"}, Where: "Redis Cluster at redis://h:7000?addr=h:7001&addr=h:7002"})},
		{name: "the environment", flags: Flags{URL: "redis://h:7000"}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "1"},
			want: clusterWant(want{From: []string{"$SEQCTL_REDIS_CLUSTER"}, Addrs: []string{"h:7000"}, Where: "Redis Cluster at redis://h:7000"})},
		{name: "the environment says true", flags: Flags{URL: "redis://h:7000"}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "true"},
			want: clusterWant(want{From: []string{"$SEQCTL_REDIS_CLUSTER"}, Addrs: []string{"h:7000"}, Where: "Redis Cluster at redis://h:7000"})},
		{name: "the environment says YES", flags: Flags{URL: "redis://h:7000"}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "YES"},
			want: clusterWant(want{From: []string{"$SEQCTL_REDIS_CLUSTER"}, Addrs: []string{"h:7000"}, Where: "Redis Cluster at redis://h:7000"})},
		{name: "the config's kind, with its URL", cfg: cfgCluster,
			want: clusterWant(want{From: []string{"d.toml"}, Addrs: []string{"cfg:7000", "cfg:7001"}, Where: "Redis Cluster at redis://cfg:7000?addr=cfg:7001"})},
		{name: "all three", cfg: cfgCluster, flags: Flags{Cluster: true}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "1"},
			want: clusterWant(want{From: []string{"--cluster", "$SEQCTL_REDIS_CLUSTER", "d.toml"}, Addrs: []string{"cfg:7000", "cfg:7001"}, Where: "Redis Cluster at redis://cfg:7000?addr=cfg:7001"})},
		{name: "environment URL over the config's", cfg: cfgCluster, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:7000?addr=env:7001"},
			want: clusterWant(want{From: []string{"d.toml"}, Addrs: []string{"env:7000", "env:7001"}, Where: "Redis Cluster at redis://env:7000?addr=env:7001"})},
		{name: "--redis-url over everything", cfg: cfgCluster, flags: Flags{URL: "redis://flag:7000"}, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:7000"},
			want: clusterWant(want{From: []string{"d.toml"}, Addrs: []string{"flag:7000"}, Where: "Redis Cluster at redis://flag:7000"})},
		{name: "default URL", flags: Flags{Cluster: true},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"127.0.0.1:6379"}, Where: "Redis Cluster at " + DefaultRedisURL})},
		{name: "password from the environment", flags: Flags{URL: "redis://app@h:7000", Cluster: true}, env: map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"h:7000"}, Username: "app", Password: "s3cret", Where: "Redis Cluster at redis://app@h:7000"})},
		{name: "password in the URL wins", flags: Flags{URL: "redis://app:inurl@h:7000", Cluster: true}, env: map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"h:7000"}, Username: "app", Password: "inurl", Where: "Redis Cluster at redis://app:xxxxx@h:7000"})},
		{name: "rediss", flags: Flags{URL: "rediss://redis.internal:6380?addr=10.0.0.2:6380", Cluster: true},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"redis.internal:6380", "10.0.0.2:6380"}, TLS: true, ServerName: "redis.internal", Where: "Redis Cluster at rediss://redis.internal:6380?addr=10.0.0.2:6380"})},
		{name: "TLS settings from the flags", flags: Flags{URL: "redis://h:7000", Cluster: true, TLS: config.TLSConfig{CAFile: tlsFiles.CA, ServerName: "redis.internal"}},
			want: clusterWant(want{From: []string{"--cluster"}, Addrs: []string{"h:7000"}, TLS: true, ServerName: "redis.internal", Where: "Redis Cluster at redis://h:7000"})},

		{name: "bad environment value", flags: Flags{Cluster: true}, env: map[string]string{"SEQCTL_REDIS_CLUSTER": "on"},
			wantErr: []string{`invalid value "on" for $SEQCTL_REDIS_CLUSTER`, "1, true or yes"}},
		{name: "0 is not a value either", env: map[string]string{"SEQCTL_REDIS_CLUSTER": "0"},
			wantErr: []string{`invalid value "0" for $SEQCTL_REDIS_CLUSTER`}},
		{name: "bad scheme", flags: Flags{URL: "unix:///run/redis.sock", Cluster: true},
			wantErr: []string{"invalid Redis Cluster URL unix:///run/redis.sock (from --redis-url)", config.ClusterURLForm}},
		{name: "a database", flags: Flags{URL: "redis://:pw@h:7000/3", Cluster: true},
			wantErr: []string{"invalid Redis Cluster URL redis://:xxxxx@h:7000/3", "only database 0"}},
		{name: "bad addr from the config", cfg: &config.Config{File: "d.toml", Broker: config.BrokerConfig{Kind: engine.BrokerKindRedisCluster, URL: "redis://h:7000?addr=nope"}},
			wantErr: []string{"(from d.toml: broker.url)", "addr param: nope"}},
		{name: "bad TLS setting", flags: Flags{URL: "rediss://h:7000", Cluster: true, TLS: config.TLSConfig{MinVersion: "1.1"}},
			wantErr: []string{"--redis-tls-min-version"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := Resolve(tt.flags, tt.cfg, func(k string) string { return tt.env[k] })
			if tt.wantErr != nil {
				checkSettingError(t, err, tt.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{Cluster: conn.IsCluster(), From: conn.clusterFrom, Addrs: conn.addrs(), Where: conn.Where(), TLS: conn.TLSConfig() != nil}
			if tc := conn.TLSConfig(); tc != nil {
				got.ServerName = tc.ServerName
			}
			if conn.IsCluster() {
				o := conn.Cluster
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
			rdb := conn.NewClient()
			defer rdb.Close()
			if _, isCluster := rdb.(*redis.ClusterClient); isCluster != tt.want.Cluster {
				t.Errorf("newClient built a %T", rdb)
			}
		})
	}
}

// The operator commands never have go-redis resend a request: one node gets
// MaxRetries = -1; a cluster client keeps following redirects (MaxRedirects at its
// default) while its node clients neither retry nor let a network failure be resent.
func TestRedisConnNoRetries(t *testing.T) {
	node, err := Resolve(Flags{URL: "redis://h:1/0"}, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	node.NoRetries()
	if node.node.MaxRetries != -1 {
		t.Errorf("node MaxRetries = %d, want -1", node.node.MaxRetries)
	}

	cluster, err := Resolve(Flags{URL: "redis://h:1", Cluster: true}, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cluster.NoRetries()
	rdb := cluster.NewClient()
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
	node, _ := Resolve(Flags{URL: "redis://:pw@h:1/0"}, nil, getenv)
	flagCluster, _ := Resolve(Flags{URL: "redis://:pw@h:1", Cluster: true}, nil, getenv)
	t.Setenv(EnvRedisCluster, "1")
	cfg := &config.Config{File: "d.toml", Broker: config.BrokerConfig{Kind: engine.BrokerKindRedisCluster}}
	everyCluster, _ := Resolve(Flags{URL: "redis://:pw@h:1", Cluster: true}, cfg, os.Getenv)
	disabled := errors.New("ERR This instance has cluster support disabled")
	moved := fmt.Errorf("head skip: %w", errors.New("MOVED 3999 10.0.0.2:7001"))

	tests := []struct {
		name string
		got  string
		want []string // "" for none
	}{
		{"not a cluster, --cluster", NotClusterProblem(disabled, flagCluster),
			[]string{"Redis at redis://:xxxxx@h:1 is not a Redis Cluster (ERR This instance has cluster support disabled)", "to use it as one Redis, drop --cluster"}},
		{"not a cluster, every source", NotClusterProblem(disabled, everyCluster),
			[]string{"drop --cluster, unset SEQCTL_REDIS_CLUSTER, set [broker] kind = \"redis\" in d.toml"}},
		{"not a cluster, one node asked", NotClusterProblem(disabled, node), nil},
		{"a cluster node, one node asked", ClusterNodeProblem(moved, node.Where()),
			[]string{"Redis at redis://:xxxxx@h:1/0 is a node of a Redis Cluster (", "MOVED 3999 10.0.0.2:7001)", "--cluster", "SEQCTL_REDIS_CLUSTER=1", `kind = "redis-cluster"`, "?addr="}},
		{"a cluster node, server unknown", ClusterNodeProblem(moved, ""), []string{"Redis is a node of a Redis Cluster"}},
		{"a redirection in cluster mode", ClusterNodeProblem(moved, flagCluster.Where()), nil},
		{"not a redirection", ClusterNodeProblem(errors.New("the TASK 12 failed"), ""), nil},
		{"run: not a cluster", PermanentProblem(disabled, flagCluster), []string{"cannot start: Redis at redis://:xxxxx@h:1 is not a Redis Cluster", "drop --cluster"}},
		{"run: a cluster node", PermanentProblem(moved, node), []string{"cannot start: Redis at redis://:xxxxx@h:1/0 is a node of a Redis Cluster"}},
		{"run: credentials", PermanentProblem(errors.New("WRONGPASS invalid username-password pair"), flagCluster),
			[]string{"cannot start: Redis Cluster at redis://:xxxxx@h:1 refused the credentials"}},
		{"run: credentials, one node as before", PermanentProblem(errors.New("WRONGPASS invalid username-password pair"), node),
			[]string{"cannot start: Redis at redis://:xxxxx@h:1/0 refused the credentials"}},
		{"run: a bad port in the cluster", PermanentProblem(CheckAddr(&Conn{Cluster: &redis.ClusterOptions{Addrs: []string{"h:1", "h:99999"}}, Shown: "x"}), &Conn{Cluster: &redis.ClusterOptions{Addrs: []string{"h:1", "h:99999"}}}),
			[]string{`the Redis Cluster address "h:99999" is not a valid host:port`}},
		{"TLS in cluster mode", TLSProblem(errors.New("tls: first record does not look like a TLS handshake"), flagCluster.Where()),
			[]string{"TLS handshake with Redis Cluster at redis://:xxxxx@h:1 failed"}},
		{"TLS, one node as before", TLSProblem(errors.New("tls: first record does not look like a TLS handshake"), node.Where()),
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
			conn, err := Resolve(Flags{URL: c.URL, Cluster: true}, nil, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if tt.noRetries {
				conn.NoRetries()
			}
			conn.Cluster.ReadTimeout = 100 * time.Millisecond
			rdb := conn.NewClient()
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

func TestRedisOptions(t *testing.T) {
	cfg := &config.Config{File: "d.toml", Broker: config.BrokerConfig{URL: "redis://cfg:6379/2"}}
	tests := []struct {
		name     string
		flag     string
		env      map[string]string
		cfg      *config.Config
		addr     string
		db       int
		password string
		tls      bool
		wantErr  string
	}{
		{name: "default", addr: "127.0.0.1:6379"},
		{name: "config", cfg: cfg, addr: "cfg:6379", db: 2},
		{name: "environment over config", cfg: cfg, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:1/3"}, addr: "env:1", db: 3},
		{name: "flag over everything", flag: "redis://flag:2/4", cfg: cfg, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:1/3"}, addr: "flag:2", db: 4},
		{name: "password from the environment", flag: "redis://h:1/0", env: map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"}, addr: "h:1", password: "s3cret"},
		{name: "password in the URL wins", flag: "redis://:inurl@h:1/0", env: map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"}, addr: "h:1", password: "inurl"},
		{name: "tls", flag: "rediss://h:6380/0", addr: "h:6380", tls: true},
		{name: "bad scheme", flag: "http://h", wantErr: "invalid Redis URL http://h (from --redis-url)"},
		{name: "bad url from the config", cfg: &config.Config{File: "d.toml", Broker: config.BrokerConfig{URL: "nope://x"}}, wantErr: "(from d.toml: broker.url)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := Resolve(Flags{URL: tt.flag}, tt.cfg, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				checkSettingError(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			opt := conn.node
			if conn.IsCluster() || opt == nil {
				t.Fatalf("cluster mode without asking for it")
			}
			if opt.Addr != tt.addr || opt.DB != tt.db || opt.Password != tt.password || (opt.TLSConfig != nil) != tt.tls {
				t.Errorf("options: addr %s db %d password %q tls %v", opt.Addr, opt.DB, opt.Password, opt.TLSConfig != nil)
			}
		})
	}
}

// checkSettingError checks that err is a bad connection setting (which the commands
// report as a usage error) that mentions each fragment.
func checkSettingError(t *testing.T, err error, fragments ...string) {
	t.Helper()
	var se *SettingError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a bad setting (a usage error)", err)
	}
	for _, w := range fragments {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}
