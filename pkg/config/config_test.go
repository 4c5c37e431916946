package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seqctl/seqctl/pkg/engine"
)

// repoTestdata is the repository's testdata directory, seen from this package.
const repoTestdata = "../../testdata"

func noEnv(string) string { return "" }

// mustParse parses src with an empty environment and fails the test on any problem.
func mustParse(t testing.TB, src string) *Config {
	t.Helper()
	cfg, err := parseConfig("domain.toml", []byte(src), noEnv)
	if err != nil {
		t.Fatalf("parseConfig: unexpected error:\n%v", err)
	}
	return cfg
}

// problemsOf parses src and returns its problems, failing when it parses.
func problemsOf(t testing.TB, src string) []Problem {
	t.Helper()
	_, err := parseConfig("domain.toml", []byte(src), noEnv)
	if err == nil {
		t.Fatalf("parseConfig: no error, want problems")
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("parseConfig: error %T (%v), want *Error", err, err)
	}
	if ce.File != "domain.toml" {
		t.Errorf("Error.File = %q, want domain.toml", ce.File)
	}
	return ce.Problems
}

var ignoreConfigInternals = cmpopts.IgnoreUnexported(Config{})

func TestParseConfigExample(t *testing.T) {
	t.Setenv(EnvRedisURL, "")
	t.Setenv(EnvOutboxDSN, "")
	cfg, err := Load(filepath.Join(repoTestdata, "domain.toml"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := &Config{
		File:   filepath.Join(repoTestdata, "domain.toml"),
		Name:   "shop",
		Broker: BrokerConfig{Kind: "redis", URL: "redis://127.0.0.1:6379/0", ReplicaTimeout: time.Second},
		Server: ServerConfig{
			Partitioning: PartitioningConfig{
				LeaseTTL:              15 * time.Second,
				HeartbeatInterval:     3 * time.Second,
				PollInterval:          250 * time.Millisecond,
				ReapIdle:              time.Hour,
				SweepInterval:         2 * time.Second,
				KeyspaceNotifications: "auto",
				MaxPartitionsWarning:  2000,
				MaxUnacked:            1,
			},
			PriorityLanes:         PriorityLanes{Enabled: false, Threshold: 0, BackfillSuffix: "backfill"},
			MaxConcurrentHandlers: 64,
		},
		Outbox: &OutboxConfig{DSN: "sqlite://outbox.db"},
		Events: []TypeConfig{
			{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "client_id", "total"}},
			{Name: "OrderShipped", Category: "order", Fields: []string{"order_id", "client_id"}},
			{Name: "PaymentConfirmed", Category: "payment", Fields: []string{"payment_id", "order_ref", "amount"}},
			{Name: "ShipmentDispatched", Category: "shipping", Fields: []string{"shipment_id", "order_id"}},
		},
		Commands: []TypeConfig{
			{Name: "PlaceOrder", Category: "order_command", Fields: []string{"order_id", "client_id"}},
		},
		Handlers: []HandlerConfig{
			{
				Name: "OrderProjector", Kind: engine.EventHandlerKind, PartOf: "order",
				Handles: []string{"OrderPlaced", "OrderShipped"}, SequentialBy: "client_id",
				MaxRetries: 3, RetryDelay: time.Second,
				Deliver: &DeliverConfig{
					HTTP: "http://127.0.0.1:8080/order-projector", Timeout: 10 * time.Second,
					SigningKeyEnv: "ORDER_PROJECTOR_KEY",
					MaxConcurrent: 128,
				},
			},
			{
				Name: "PlaceOrderHandler", Kind: engine.CommandHandlerKind, PartOf: "order_command",
				Handles: []string{"PlaceOrder"}, SequentialBy: "client_id",
				MaxRetries: 3, RetryDelay: 500 * time.Millisecond,
				Deliver: &DeliverConfig{Exec: []string{"./bin/place-order", "--quiet"}, Timeout: 30 * time.Second},
			},
		},
		ProcessManagers: []ProcessManagerConfig{{
			Name: "OrderFulfillment", SequentialBy: true, MaxRetries: 5, RetryDelay: 2 * time.Second,
			Deliver: &DeliverConfig{HTTP: "http://127.0.0.1:8080/fulfillment", Timeout: 10 * time.Second},
			Handles: []PMHandleConfig{
				{Event: "PaymentConfirmed", Correlate: engine.Correlate{PMField: "order_id", EventField: "order_ref"}, Start: true},
				{Event: "ShipmentDispatched", Correlate: engine.Correlate{PMField: "order_id", EventField: "order_id"}},
			},
		}},
	}
	if diff := cmp.Diff(want, cfg, ignoreConfigInternals); diff != "" {
		t.Errorf("Load(testdata/domain.toml) mismatch (-want +got):\n%s", diff)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg := mustParse(t, `
name = "shop"

[[events]]
name = "OrderPlaced"
category = "order"
fields = ["order_id"]

[[handlers]]
name = "Projector"
handles = ["OrderPlaced"]

[[handlers]]
name = "Mailer"
handles = ["OrderPlaced"]
[handlers.deliver]
exec = ["./mail"]

[[process_managers]]
name = "Fulfillment"
[[process_managers.handles]]
event = "OrderPlaced"
correlate = "order_id"
`)
	want := &Config{
		File:   "domain.toml",
		Name:   "shop",
		Broker: BrokerConfig{Kind: "redis", URL: "redis://127.0.0.1:6379/0"},
		Server: ServerConfig{
			Partitioning:  DefaultPartitioningConfig(),
			PriorityLanes: PriorityLanes{BackfillSuffix: "backfill"},
		},
		Outbox: nil,
		Events: []TypeConfig{{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id"}}},
		Handlers: []HandlerConfig{
			{Name: "Projector", Kind: engine.EventHandlerKind, Handles: []string{"OrderPlaced"}, MaxRetries: 3, RetryDelay: time.Second},
			{
				Name: "Mailer", Kind: engine.EventHandlerKind, Handles: []string{"OrderPlaced"}, MaxRetries: 3, RetryDelay: time.Second,
				Deliver: &DeliverConfig{Exec: []string{"./mail"}, Timeout: 10 * time.Second},
			},
		},
		ProcessManagers: []ProcessManagerConfig{{
			Name: "Fulfillment", MaxRetries: 3, RetryDelay: time.Second,
			Handles: []PMHandleConfig{{Event: "OrderPlaced", Correlate: engine.Correlate{PMField: "order_id", EventField: "order_id"}}},
		}},
	}
	if diff := cmp.Diff(want, cfg, ignoreConfigInternals); diff != "" {
		t.Errorf("defaults mismatch (-want +got):\n%s", diff)
	}
}

func TestParseConfigPartitioning(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want PartitioningConfig
	}{
		{
			name: "heartbeat derived from the lease TTL",
			toml: "lease_ttl_ms = 10000",
			want: PartitioningConfig{LeaseTTL: 10 * time.Second, HeartbeatInterval: 2 * time.Second, PollInterval: 250 * time.Millisecond, ReapIdle: time.Hour, SweepInterval: 2 * time.Second, KeyspaceNotifications: "auto", MaxPartitionsWarning: 2000, MaxUnacked: 1},
		},
		{
			name: "integer seconds accepted for float keys",
			toml: "heartbeat_interval_seconds = 1\npoll_interval_seconds = 2",
			want: PartitioningConfig{LeaseTTL: 15 * time.Second, HeartbeatInterval: time.Second, PollInterval: 2 * time.Second, ReapIdle: time.Hour, SweepInterval: 2 * time.Second, KeyspaceNotifications: "auto", MaxPartitionsWarning: 2000, MaxUnacked: 1},
		},
		{
			name: "every key set",
			toml: "lease_ttl_ms = 3000\nheartbeat_interval_seconds = 0.5\npoll_interval_seconds = 0.1\nreap_idle_ms = 60000\nsweep_interval_seconds = 0.5\nkeyspace_notifications = \"off\"\nmax_partitions_warning = 0\nmax_unacked = 16",
			want: PartitioningConfig{LeaseTTL: 3 * time.Second, HeartbeatInterval: 500 * time.Millisecond, PollInterval: 100 * time.Millisecond, ReapIdle: time.Minute, SweepInterval: 500 * time.Millisecond, KeyspaceNotifications: "off", MaxPartitionsWarning: 0, MaxUnacked: 16},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "name = \"x\"\n[server.partitioning]\n"+tt.toml+"\n")
			if diff := cmp.Diff(tt.want, cfg.Server.Partitioning); diff != "" {
				t.Errorf("partitioning mismatch (-want +got):\n%s", diff)
			}
			if err := cfg.Server.Partitioning.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

// [broker] min_replicas and replica_timeout_ms reach EngineConfig; without them the
// engine does not wait for replicas at all.
func TestParseConfigReplicas(t *testing.T) {
	tests := []struct {
		name        string
		toml        string
		wantMin     int
		wantTimeout time.Duration // EngineConfig.ReplicaTimeout as configured (0: the default)
	}{
		{"default: no wait", "", 0, 0},
		{"one replica, default timeout", "[broker]\nmin_replicas = 1\n", 1, 0},
		{"timeout set", "[broker]\nmin_replicas = 2\nreplica_timeout_ms = 2500\n", 2, 2500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "name = \"x\"\n"+tt.toml)
			ec := cfg.EngineConfig(nil, nil)
			if ec.MinReplicas != tt.wantMin || ec.ReplicaTimeout != tt.wantTimeout {
				t.Errorf("EngineConfig MinReplicas, ReplicaTimeout = %d, %v; want %d, %v", ec.MinReplicas, ec.ReplicaTimeout, tt.wantMin, tt.wantTimeout)
			}
		})
	}
}

// [broker] kind = "redis-cluster" takes go-redis's cluster URL form; every other
// [broker] key means what it means for "redis".
func TestParseConfigRedisCluster(t *testing.T) {
	type want struct {
		Addrs              []string
		Username, Password string
		TLS                bool
		ServerName         string
		MinReplicas        int
	}
	tests := []struct {
		name   string
		broker string
		want   want
	}{
		{"three addresses", `url = "redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002"`,
			want{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}}},
		{"one seed is enough", `url = "redis://redis-0.redis:6379"`, want{Addrs: []string{"redis-0.redis:6379"}}},
		{"database 0 is allowed", `url = "redis://h:7000/0?addr=h:7001"`, want{Addrs: []string{"h:7000", "h:7001"}}},
		{"user and password", `url = "redis://app:p%40ss@h:7000?addr=h:7001"`,
			want{Addrs: []string{"h:7000", "h:7001"}, Username: "app", Password: "p@ss"}},
		{"rediss turns TLS on, the seed's host as server name", `url = "rediss://:pw@redis.internal:6380?addr=10.0.0.2:6380"`,
			want{Addrs: []string{"redis.internal:6380", "10.0.0.2:6380"}, Password: "pw", TLS: true, ServerName: "redis.internal"}},
		{"default URL", ``, want{Addrs: []string{"127.0.0.1:6379"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "name = \"x\"\n[broker]\nkind = \"redis-cluster\"\n"+tt.broker+"\n")
			if cfg.Broker.Kind != engine.BrokerKindRedisCluster || !cfg.Broker.IsRedis() || !cfg.Broker.IsCluster() {
				t.Fatalf("broker kind %q, IsRedis %v, IsCluster %v", cfg.Broker.Kind, cfg.Broker.IsRedis(), cfg.Broker.IsCluster())
			}
			if !cfg.BrokerInfo().Has(engine.StreamPartitioning) {
				t.Errorf("the redis-cluster broker does not advertise %s", engine.StreamPartitioning)
			}
			opt, err := ParseClusterURL(cfg.Broker.URL)
			if err != nil {
				t.Fatal(err)
			}
			got := want{Addrs: opt.Addrs, Username: opt.Username, Password: opt.Password, TLS: opt.TLSConfig != nil, MinReplicas: cfg.Broker.MinReplicas}
			if opt.TLSConfig != nil {
				got.ServerName = opt.TLSConfig.ServerName
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("cluster options (-want +got):\n%s", diff)
			}
		})
	}

	for _, kind := range []string{"redis", "inline"} {
		cfg := mustParse(t, "name = \"x\"\n[broker]\nkind = \""+kind+"\"\n")
		if cfg.Broker.IsCluster() || cfg.Broker.IsRedis() != (kind == "redis") {
			t.Errorf("kind %q: IsRedis %v, IsCluster %v", kind, cfg.Broker.IsRedis(), cfg.Broker.IsCluster())
		}
	}
}

// A bad Redis Cluster URL is a problem at broker.url that names the form to write and
// never echoes the password.
func TestParseConfigRedisClusterProblems(t *testing.T) {
	tests := []struct {
		name     string
		url      string
		contains []string
	}{
		{"unix socket", "unix:///run/redis.sock", []string{`scheme "unix"`, ClusterURLForm}},
		{"http", "http://h:7000", []string{`scheme "http"`, "?addr=HOST:PORT"}},
		{"no host", "redis://", []string{"no host", ClusterURLForm}},
		{"a database other than 0", "redis://:s3cret@h:7000/2?addr=h:7001", []string{"only database 0", "remove /2", ClusterURLForm}},
		{"bad addr parameter", "redis://:s3cret@h:7000?addr=h7001", []string{"not a Redis Cluster URL", "addr param: h7001", ClusterURLForm}},
		{"unknown parameter", "redis://:s3cret@h:7000?adr=h:7001", []string{"unexpected option: adr", ClusterURLForm}},
		{"unparsable password", "redis://:s3cret%zz@h:7000?addr=h:7001", []string{"not a valid URL", ClusterURLForm}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problemsOf(t, fmt.Sprintf("name = \"x\"\n[broker]\nkind = \"redis-cluster\"\nurl = %q\n", tt.url))
			if len(got) != 1 || got[0].Path != "broker.url" || got[0].Line != 4 {
				t.Fatalf("problems %v, want one at broker.url on line 4", got)
			}
			for _, frag := range tt.contains {
				if !strings.Contains(got[0].Message, frag) {
					t.Errorf("problem %q does not contain %q", got[0].Message, frag)
				}
			}
			if strings.Contains(got[0].Message, "s3cret") {
				t.Errorf("problem %q shows the password", got[0].Message)
			}
		})
	}

	t.Run("min_replicas", func(t *testing.T) {
		got := problemsOf(t, "name = \"x\"\n[broker]\nkind = \"redis-cluster\"\nurl = \"redis://h:7000\"\nmin_replicas = 1\n")
		if len(got) != 1 || got[0].Path != "broker.min_replicas" || !strings.Contains(got[0].Message, "set it to 0") {
			t.Fatalf("problems %v, want one at broker.min_replicas saying to set it to 0", got)
		}
	})

	t.Run("from the environment", func(t *testing.T) {
		_, err := parseConfig("domain.toml", []byte("name = \"x\"\n[broker]\nkind = \"redis-cluster\"\n"), func(k string) string {
			if k == EnvRedisURL {
				return "redis://:s3cret@h:7000/5"
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), EnvRedisURL) || !strings.Contains(err.Error(), "only database 0") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("err = %v, want a problem naming %s, without the password", err, EnvRedisURL)
		}
	})
}

func TestParseConfigConcurrency(t *testing.T) {
	const handlers = `
[[events]]
name = "E"
category = "c"
fields = ["k"]

[[handlers]]
name = "ByExec"
handles = ["E"]
[handlers.deliver]
exec = ["./x"]

[[handlers]]
name = "ByHTTP"
handles = ["E"]
[handlers.deliver]
http = "http://127.0.0.1:1/x"
@HTTP@
[[handlers]]
name = "InGo"
handles = ["E"]
`
	tests := []struct {
		name         string
		server, http string
		wantInstance int
		wantLimits   map[string]int
	}{
		{"defaults per delivery kind", "", "", 0,
			map[string]int{"ByExec": DefaultExecConcurrency, "ByHTTP": DefaultHTTPConcurrency}},
		{"set", "[server]\nmax_concurrent_handlers = 40\n", "max_concurrent = 7\n", 40,
			map[string]int{"ByExec": DefaultExecConcurrency, "ByHTTP": 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "name = \"x\"\n"+tt.server+strings.Replace(handlers, "@HTTP@", tt.http, 1))
			ec := cfg.EngineConfig(nil, nil)
			if ec.MaxConcurrentHandlers != tt.wantInstance {
				t.Errorf("MaxConcurrentHandlers = %d, want %d", ec.MaxConcurrentHandlers, tt.wantInstance)
			}
			if diff := cmp.Diff(tt.wantLimits, ec.HandlerLimits); diff != "" {
				t.Errorf("HandlerLimits (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfigEnvOverrides(t *testing.T) {
	const src = `
name = "shop"
[broker]
url = "redis://file:6379/0"
[outbox]
dsn = "sqlite://file.db"
`
	for _, tt := range []struct {
		name, envURL, envDSN, wantURL, wantDSN string
	}{
		{"unset", "", "", "redis://file:6379/0", "sqlite://file.db"},
		{"set", "rediss://env:6380/1", "postgres://u@env:5432/db", "rediss://env:6380/1", "postgres://u@env:5432/db"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRedisURL, tt.envURL)
			t.Setenv(EnvOutboxDSN, tt.envDSN)
			cfg, err := Parse("domain.toml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Broker.URL != tt.wantURL || cfg.Outbox.DSN != tt.wantDSN {
				t.Errorf("got url %q dsn %q, want %q and %q", cfg.Broker.URL, cfg.Outbox.DSN, tt.wantURL, tt.wantDSN)
			}
		})
	}
	t.Run("env DSN does not create the outbox", func(t *testing.T) {
		t.Setenv(EnvOutboxDSN, "sqlite://env.db")
		cfg, err := Parse("domain.toml", []byte(`name = "shop"`))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Outbox != nil {
			t.Errorf("Outbox = %+v, want nil without an [outbox] table", cfg.Outbox)
		}
	})
	t.Run("env DSN satisfies a table without dsn", func(t *testing.T) {
		t.Setenv(EnvOutboxDSN, "sqlite://env.db")
		cfg, err := Parse("domain.toml", []byte("name = \"shop\"\n[outbox]\n"))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Outbox == nil || cfg.Outbox.DSN != "sqlite://env.db" {
			t.Errorf("Outbox = %+v, want the environment's DSN", cfg.Outbox)
		}
	})
	t.Run("bad env URL is reported without echoing it", func(t *testing.T) {
		t.Setenv(EnvRedisURL, "http://user:secret@host")
		_, err := Parse("domain.toml", []byte(`name = "shop"`))
		if err == nil || !strings.Contains(err.Error(), EnvRedisURL) || strings.Contains(err.Error(), "secret") {
			t.Errorf("err = %v, want a problem naming %s without the URL", err, EnvRedisURL)
		}
	})
}

// baseDomain is a valid domain that problem cases extend. Its lines:
//
//	1 name, 3 [[events]] OrderPlaced (order), 8 [[events]] OrderShipped (order),
//	13 [[commands]] PlaceOrder (order_command); text appended to it starts on line 17.
const baseDomain = `name = "shop"

[[events]]
name = "OrderPlaced"
category = "order"
fields = ["order_id", "client_id"]

[[events]]
name = "OrderShipped"
category = "order"
fields = ["order_id", "client_id"]

[[commands]]
name = "PlaceOrder"
category = "order_command"
fields = ["order_id", "client_id"]
`

// handlerAt18 is a handler whose [[handlers]] header is line 18 after baseDomain; a key
// appended after it is on line 21.
const handlerAt18 = `
[[handlers]]
name = "Projector"
handles = ["OrderPlaced"]
`

type wantProblem struct {
	Path string
	Line int
	// Contains are fragments the message must contain.
	Contains []string
}

func TestParseConfigProblems(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want []wantProblem
	}{
		// Syntax.
		{"syntax error alone", "name = \"shop\"\nbroken = [\nx = 1\n", []wantProblem{{"", 3, []string{"TOML syntax error"}}}},
		{"duplicate key", "name = \"a\"\nname = \"b\"\n", []wantProblem{{"", 2, []string{"TOML syntax error", "name"}}}},
		// Unknown keys.
		{"unknown top-level key", "colour = \"red\"\n" + baseDomain, []wantProblem{{"colour", 1, []string{"unknown key", "name, broker, server"}}}},
		{"unknown key suggestion", baseDomain + handlerAt18 + "max_retry = 2\n", []wantProblem{{"handlers[0].max_retry", 21, []string{`did you mean "max_retries"`}}}},
		{"unknown key is case-sensitive", baseDomain + handlerAt18 + "Name = \"x\"\n", []wantProblem{{"handlers[0].Name", 21, []string{`did you mean "name"`, "case-sensitive"}}}},
		{"unknown table", "name = \"x\"\n[servers.partitioning]\nlease_ttl_ms = 1\n", []wantProblem{{"servers", 2, []string{`did you mean "server"`}}}},
		{"unknown nested key", "name = \"x\"\n[server.partitioning]\nlease_ttl = 1\n", []wantProblem{{"server.partitioning.lease_ttl", 3, []string{`did you mean "lease_ttl_ms"`}}}},
		{"unknown quoted key", "name = \"x\"\n[broker]\n\"my key\" = 1\n", []wantProblem{{`broker."my key"`, 3, []string{"unknown key", "kind, url"}}}},
		{"unknown key in handles", baseDomain + "[[process_managers]]\nname = \"P\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"order_id\"\nstrat = true\n",
			[]wantProblem{{"process_managers[0].handles[0].strat", 22, []string{`did you mean "start"`}}}},
		// Types.
		{"integer as string", baseDomain + handlerAt18 + "max_retries = \"3\"\n", []wantProblem{{"handlers[0].max_retries", 21, []string{"must be an integer", `not a string ("3")`, "max_retries = 3, without quotes"}}}},
		{"float for integer", "name = \"x\"\n[server.partitioning]\nlease_ttl_ms = 1.5\n", []wantProblem{{"server.partitioning.lease_ttl_ms", 3, []string{"must be an integer", "a float (1.5)"}}}},
		{"string for float", "name = \"x\"\n[server.partitioning]\npoll_interval_seconds = \"0.5\"\n", []wantProblem{{"server.partitioning.poll_interval_seconds", 3, []string{"must be a number", "without quotes"}}}},
		{"string for bool", "name = \"x\"\n[server.priority_lanes]\nenabled = \"true\"\n", []wantProblem{{"server.priority_lanes.enabled", 3, []string{"must be a boolean", "enabled = true, without quotes"}}}},
		{"number for string", "name = 5\n", []wantProblem{{"name", 1, []string{"must be a string", `put the value in quotes: name = "5"`}}}},
		{"string for array", baseDomain + "[[handlers]]\nname = \"P\"\nhandles = \"OrderPlaced\"\n", []wantProblem{{"handlers[0].handles", 19, []string{"must be an array of strings", `handles = ["OrderPlaced"]`}}}},
		{"array element type", baseDomain + "[[handlers]]\nname = \"P\"\nhandles = [\n  \"OrderPlaced\",\n  7,\n]\n", []wantProblem{{"handlers[0].handles[1]", 21, []string{"must be a string", "an integer (7)"}}}},
		{"table expected", "name = \"x\"\nserver = 1\n", []wantProblem{{"server", 2, []string{"must be a table"}}}},
		{"array of tables expected", "name = \"x\"\nevents = \"OrderPlaced\"\n", []wantProblem{{"events", 2, []string{"must be an array of tables", "[[events]]"}}}},
		{"duration as integer", baseDomain + handlerAt18 + "retry_delay = 5\n", []wantProblem{{"handlers[0].retry_delay", 21, []string{"duration string", `retry_delay = "5s"`}}}},
		{"pm sequential_by field name", baseDomain + "[[process_managers]]\nname = \"P\"\nsequential_by = \"order_id\"\nhandles = []\n",
			[]wantProblem{{"process_managers[0].sequential_by", 19, []string{"true or false"}}, {"process_managers[0].handles", 20, []string{"is empty"}}}},
		// Durations and timing.
		{"heartbeat equal to TTL", "name = \"x\"\n[server.partitioning]\nlease_ttl_ms = 5000\nheartbeat_interval_seconds = 5\n",
			[]wantProblem{{"server.partitioning.heartbeat_interval_seconds", 4, []string{"5s is not below the lease TTL of 5s", "lease_ttl_ms / 5000 = 1"}}}},
		{"heartbeat above default TTL", "name = \"x\"\n[server.partitioning]\nheartbeat_interval_seconds = 20.0\n",
			[]wantProblem{{"server.partitioning.heartbeat_interval_seconds", 3, []string{"not below the lease TTL of 15s"}}}},
		{"zero max_unacked", "name = \"x\"\n[server.partitioning]\nmax_unacked = 0\n", []wantProblem{{"server.partitioning.max_unacked", 3, []string{"must be 1 or more, got 0", "in flight"}}}},
		{"unknown keyspace_notifications", "name = \"x\"\n[server.partitioning]\nkeyspace_notifications = \"yes\"\n", []wantProblem{{"server.partitioning.keyspace_notifications", 3, []string{`is "yes"`, `"auto"`, `"use"`, `"off"`}}}},
		{"zero sweep interval", "name = \"x\"\n[server.partitioning]\nsweep_interval_seconds = 0\n", []wantProblem{{"server.partitioning.sweep_interval_seconds", 3, []string{"0"}}}},
		{"zero TTL", "name = \"x\"\n[server.partitioning]\nlease_ttl_ms = 0\n", []wantProblem{{"server.partitioning.lease_ttl_ms", 3, []string{"positive", "15000"}}}},
		{"negative reap", "name = \"x\"\n[server.partitioning]\nreap_idle_ms = -1\n", []wantProblem{{"server.partitioning.reap_idle_ms", 3, []string{"positive"}}}},
		{"zero poll", "name = \"x\"\n[server.partitioning]\npoll_interval_seconds = 0.0\n", []wantProblem{{"server.partitioning.poll_interval_seconds", 3, []string{"positive", "0.25"}}}},
		{"nan heartbeat", "name = \"x\"\n[server.partitioning]\nheartbeat_interval_seconds = nan\n", []wantProblem{{"server.partitioning.heartbeat_interval_seconds", 3, []string{"finite"}}}},
		{"inf poll", "name = \"x\"\n[server.partitioning]\npoll_interval_seconds = inf\n", []wantProblem{{"server.partitioning.poll_interval_seconds", 3, []string{"finite"}}}},
		{"sub-nanosecond heartbeat", "name = \"x\"\n[server.partitioning]\nheartbeat_interval_seconds = 1e-12\n", []wantProblem{{"server.partitioning.heartbeat_interval_seconds", 3, []string{"below a nanosecond"}}}},
		{"huge TTL", "name = \"x\"\n[server.partitioning]\nlease_ttl_ms = 9223372036854775807\n", []wantProblem{{"server.partitioning.lease_ttl_ms", 3, []string{"too long"}}}},
		{"negative warning", "name = \"x\"\n[server.partitioning]\nmax_partitions_warning = -1\n", []wantProblem{{"server.partitioning.max_partitions_warning", 3, []string{"0 (no warning)"}}}},
		{"bad retry delay", baseDomain + handlerAt18 + "retry_delay = \"1 second\"\n", []wantProblem{{"handlers[0].retry_delay", 21, []string{`"1 second" is not a duration`, `"500ms"`}}}},
		{"zero retry delay", baseDomain + handlerAt18 + "retry_delay = \"0s\"\n", []wantProblem{{"handlers[0].retry_delay", 21, []string{"must be positive"}}}},
		{"negative deliver timeout", baseDomain + handlerAt18 + "[handlers.deliver]\nexec = [\"./x\"]\ntimeout = \"-1s\"\n", []wantProblem{{"handlers[0].deliver.timeout", 23, []string{"must be positive"}}}},
		// Concurrency.
		{"zero instance cap", "name = \"x\"\n[server]\nmax_concurrent_handlers = 0\n", []wantProblem{{"server.max_concurrent_handlers", 3, []string{"positive", "remove the key"}}}},
		{"instance cap of the wrong type", "name = \"x\"\n[server]\nmax_concurrent_handlers = \"8\"\n", []wantProblem{{"server.max_concurrent_handlers", 3, nil}}},
		{"negative handler limit", baseDomain + handlerAt18 + "[handlers.deliver]\nexec = [\"./x\"]\nmax_concurrent = -1\n", []wantProblem{{"handlers[0].deliver.max_concurrent", 23, []string{"positive", "twice the cores"}}}},
		{"pm handler limit out of range", baseDomain + "[[process_managers]]\nname = \"P\"\n[process_managers.deliver]\nhttp = \"http://h/x\"\nmax_concurrent = 99999999999\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"order_id\"\n",
			[]wantProblem{{"process_managers[0].deliver.max_concurrent", 21, []string{"out of range"}}}},
		// Retries.
		{"max_retries zero", baseDomain + handlerAt18 + "max_retries = 0\n", []wantProblem{{"handlers[0].max_retries", 21, []string{"at least 1", "got 0"}}}},
		{"max_retries negative on a pm", baseDomain + "[[process_managers]]\nname = \"P\"\nmax_retries = -2\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"order_id\"\n",
			[]wantProblem{{"process_managers[0].max_retries", 19, []string{"at least 1", "got -2"}}}},
		// Declarations.
		{"event in two categories", baseDomain + "\n[[events]]\nname = \"OrderPlaced\"\ncategory = \"sales\"\n",
			[]wantProblem{{"events[2].category", 20, []string{`event "OrderPlaced" is already declared in category "order" (events[0], line 3)`}}}},
		{"event declared twice", baseDomain + "\n[[events]]\nname = \"OrderPlaced\"\ncategory = \"order\"\n",
			[]wantProblem{{"events[2].name", 19, []string{`event "OrderPlaced" is declared twice (first at events[0], line 3)`}}}},
		{"command named like an event", baseDomain + "\n[[commands]]\nname = \"OrderPlaced\"\ncategory = \"order_command\"\n",
			[]wantProblem{{"commands[1].name", 19, []string{`"OrderPlaced" is already declared as an event`}}}},
		{"category with colon", "name = \"x\"\n[[events]]\nname = \"E\"\ncategory = \"shop:order\"\n",
			[]wantProblem{{"events[0].category", 4, []string{"contains ':'", `"shop_order"`}}}},
		{"category with space", "name = \"x\"\n[[commands]]\nname = \"C\"\ncategory = \"order\tcmd\"\n",
			[]wantProblem{{"commands[0].category", 4, []string{"white space", `"order_cmd"`}}}},
		{"category sentinel", "name = \"x\"\n[[events]]\nname = \"E\"\ncategory = \"__order__\"\n",
			[]wantProblem{{"events[0].category", 4, []string{"reserved __name__ form"}}}},
		{"category empty", "name = \"x\"\n[[events]]\nname = \"E\"\ncategory = \"\"\n",
			[]wantProblem{{"events[0].category", 4, []string{"category is empty"}}}},
		{"event without category", "name = \"x\"\n[[events]]\nname = \"E\"\n",
			[]wantProblem{{"events[0].category", 2, []string{"missing", "category"}}}},
		{"duplicate field", "name = \"x\"\n[[events]]\nname = \"E\"\ncategory = \"c\"\nfields = [\"a\", \"a\"]\n",
			[]wantProblem{{"events[0].fields[1]", 5, []string{`field "a" is listed twice`}}}},
		{"missing name", "[broker]\nkind = \"inline\"\n", []wantProblem{{"name", 0, []string{"missing", `name = "shop"`}}}},
		// Handlers.
		{"handler names undeclared event", baseDomain + "[[handlers]]\nname = \"P\"\nhandles = [\"OrderPlaced\", \"OrderShiped\"]\n",
			[]wantProblem{{"handlers[0].handles[1]", 19, []string{`"OrderShiped" is not a declared event`, `did you mean "OrderShipped"`}}}},
		{"handler names unknown event with no close match", baseDomain + "[[handlers]]\nname = \"P\"\nhandles = [\"Refunded\"]\n",
			[]wantProblem{{"handlers[0].handles[0]", 19, []string{`"Refunded" is not a declared event`, "[[events]]"}}}},
		{"event handler names a command", baseDomain + "[[handlers]]\nname = \"P\"\nhandles = [\"PlaceOrder\"]\n",
			[]wantProblem{{"handlers[0].handles[0]", 19, []string{"is a command", `kind = "command"`}}}},
		{"command handler names an event", baseDomain + "[[handlers]]\nname = \"P\"\nkind = \"command\"\nhandles = [\"OrderPlaced\"]\n",
			[]wantProblem{{"handlers[0].handles[0]", 20, []string{"is an event", "command handler"}}}},
		{"unknown handler kind", baseDomain + handlerAt18 + "kind = \"events\"\n", []wantProblem{{"handlers[0].kind", 21, []string{`unknown handler kind "events"`, `"event"`, `"command"`}}}},
		{"part_of with colon", baseDomain + handlerAt18 + "part_of = \"a:b\"\n", []wantProblem{{"handlers[0].part_of", 21, []string{"contains ':'"}}}},
		{"empty sequential_by", baseDomain + handlerAt18 + "sequential_by = \"\"\n", []wantProblem{{"handlers[0].sequential_by", 21, []string{"is empty", "remove the key"}}}},
		{"handler without handles", baseDomain + "[[handlers]]\nname = \"P\"\n", []wantProblem{{"handlers[0].handles", 17, []string{"missing"}}}},
		{"handler with empty handles", baseDomain + "[[handlers]]\nname = \"P\"\nhandles = []\n", []wantProblem{{"handlers[0].handles", 19, []string{"is empty"}}}},
		{"handler lists a type twice", baseDomain + "[[handlers]]\nname = \"P\"\nhandles = [\"OrderPlaced\", \"OrderPlaced\"]\n", []wantProblem{{"handlers[0].handles[1]", 19, []string{"listed twice"}}}},
		{"duplicate handler names", baseDomain + handlerAt18 + handlerAt18,
			[]wantProblem{{"handlers[1].name", 23, []string{`"Projector" is already the name of a handler (handlers[0], line 18)`}}}},
		{"handler and pm share a name", baseDomain + handlerAt18 + "[[process_managers]]\nname = \"Projector\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"order_id\"\n",
			[]wantProblem{{"process_managers[0].name", 22, []string{"already the name of a handler"}}}},
		// Batches.
		{"batch_max zero", baseDomain + handlerAt18 + "batch_max = 0\n", []wantProblem{{"handlers[0].batch_max", 21, []string{"must be 1 (one event per call, the default) or more, got 0", "up to 1000"}}}},
		{"batch_max above the most", baseDomain + handlerAt18 + "batch_max = 1001\n", []wantProblem{{"handlers[0].batch_max", 21, []string{"1001 is out of range", "at most 1000"}}}},
		{"batch_max as string", baseDomain + handlerAt18 + "batch_max = \"32\"\n", []wantProblem{{"handlers[0].batch_max", 21, []string{"must be an integer", "batch_max = 32, without quotes"}}}},
		{"batch_wait not a duration", baseDomain + handlerAt18 + "batch_max = 32\nbatch_wait = \"soon\"\n", []wantProblem{{"handlers[0].batch_wait", 22, []string{`"soon" is not a duration`, `"20ms"`}}}},
		{"batch_wait as integer", baseDomain + handlerAt18 + "batch_max = 32\nbatch_wait = 20\n", []wantProblem{{"handlers[0].batch_wait", 22, []string{"must be a duration string", "in quotes with a unit"}}}},
		{"batch_wait negative", baseDomain + handlerAt18 + "batch_max = 32\nbatch_wait = \"-5ms\"\n", []wantProblem{{"handlers[0].batch_wait", 22, []string{"is negative", `"0s"`}}}},
		{"batch_wait without batch_max", baseDomain + handlerAt18 + "batch_wait = \"20ms\"\n", []wantProblem{{"handlers[0].batch_wait", 21, []string{"waits 20ms to fill batches, but batch_max is 1", "set batch_max above 1, or remove batch_wait"}}}},
		{"batch_wait with batch_max 1", baseDomain + handlerAt18 + "batch_max = 1\nbatch_wait = \"20ms\"\n", []wantProblem{{"handlers[0].batch_wait", 22, []string{"batch_max is 1"}}}},
		{"batch_wait with a bad batch_max is not reported twice", baseDomain + handlerAt18 + "batch_max = -3\nbatch_wait = \"20ms\"\n", []wantProblem{{"handlers[0].batch_max", 21, []string{"got -3"}}}},
		{"batch_max on a command handler", baseDomain + "[[handlers]]\nname = \"P\"\nkind = \"command\"\nhandles = [\"PlaceOrder\"]\nbatch_max = 10\nbatch_wait = \"5ms\"\n",
			[]wantProblem{
				{"handlers[0].batch_max", 21, []string{"applies to event handlers only", "a command handler dispatches one command at a time", "remove batch_max"}},
				{"handlers[0].batch_wait", 22, []string{"applies to event handlers only", "remove batch_wait"}},
			}},
		{"batch_max on a process manager", baseDomain + "[[process_managers]]\nname = \"P\"\nbatch_max = 10\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"order_id\"\n",
			[]wantProblem{{"process_managers[0].batch_max", 19, []string{"applies to event handlers only", "a process manager takes its events one at a time", "remove batch_max"}}}},
		// Deliver.
		{"deliver both", baseDomain + handlerAt18 + "[handlers.deliver]\nhttp = \"http://h/x\"\nexec = [\"./x\"]\n", []wantProblem{{"handlers[0].deliver", 21, []string{"both http and exec", "keep one"}}}},
		{"deliver neither", baseDomain + handlerAt18 + "[handlers.deliver]\ntimeout = \"5s\"\n", []wantProblem{{"handlers[0].deliver", 21, []string{"neither http nor exec", "remove the deliver table"}}}},
		{"deliver bad url", baseDomain + handlerAt18 + "[handlers.deliver]\nhttp = \"ftp://h/x\"\n", []wantProblem{{"handlers[0].deliver.http", 22, []string{"not an http:// or https:// URL"}}}},
		{"deliver empty exec", baseDomain + handlerAt18 + "[handlers.deliver]\nexec = []\n", []wantProblem{{"handlers[0].deliver.exec", 22, []string{"needs a program"}}}},
		{"deliver secret value instead of name", baseDomain + handlerAt18 + "[handlers.deliver]\nhttp = \"http://h/x\"\nsigning_key_env = \"hunter 2\"\n",
			[]wantProblem{{"handlers[0].deliver.signing_key_env", 23, []string{"not an environment variable name"}}}},
		{"deliver old signing key name", baseDomain + handlerAt18 + "[handlers.deliver]\nhttp = \"http://h/x\"\nsigning_secret_env = \"K\"\n",
			[]wantProblem{{"handlers[0].deliver.signing_secret_env", 23, []string{"replaced by signing_key_env", "update the receivers"}}}},
		{"deliver key from env and file", baseDomain + handlerAt18 + "[handlers.deliver]\nhttp = \"http://h/x\"\nsigning_key_env = \"K\"\nsigning_key_file = \"k.key\"\n",
			[]wantProblem{{"handlers[0].deliver.signing_key_file", 24, []string{"signing key twice"}}}},
		{"deliver previous key alone", baseDomain + handlerAt18 + "[handlers.deliver]\nhttp = \"http://h/x\"\nsigning_previous_key_env = \"K\"\n",
			[]wantProblem{{"handlers[0].deliver", 21, []string{"previous signing key but no signing key"}}}},
		{"deliver signed exec", baseDomain + handlerAt18 + "[handlers.deliver]\nexec = [\"./x\"]\nsigning_key_file = \"k.key\"\n",
			[]wantProblem{{"handlers[0].deliver", 21, []string{"exec handlers are not signed"}}}},
		{"sql sink and http", baseDomain + handlerAt18 + "[handlers.deliver]\nhttp = \"http://h/x\"\n[handlers.deliver.sql]\ndsn_env = \"DB\"\nstatement = \"SELECT 1\"\n",
			[]wantProblem{{"handlers[0].deliver", 21, []string{"both http and a sql table", "keep one"}}}},
		{"sql sink with the dsn itself", baseDomain + handlerAt18 + "[handlers.deliver.sql]\ndsn = \"postgres://app:hunter2@db/app\"\nstatement = \"SELECT 1\"\n",
			[]wantProblem{{"handlers[0].deliver.sql.dsn", 22, []string{"password in domain.toml", "dsn_env", "dsn_file"}}}},
		{"sql sink dsn_env holds a dsn", baseDomain + handlerAt18 + "[handlers.deliver.sql]\ndsn_env = \"postgres://app:hunter2@db/app\"\nstatement = \"SELECT 1\"\n",
			[]wantProblem{{"handlers[0].deliver.sql.dsn_env", 22, []string{"not an environment variable name", "not the DSN"}}}},
		{"sql sink names no database", baseDomain + handlerAt18 + "[handlers.deliver.sql]\nstatement = \"SELECT 1\"\n",
			[]wantProblem{{"handlers[0].deliver.sql", 21, []string{"names no database", "dsn_env"}}}},
		{"sql sink dsn twice", baseDomain + handlerAt18 + "[handlers.deliver.sql]\ndsn_env = \"DB\"\ndsn_file = \"db.dsn\"\nstatement = \"SELECT 1\"\n",
			[]wantProblem{{"handlers[0].deliver.sql.dsn_file", 23, []string{"DSN twice"}}}},
		{"sql sink without statement", baseDomain + handlerAt18 + "[handlers.deliver.sql]\ndsn_env = \"DB\"\n",
			[]wantProblem{{"handlers[0].deliver.sql", 21, []string{"has no statement", "INSERT INTO"}}}},
		{"sql sink empty statement", baseDomain + handlerAt18 + "[handlers.deliver.sql]\ndsn_env = \"DB\"\nstatement = \"\"\n",
			[]wantProblem{{"handlers[0].deliver.sql.statement", 23, []string{"is empty"}}}},
		{"sql sink bad inbox table", baseDomain + handlerAt18 + "[handlers.deliver.sql]\ndsn_env = \"DB\"\nstatement = \"SELECT 1\"\ninbox_table = \"Inbox\"\n",
			[]wantProblem{{"handlers[0].deliver.sql.inbox_table", 24, []string{"not a lower-case SQL identifier"}}}},
		{"sql sink signed", baseDomain + handlerAt18 + "[handlers.deliver]\nsigning_key_env = \"K\"\n[handlers.deliver.sql]\ndsn_env = \"DB\"\nstatement = \"SELECT 1\"\n",
			[]wantProblem{{"handlers[0].deliver", 21, []string{"sql sink sends none"}}}},
		{"pm deliver both", baseDomain + "[[process_managers]]\nname = \"P\"\n[process_managers.deliver]\nhttp = \"http://h/x\"\nexec = [\"./x\"]\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"order_id\"\n",
			[]wantProblem{{"process_managers[0].deliver", 19, []string{"both http and exec"}}}},
		// Process managers and correlate.
		{"correlate integer", baseDomain + "[[process_managers]]\nname = \"P\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = 42\n",
			[]wantProblem{{"process_managers[0].handles[0].correlate", 21, []string{"not an integer (42)", `correlate = { order_id = "order_ref" }`}}}},
		{"correlate two entries", baseDomain + "[[process_managers]]\nname = \"P\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = { a = \"b\", c = \"d\" }\n",
			[]wantProblem{{"process_managers[0].handles[0].correlate", 21, []string{"2 entries, want exactly one"}}}},
		{"correlate table value not a string", baseDomain + "[[process_managers]]\nname = \"P\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = { order_id = 1 }\n",
			[]wantProblem{{"process_managers[0].handles[0].correlate", 21, []string{"an integer (1)"}}}},
		{"correlate empty", baseDomain + "[[process_managers]]\nname = \"P\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"\"\n",
			[]wantProblem{{"process_managers[0].handles[0].correlate", 21, []string{"correlate is empty"}}}},
		{"correlate missing", baseDomain + "[[process_managers]]\nname = \"P\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\n",
			[]wantProblem{{"process_managers[0].handles[0].correlate", 19, []string{"missing"}}}},
		{"pm handles a command", baseDomain + "[[process_managers]]\nname = \"P\"\n[[process_managers.handles]]\nevent = \"PlaceOrder\"\ncorrelate = \"order_id\"\n",
			[]wantProblem{{"process_managers[0].handles[0].event", 20, []string{"is a command", "process managers handle events only"}}}},
		{"pm without handles", baseDomain + "[[process_managers]]\nname = \"P\"\n", []wantProblem{{"process_managers[0].handles", 17, []string{"missing"}}}},
		{"second pm indexes from its own header", baseDomain + "[[process_managers]]\nname = \"P\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"order_id\"\n" +
			"[[process_managers]]\nname = \"Q\"\n[[process_managers.handles]]\nevent = \"OrderPlaced\"\ncorrelate = \"order_id\"\n[[process_managers.handles]]\nevent = \"Nope\"\ncorrelate = \"order_id\"\n",
			[]wantProblem{{"process_managers[1].handles[1].event", 28, []string{`"Nope" is not a declared event`}}}},
		{"inline array of handles", baseDomain + "[[process_managers]]\nname = \"P\"\nhandles = [\n  { event = \"OrderPlaced\", correlate = \"order_id\" },\n  { event = \"OrderPlaced\", correlate = 3 },\n]\n",
			[]wantProblem{{"process_managers[0].handles[1].correlate", 21, []string{"not an integer (3)"}}}},
		// Broker, lanes, outbox.
		{"unknown broker", "name = \"x\"\n[broker]\nkind = \"kafka\"\n", []wantProblem{{"broker.kind", 3, []string{`unknown broker kind "kafka"`, `"redis"`, `"inline"`}}}},
		{"broker url scheme", "name = \"x\"\n[broker]\nurl = \"http://127.0.0.1:6379\"\n", []wantProblem{{"broker.url", 3, []string{`scheme "http"`, "redis://"}}}},
		{"broker url without host", "name = \"x\"\n[broker]\nurl = \"redis://\"\n", []wantProblem{{"broker.url", 3, []string{"no host"}}}},
		{"negative min_replicas", "name = \"x\"\n[broker]\nmin_replicas = -1\n", []wantProblem{{"broker.min_replicas", 3, []string{"must be 0", "got -1"}}}},
		{"min_replicas as string", "name = \"x\"\n[broker]\nmin_replicas = \"1\"\n", []wantProblem{{"broker.min_replicas", 3, []string{"must be an integer"}}}},
		{"zero replica timeout", "name = \"x\"\n[broker]\nreplica_timeout_ms = 0\n", []wantProblem{{"broker.replica_timeout_ms", 3, []string{"positive number of milliseconds", "1000"}}}},
		{"replica timeout not below the lease TTL", "name = \"x\"\n[broker]\nreplica_timeout_ms = 3000\n[server.partitioning]\nlease_ttl_ms = 3000\n",
			[]wantProblem{{"broker.replica_timeout_ms", 3, []string{"not below the lease TTL", "lease_ttl_ms = 3000"}}}},
		{"inline broker ignores url", "name = \"x\"\n[broker]\nkind = \"inline\"\nurl = \"whatever\"\nbogus = 1\n", []wantProblem{{"broker.bogus", 5, []string{"unknown key"}}}},
		{"backfill suffix dlq", "name = \"x\"\n[server.priority_lanes]\nbackfill_suffix = \"dlq\"\n", []wantProblem{{"server.priority_lanes.backfill_suffix", 3, []string{"dead-letter token"}}}},
		{"backfill suffix colon", "name = \"x\"\n[server.priority_lanes]\nbackfill_suffix = \"a:b\"\n", []wantProblem{{"server.priority_lanes.backfill_suffix", 3, []string{"':'"}}}},
		{"backfill suffix sentinel", "name = \"x\"\n[server.priority_lanes]\nbackfill_suffix = \"__slow__\"\n", []wantProblem{{"server.priority_lanes.backfill_suffix", 3, []string{"__name__"}}}},
		{"backfill suffix empty", "name = \"x\"\n[server.priority_lanes]\nbackfill_suffix = \"\"\n", []wantProblem{{"server.priority_lanes.backfill_suffix", 3, []string{"is empty", "default"}}}},
		{"threshold out of range", "name = \"x\"\n[server.priority_lanes]\nthreshold = 99999999999\n", []wantProblem{{"server.priority_lanes.threshold", 3, []string{"out of range"}}}},
		{"outbox without dsn", "name = \"x\"\n[outbox]\n", []wantProblem{{"outbox.dsn", 2, []string{"missing", EnvOutboxDSN, "remove [outbox]"}}}},
		{"outbox bad scheme", "name = \"x\"\n[outbox]\ndsn = \"mysql://u:pw@h/db\"\n", []wantProblem{{"outbox.dsn", 3, []string{"sqlite://", "postgres://"}}}},
		// Many at once, in line order.
		{"all problems collected in line order", baseDomain + "[[handlers]]\nname = \"P\"\nkind = \"x\"\nmax_retries = 0\nretry_delay = \"soon\"\nhandles = [\"Nope\"]\n[server.partitioning]\nlease_ttl_ms = -5\n",
			[]wantProblem{
				{"handlers[0].kind", 19, []string{"unknown handler kind"}},
				{"handlers[0].max_retries", 20, []string{"at least 1"}},
				{"handlers[0].retry_delay", 21, []string{"not a duration"}},
				{"server.partitioning.lease_ttl_ms", 24, []string{"positive"}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problemsOf(t, tt.toml)
			type pl struct {
				Path string
				Line int
			}
			var wantPL, gotPL []pl
			for _, w := range tt.want {
				wantPL = append(wantPL, pl{w.Path, w.Line})
			}
			for _, g := range got {
				gotPL = append(gotPL, pl{g.Path, g.Line})
			}
			if diff := cmp.Diff(wantPL, gotPL); diff != "" {
				t.Fatalf("problem paths/lines mismatch (-want +got):\n%s\nproblems:\n%s", diff, (&Error{File: "domain.toml", Problems: got}).Error())
			}
			for i, w := range tt.want {
				for _, frag := range w.Contains {
					if !strings.Contains(got[i].Message, frag) {
						t.Errorf("problem %d message %q does not contain %q", i, got[i].Message, frag)
					}
				}
				if strings.ContainsAny(got[i].Message, "\n\r") {
					t.Errorf("problem %d message spans lines: %q", i, got[i].Message)
				}
			}
		})
	}
}

func TestConfigErrorFormat(t *testing.T) {
	err := &Error{File: "d.toml", Problems: []Problem{
		{Path: "handlers[1].deliver.timeout", Line: 12, Message: "must be positive"},
		{Path: "name", Message: "missing"},
		{Line: 3, Message: "TOML syntax error: x"},
		{Message: "cannot read"},
	}}
	want := "d.toml:12: handlers[1].deliver.timeout: must be positive\n" +
		"d.toml: name: missing\n" +
		"d.toml:3: TOML syntax error: x\n" +
		"d.toml: cannot read"
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("Error() mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.toml")
	_, err := Load(path)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Load: error %T (%v), want *Error", err, err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(err, fs.ErrNotExist) = false, want true")
	}
	if want := path + ": the config file does not exist"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Error() = %q, want prefix %q", err.Error(), want)
	}
}

func TestLoadConfigInvalidFiles(t *testing.T) {
	// Every testdata/invalid file fails either the parser or InitDomain with a problem
	// naming the file; the goldens of the CLI pin the exact text.
	t.Setenv(EnvRedisURL, "")
	t.Setenv(EnvOutboxDSN, "")
	files, err := filepath.Glob(filepath.Join(repoTestdata, "invalid", "*.toml"))
	if err != nil || len(files) < 10 {
		t.Fatalf("want at least 10 testdata/invalid files, got %d (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := Load(f)
			if err == nil {
				_, err = cfg.InitDomain()
			}
			var ce *Error
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("got %v, want a *Error with problems", err)
			}
			for _, line := range strings.Split(ce.Error(), "\n") {
				if !strings.HasPrefix(line, f+":") {
					t.Errorf("problem line %q does not start with the file name", line)
				}
			}
		})
	}
}

func TestConfigDomain(t *testing.T) {
	cfg := mustParse(t, baseDomain+`
[server.priority_lanes]
backfill_suffix = "slow"

[[handlers]]
name = "Projector"
part_of = "order"
handles = ["OrderPlaced", "OrderShipped"]
sequential_by = "client_id"
max_retries = 7
retry_delay = "250ms"

[[handlers]]
name = "Placer"
kind = "command"
handles = ["PlaceOrder"]

[[process_managers]]
name = "Fulfillment"
sequential_by = true
[[process_managers.handles]]
event = "OrderPlaced"
correlate = { order = "order_id" }
start = true
`)
	got, err := cfg.Domain()
	if err != nil {
		t.Fatalf("Domain: %v", err)
	}
	want := engine.NewDomain("shop").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "client_id"}}).
		AddEvent(engine.EventType{Name: "OrderShipped", Category: "order", Fields: []string{"order_id", "client_id"}}).
		AddCommand(engine.CommandType{Name: "PlaceOrder", Category: "order_command", Fields: []string{"order_id", "client_id"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced", "OrderShipped"},
			SequentialBy: "client_id", MaxRetries: 7, RetryDelay: 250 * time.Millisecond}).
		AddHandler(engine.Handler{Name: "Placer", Kind: engine.CommandHandlerKind, Handles: []string{"PlaceOrder"}, MaxRetries: 3, RetryDelay: time.Second}).
		AddProcessManager(engine.ProcessManager{Name: "Fulfillment", SequentialBy: true, MaxRetries: 3, RetryDelay: time.Second,
			Handles: []engine.PMHandle{{Event: "OrderPlaced", Correlate: engine.Correlate{PMField: "order", EventField: "order_id"}, Start: true}}})
	want.BackfillSuffix = "slow"
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(engine.Domain{}), cmpopts.IgnoreFields(engine.Handler{}, "Func"), cmpopts.IgnoreFields(engine.ProcessManager{}, "Func")); diff != "" {
		t.Errorf("Domain() mismatch (-want +got):\n%s", diff)
	}
	if got.Initialized() {
		t.Errorf("Domain() returned an initialised domain; it must not call Init")
	}
}

func TestConfigDomainRejectsBadKind(t *testing.T) {
	cfg := &Config{Name: "x", Handlers: []HandlerConfig{{Name: "h", Kind: engine.HandlerKind(9)}}}
	if _, err := cfg.Domain(); err == nil || !strings.Contains(err.Error(), "unknown kind") {
		t.Errorf("Domain() error = %v, want an unknown kind error", err)
	}
	if _, err := (*Config)(nil).Domain(); err == nil {
		t.Errorf("nil Config: Domain() error = nil, want an error")
	}
}

func TestInitDomain(t *testing.T) {
	t.Run("example", func(t *testing.T) {
		cfg, err := Load(filepath.Join(repoTestdata, "domain.toml"))
		if err != nil {
			t.Fatal(err)
		}
		d, err := cfg.InitDomain()
		if err != nil {
			t.Fatalf("InitDomain: %v", err)
		}
		want := map[string]string{"order": "client_id", "payment": "order_ref", "shipping": "order_id"}
		if diff := cmp.Diff(want, d.PartitionKeys()); diff != "" {
			t.Errorf("PartitionKeys mismatch (-want +got):\n%s", diff)
		}
		if f, ok := d.PartitionField("order"); !ok || f != "client_id" {
			t.Errorf("PartitionField(order) = %q, %v; want client_id, true", f, ok)
		}
	})
	t.Run("inline broker is a no-op", func(t *testing.T) {
		cfg := mustParse(t, baseDomain+handlerAt18+"sequential_by = \"client_id\"\n[broker]\nkind = \"inline\"\n")
		d, err := cfg.InitDomain()
		if err != nil {
			t.Fatalf("InitDomain: %v", err)
		}
		if _, ok := d.PartitionField("order"); ok {
			t.Errorf("PartitionField(order) active on the inline broker, want inactive")
		}
	})
	t.Run("registration problems are placed in the file", func(t *testing.T) {
		cfg := mustParse(t, baseDomain+handlerAt18+"sequential_by = \"client_id\"\n"+
			"\n[[handlers]]\nname = \"Audit\"\nhandles = [\"OrderPlaced\"]\nsequential_by = \"order_id\"\n"+
			"\n[[handlers]]\nname = \"Broken\"\nhandles = [\"OrderShipped\"]\nsequential_by = \"total\"\n")
		_, err := cfg.InitDomain()
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("InitDomain: error %T (%v), want *Error", err, err)
		}
		var iue *engine.IncorrectUsageError
		if !errors.As(err, &iue) {
			t.Errorf("errors.As(err, *IncorrectUsageError) = false, want true")
		}
		type pl struct {
			Path string
			Line int
		}
		var got []pl
		for _, p := range ce.Problems {
			got = append(got, pl{p.Path, p.Line})
		}
		want := []pl{{"handlers[2]", 28}, {"handlers[1]", 23}, {"handlers[2]", 28}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("problem places mismatch (-want +got):\n%s\n%v", diff, err)
		}
	})
}

func TestConfiguredBroker(t *testing.T) {
	tests := []struct {
		kind string
		want bool
	}{
		{engine.BrokerKindRedis, true},
		{engine.BrokerKindRedisCluster, true},
		{engine.BrokerKindInline, false},
		{"kafka", false},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			b := ConfiguredBroker(tt.kind)
			if b.Kind() != tt.kind {
				t.Errorf("Kind() = %q, want %q", b.Kind(), tt.kind)
			}
			if got := b.Has(engine.StreamPartitioning); got != tt.want {
				t.Errorf("Has(StreamPartitioning) = %v, want %v", got, tt.want)
			}
			if b.Has(engine.Capability("OTHER")) {
				t.Errorf("Has(OTHER) = true, want false")
			}
		})
	}
}

func TestDecodeCorrelate(t *testing.T) {
	// What BurntSushi/toml decodes the two forms of correlate into.
	var doc map[string]any
	if _, err := toml.Decode(`a = "order_id"`+"\n"+`b = { order_id = "order_ref" }`, &doc); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]engine.Correlate{
		"a": {PMField: "order_id", EventField: "order_id"},
		"b": {PMField: "order_id", EventField: "order_ref"},
	} {
		got, err := decodeCorrelate(doc[key])
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: mismatch (-want +got):\n%s", key, diff)
		}
	}
	for _, bad := range []string{`a = 1`, `a = ["x"]`, `a = {}`, `a = { x = "" }`, `a = true`} {
		var doc map[string]any
		if _, err := toml.Decode(bad, &doc); err != nil {
			t.Fatal(err)
		}
		if _, err := decodeCorrelate(doc["a"]); err == nil {
			t.Errorf("decodeCorrelate(%q): no error, want one", bad)
		}
	}
}

func TestPartitioningConfigValidate(t *testing.T) {
	ok := DefaultPartitioningConfig()
	tests := []struct {
		name   string
		mutate func(*PartitioningConfig)
		want   string // "" for valid
	}{
		{"defaults", func(*PartitioningConfig) {}, ""},
		{"zero ttl", func(p *PartitioningConfig) { p.LeaseTTL = 0 }, "lease TTL"},
		{"zero heartbeat", func(p *PartitioningConfig) { p.HeartbeatInterval = 0 }, "heartbeat interval must be positive"},
		{"heartbeat equals ttl", func(p *PartitioningConfig) { p.HeartbeatInterval = p.LeaseTTL }, "below the lease TTL"},
		{"zero poll", func(p *PartitioningConfig) { p.PollInterval = 0 }, "poll interval"},
		{"negative reap", func(p *PartitioningConfig) { p.ReapIdle = -time.Second }, "reap idle"},
		{"negative warning", func(p *PartitioningConfig) { p.MaxPartitionsWarning = -1 }, "max partitions warning"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok
			tt.mutate(&p)
			err := p.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestScanKeyLines(t *testing.T) {
	src := `# comment with [brackets] and key = "value"
name = "shop" # trailing
"quoted key" = 1
dotted.key.path = 2

[server.partitioning]
lease_ttl_ms = 15000

[[handlers]]
name = "a"
handles = [
  "X",   # a comment inside the array
  "Y",
]
text = """
not_a_key = 1
[not_a_table]
"""
[handlers.deliver]
exec = ['./bin', "--flag=]"]

[[handlers]]
name = "b"

[[process_managers]]
[[process_managers.handles]]
correlate = { order_id = "order_ref" }
[[process_managers]]
[[process_managers.handles]]
[[process_managers.handles]]
event = "E"
`
	got := scanKeyLines(src)
	want := map[string]int{
		"name":                             2,
		`"quoted key"`:                     3,
		"dotted.key.path":                  4,
		"server":                           6,
		"server.partitioning":              6,
		"server.partitioning.lease_ttl_ms": 7,
		"handlers[0]":                      9,
		"handlers[0].name":                 10,
		"handlers[0].handles":              11,
		"handlers[0].handles[0]":           12,
		"handlers[0].handles[1]":           13,
		"handlers[0].text":                 15,
		"handlers[0].deliver":              19,
		"handlers[0].deliver.exec":         20,
		"handlers[0].deliver.exec[1]":      20,
		"handlers[1]":                      22,
		"handlers[1].name":                 23,
		"process_managers[0].handles[0]":   26,
		"process_managers[0].handles[0].correlate.order_id": 27,
		"process_managers[1]":                               28,
		"process_managers[1].handles[1]":                    30,
		"process_managers[1].handles[1].event":              31,
	}
	for k, line := range want {
		if got[k] != line {
			t.Errorf("line of %s = %d, want %d", k, got[k], line)
		}
	}
	for _, absent := range []string{"not_a_key", "not_a_table", "handlers[0].not_a_key", "handlers[0].not_a_table"} {
		if _, ok := got[absent]; ok {
			t.Errorf("scanner recorded %q from inside a multi-line string", absent)
		}
	}
	// Lookups fall back to the nearest ancestor.
	p := keyPath{}.key("handlers").index(1).key("deliver").key("timeout")
	if line := got.lookup(p); line != 22 {
		t.Errorf("lookup(%s) = %d, want 22 (the [[handlers]] header)", p, line)
	}
}

func TestLoadConfigReadsExampleFromSharedSchema(t *testing.T) {
	// The shared schema example, when present beside the repository, must parse too.
	path := filepath.Join("..", "..", "..", "shared", "examples", "domain.toml")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no shared example at %s", path)
	}
	t.Setenv(EnvRedisURL, "")
	t.Setenv(EnvOutboxDSN, "")
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("Load(shared example): %v", err)
	}
	if _, err := cfg.InitDomain(); err != nil {
		t.Fatalf("InitDomain(shared example): %v", err)
	}
}

// A Redis broker of a config advertises STREAM_PARTITIONING, so a
// sequential_by handler registers; a broker of an unknown kind does not.
func TestConfiguredBrokerRegistersSequentialHandlers(t *testing.T) {
	domain := func() *engine.Domain {
		return engine.NewDomain("x").
			AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id"}}).
			AddHandler(engine.Handler{Name: "P", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"}, SequentialBy: "client_id"})
	}
	if err := domain().Init(ConfiguredBroker(engine.BrokerKindRedis)); err != nil {
		t.Errorf("the configured redis broker: %v", err)
	}
	err := domain().Init(ConfiguredBroker("kafka"))
	if err == nil || !strings.Contains(err.Error(), `broker "kafka"`) || !strings.Contains(err.Error(), "STREAM_PARTITIONING") {
		t.Errorf("the configured broker of an unknown kind: %v, want it rejected for lacking STREAM_PARTITIONING", err)
	}
}

// A [handlers.deliver.sql] table decodes into the handler's SQL sink, with the default
// inbox table and its own concurrency default.
func TestParseConfigBatch(t *testing.T) {
	tests := []struct {
		name     string
		keys     string
		wantMax  int
		wantWait time.Duration
		batched  bool
	}{
		{"unset: one event per call", "", 0, 0, false},
		{"one", "batch_max = 1\n", 1, 0, false},
		{"a run of up to 32", "batch_max = 32\n", 32, 0, true},
		{"the most", "batch_max = 1000\n", 1000, 0, true},
		{"with a wait", "batch_max = 10\nbatch_wait = \"20ms\"\n", 10, 20 * time.Millisecond, true},
		{"an explicit zero wait", "batch_max = 10\nbatch_wait = \"0s\"\n", 10, 0, true},
		{"a zero wait without batch_max", "batch_wait = \"0s\"\n", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, baseDomain+handlerAt18+tt.keys)
			h := cfg.Handlers[0]
			if h.BatchMax != tt.wantMax || h.BatchWait != tt.wantWait || h.Batched() != tt.batched {
				t.Errorf("batch_max %d, batch_wait %v, batched %v; want %d, %v, %v", h.BatchMax, h.BatchWait, h.Batched(), tt.wantMax, tt.wantWait, tt.batched)
			}
			dom, err := cfg.Domain()
			if err != nil {
				t.Fatal(err)
			}
			if got := dom.Handlers[0]; got.BatchMax != tt.wantMax || got.BatchWait != tt.wantWait {
				t.Errorf("engine handler: BatchMax %d, BatchWait %v; want %d, %v", got.BatchMax, got.BatchWait, tt.wantMax, tt.wantWait)
			}
			if _, err := cfg.InitDomain(); err != nil {
				t.Errorf("InitDomain: %v", err)
			}
		})
	}
}

func TestParseConfigSQLSink(t *testing.T) {
	cfg := mustParse(t, baseDomain+handlerAt18+`[handlers.deliver.sql]
dsn_env = "ORDERS_DB"
statement = "INSERT INTO orders(id) VALUES ($1::jsonb->>'order_id') ON CONFLICT DO NOTHING"
`)
	dc := cfg.Handlers[0].Deliver
	want := &SQLSinkConfig{DSNEnv: "ORDERS_DB", Table: DefaultInboxTable,
		Statement: "INSERT INTO orders(id) VALUES ($1::jsonb->>'order_id') ON CONFLICT DO NOTHING"}
	if diff := cmp.Diff(want, dc.SQL); diff != "" {
		t.Errorf("sql sink (-want +got):\n%s", diff)
	}
	if dc.Mode() != "sql" || dc.Limit() != DefaultSQLConcurrency {
		t.Errorf("mode %q, limit %d; want sql, %d", dc.Mode(), dc.Limit(), DefaultSQLConcurrency)
	}
	cfg = mustParse(t, baseDomain+handlerAt18+"[handlers.deliver.sql]\ndsn_file = \"secrets/orders.dsn\"\nstatement = \"SELECT 1\"\ninbox_table = \"orders_inbox\"\n")
	if sc := cfg.Handlers[0].Deliver.SQL; sc.DSNFile != "secrets/orders.dsn" || sc.Table != "orders_inbox" {
		t.Errorf("sql sink %+v, want the dsn file and the inbox table given", sc)
	}
}
