package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
)

// Environment variables that override domain.toml. They let secrets (a Redis password, a
// database DSN) stay out of the file. An empty value counts as unset.
const (
	// EnvRedisURL overrides [broker] url.
	EnvRedisURL = "SEQCTL_REDIS_URL"
	// EnvOutboxDSN overrides [outbox] dsn. It does not create the [outbox] table: the relay
	// runs only when the file has one.
	EnvOutboxDSN = "SEQCTL_OUTBOX_DSN"
)

// Defaults of domain.toml keys that have no engine-wide default elsewhere.
const (
	configDefaultRedisURL       = "redis://127.0.0.1:6379/0"
	configDefaultDeliverTimeout = 10 * time.Second
)

// Config is a parsed and validated domain.toml: the declared events, commands, handlers
// and process managers, how each handler is delivered, and the server's tuning. Build it
// with Load or Parse (which apply every default and check every value), then
// call Domain or InitDomain. Key names are fixed by the schema (see testdata/domain.toml).
type Config struct {
	// File is the name the config was parsed under (the path, for Load). Problems
	// found later, by InitDomain, are reported against it.
	File string
	// Name is the bounded context (name).
	Name   string
	Broker BrokerConfig
	Server ServerConfig
	// Outbox is nil when the file has no [outbox] table; the relay runs only when it is set.
	Outbox *OutboxConfig
	// Events are the [[events]] tables, in file order.
	Events []TypeConfig
	// Commands are the [[commands]] tables, in file order.
	Commands []TypeConfig
	// Handlers are the [[handlers]] tables, in file order.
	Handlers []HandlerConfig
	// ProcessManagers are the [[process_managers]] tables, in file order.
	ProcessManagers []ProcessManagerConfig

	lines lineIndex // key path -> line, to place problems InitDomain finds
}

// BrokerConfig is the [broker] table.
type BrokerConfig struct {
	// Kind is "redis" (default; advertises STREAM_PARTITIONING), "redis-cluster" (the
	// same broker on a Redis Cluster) or "inline" (in process, for tests; sequential_by
	// is an accepted no-op there).
	Kind string
	// URL is the Redis URL (url; default "redis://127.0.0.1:6379/0"; SEQCTL_REDIS_URL
	// overrides it). For "redis-cluster" it is go-redis's cluster form, one seed address
	// in the authority and more as addr parameters:
	// redis://[user:password@]host:port?addr=host:port&addr=host:port (rediss:// for
	// TLS). Ignored by the inline broker.
	URL string
	// MinReplicas is how many Redis replicas must acknowledge a lease grant before its
	// partition is worked, an operator action before it is reported done, and an outbox
	// append before the relay marks the row PUBLISHED (min_replicas, default 0: no wait,
	// no cost). A shortfall is reported as an error, never passed over. Ignored by the
	// inline broker.
	MinReplicas int
	// ReplicaTimeout bounds each wait for replicas (replica_timeout_ms; default 0 means
	// 1000 ms, or lease_ttl_ms / 4 when that is shorter). It must be below lease_ttl_ms.
	ReplicaTimeout time.Duration
	// TLS is the [broker.tls] table: a private CA, a client certificate, the server name
	// and the lowest TLS version. Any setting turns TLS on, as a rediss:// URL does. The
	// files are read (and checked) when the config is parsed; relative paths are relative
	// to the working directory.
	TLS TLSConfig
}

// IsRedis reports whether the broker is Redis, one node or a cluster: the kinds that
// need a URL and a Redis connection.
func (b BrokerConfig) IsRedis() bool {
	return b.Kind == engine.BrokerKindRedis || b.Kind == engine.BrokerKindRedisCluster
}

// IsCluster reports whether the broker is a Redis Cluster.
func (b BrokerConfig) IsCluster() bool { return b.Kind == engine.BrokerKindRedisCluster }

// ClusterURLForm is the form of a Redis Cluster URL, for messages.
const ClusterURLForm = "redis://[user:password@]HOST:PORT?addr=HOST:PORT&addr=HOST:PORT (rediss:// for TLS)"

// ParseClusterURL parses a Redis Cluster URL (see BrokerConfig.URL) with go-redis's
// redis.ParseClusterURL, and also refuses a database other than 0, which go-redis
// would ignore: a cluster has only database 0. A rediss:// URL gets TLS 1.2 at least,
// as redis.ParseURL gives one node. Its errors may quote the URL, password included:
// redact them before showing them.
func ParseClusterURL(raw string) (*redis.ClusterOptions, error) {
	opt, err := redis.ParseClusterURL(raw)
	if err != nil {
		return nil, err
	}
	if db := clusterURLDB(raw); db != "" {
		return nil, fmt.Errorf("database %s selected, but a Redis Cluster has only database 0: remove /%s", db, db)
	}
	if opt.TLSConfig != nil && opt.TLSConfig.MinVersion == 0 {
		opt.TLSConfig.MinVersion = tls.VersionTLS12
	}
	return opt, nil
}

// clusterURLDB returns the database a URL's path selects when it is not 0 ("" for
// none, "/", "/0").
func clusterURLDB(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	db := strings.Trim(u.Path, "/")
	if db == "" || db == "0" {
		return ""
	}
	return db
}

// ServerConfig is the [server] table.
type ServerConfig struct {
	Partitioning  PartitioningConfig
	PriorityLanes PriorityLanes
	// MaxConcurrentHandlers caps the handler calls running at once in one instance,
	// across all its handlers (max_concurrent_handlers, default 0: no cap beyond each
	// handler's own max_concurrent). See EngineConfig.MaxConcurrentHandlers.
	MaxConcurrentHandlers int
}

// PartitioningConfig is the [server.partitioning] table: the partitioned consumer's
// timing. Every key is optional; DefaultPartitioningConfig holds the defaults.
type PartitioningConfig struct {
	// LeaseTTL is how long an ownership lease is held before it must be renewed
	// (lease_ttl_ms, default 15000 ms). Shorter means faster failover after a crash but
	// more reclaim churn.
	LeaseTTL time.Duration
	// HeartbeatInterval is how often an owner renews its leases
	// (heartbeat_interval_seconds, default lease_ttl_ms / 5000 s, i.e. LeaseTTL / 5). It
	// must be below LeaseTTL so a live owner never lets a lease lapse.
	HeartbeatInterval time.Duration
	// PollInterval is how long an idle per-partition worker waits between reads when it
	// has no wake-up (poll_interval_seconds, default 0.25 s).
	PollInterval time.Duration
	// ReapIdle is how long a drained partition sits idle before its owner retires it
	// from the discovery index (reap_idle_ms, default 3600000 ms = 1 h).
	ReapIdle time.Duration
	// SweepInterval is how often an owner checks its idle partitions for entries that
	// rang no doorbell (another publisher's plain XADD) while Redis sends no keyspace
	// notifications for streams (sweep_interval_seconds, default 2 s).
	SweepInterval time.Duration
	// KeyspaceNotifications is keyspace_notifications: "auto" (default), "use" or "off"
	// (EngineConfig.KeyspaceNotifications).
	KeyspaceNotifications string
	// MaxPartitionsWarning is the live-partition count per category above which a warning
	// is logged (max_partitions_warning, default 2000; 0 turns the warning off).
	// Partition-per-key is a bounded-cardinality design.
	MaxPartitionsWarning int
	// MaxUnacked is how many handled events of one partition may lack a confirmed
	// acknowledgement (max_unacked, default 1): after a failure at most that many handled
	// events run again, in order, plus none started (EngineConfig.MaxUnacked).
	MaxUnacked int
}

// DefaultPartitioningConfig returns the [server.partitioning] defaults of the
// specification.
func DefaultPartitioningConfig() PartitioningConfig {
	return PartitioningConfig{
		LeaseTTL:              15 * time.Second,
		HeartbeatInterval:     3 * time.Second,
		PollInterval:          250 * time.Millisecond,
		ReapIdle:              time.Hour,
		SweepInterval:         engine.DefaultSweepInterval,
		KeyspaceNotifications: engine.KeyspaceAuto,
		MaxPartitionsWarning:  2000,
		MaxUnacked:            engine.DefaultMaxUnacked,
	}
}

// Validate reports the first inconsistent value: a non-positive duration, a heartbeat
// that is not below the lease TTL, or a negative warning threshold.
func (p PartitioningConfig) Validate() error {
	switch {
	case p.LeaseTTL <= 0:
		return fmt.Errorf("engine: lease TTL must be positive, got %v", p.LeaseTTL)
	case p.HeartbeatInterval <= 0:
		return fmt.Errorf("engine: heartbeat interval must be positive, got %v", p.HeartbeatInterval)
	case p.HeartbeatInterval >= p.LeaseTTL:
		return fmt.Errorf("engine: heartbeat interval %v must be below the lease TTL %v", p.HeartbeatInterval, p.LeaseTTL)
	case p.PollInterval <= 0:
		return fmt.Errorf("engine: poll interval must be positive, got %v", p.PollInterval)
	case p.ReapIdle <= 0:
		return fmt.Errorf("engine: reap idle time must be positive, got %v", p.ReapIdle)
	case p.SweepInterval <= 0:
		return fmt.Errorf("engine: sweep interval must be positive, got %v", p.SweepInterval)
	case p.MaxPartitionsWarning < 0:
		return fmt.Errorf("engine: max partitions warning must be 0 (off) or positive, got %d", p.MaxPartitionsWarning)
	}
	return nil
}

// PriorityLanes is the [server.priority_lanes] table.
type PriorityLanes struct {
	// Enabled routes low-priority events to the backfill lane (enabled, default false).
	Enabled bool
	// Threshold: an event whose priority is strictly below it goes to the backfill lane
	// (threshold, default 0).
	Threshold int
	// BackfillSuffix is the lane token, {category}:{key}:{suffix} (backfill_suffix,
	// default "backfill"). It is a reserved partition-key value.
	BackfillSuffix string
}

// OutboxConfig is the [outbox] table.
type OutboxConfig struct {
	// DSN is "sqlite://PATH" or "postgres://..." (dsn; SEQCTL_OUTBOX_DSN overrides it).
	DSN string
}

// TypeConfig is one [[events]] or [[commands]] table.
type TypeConfig struct {
	Name     string
	Category string
	// Fields are the top-level keys of the JSON payload.
	Fields []string
}

// HandlerConfig is one [[handlers]] table.
type HandlerConfig struct {
	Name string
	// Kind is EventHandlerKind (kind = "event", the default) or CommandHandlerKind.
	Kind engine.HandlerKind
	// PartOf is the category the handler consumes (part_of; "" to infer it).
	PartOf string
	// Handles are the event (or command) type names.
	Handles []string
	// SequentialBy is the partition-key payload field, "" for none.
	SequentialBy string
	// Limit is the handler's limit key (limit_by, limit_concurrency, limit_rate): a
	// fleet-wide cap per value of a payload field; the zero value for none.
	Limit engine.HandlerLimit
	// MaxRetries is the number of attempts before the partition halts (default 3, >= 1).
	MaxRetries int
	// RetryDelay is the wait between attempts (retry_delay, default "1s").
	RetryDelay time.Duration
	// BatchMax is the most consecutive events of one key the handler takes in one call
	// (batch_max, 1 to engine.MaxBatch; 0 when unset: one event per call). Above 1, seqctl
	// run delivers runs of events (engine.Handler.BatchFunc): an HTTP handler gets a JSON
	// array, an exec handler NDJSON, a SQL sink one transaction per run.
	BatchMax int
	// BatchWait is how long an owner that caught up with its partition waits before it
	// reads again, so that a run can fill up (batch_wait, default 0: never wait). Only
	// with BatchMax above 1.
	BatchWait time.Duration
	// Deliver is nil when the table has no [handlers.deliver]: Go code registers the
	// handler function.
	Deliver *DeliverConfig
}

// Batched reports whether the handler takes runs of more than one event per call.
func (h HandlerConfig) Batched() bool { return h.BatchMax > 1 }

// DeliverConfig is a [handlers.deliver] or [process_managers.deliver] table. Exactly one of
// HTTP and Exec is set.
type DeliverConfig struct {
	// HTTP is the URL the event JSON is POSTed to; 2xx means done (http).
	HTTP string
	// Exec is the command run with the event JSON on stdin; exit 0 means done (exec).
	Exec []string
	// Timeout bounds one attempt (timeout, default "10s").
	Timeout time.Duration
	// SigningKeyEnv names the environment variable holding the HTTP request-signing key
	// (signing_key_env); SigningKeyFile names a file holding it instead (signing_key_file,
	// relative to the working directory; a trailing newline is not part of the key). Both
	// "" sends unsigned requests.
	SigningKeyEnv, SigningKeyFile string
	// SigningPreviousKeyEnv and SigningPreviousKeyFile (signing_previous_key_env,
	// signing_previous_key_file) name a second key while keys are rotated: each request is
	// then signed with both, so receivers can move to the new key at their own pace.
	SigningPreviousKeyEnv, SigningPreviousKeyFile string
	// MaxConcurrent caps how many events of this handler run at once in one instance
	// (max_concurrent; 0 for the default of the delivery kind, see Limit).
	MaxConcurrent int
	// SQL is the declarative SQL sink ([handlers.deliver.sql]): each event runs one
	// statement in a database, exactly once, through the inbox; nil otherwise.
	SQL *SQLSinkConfig
}

// SQLSinkConfig is a [handlers.deliver.sql] table: a statement run once per event inside
// the inbox's transaction (docs/concepts.md, Exactly-once effects). The statement's
// parameters are $1 the event data (JSON text), $2 the event id, $3 the partition key,
// $4 the stream entry id and $5 the lease generation; it uses the ones it needs.
type SQLSinkConfig struct {
	// DSNEnv names the environment variable holding the database's DSN (dsn_env);
	// DSNFile names a file holding it instead (dsn_file, relative to the working
	// directory; a trailing newline is not part of it). The DSN itself never goes in
	// domain.toml.
	DSNEnv, DSNFile string
	// Statement is the SQL run for each event (statement).
	Statement string
	// Table is the inbox table (inbox_table, default DefaultInboxTable).
	Table string
}

// DefaultInboxTable is the inbox table of a SQL sink that names none.
const DefaultInboxTable = "seqctl_inbox"

// Default per-instance concurrency of a handler, by delivery kind, when its deliver
// table sets no max_concurrent. Partitions beyond it wait for a slot; the wait is not an
// attempt and its timeout has not started.
var (
	// DefaultExecConcurrency is twice the usable cores: an exec handler costs a fork, a
	// process start and the process's own CPU, all on this machine, so more processes than
	// the cores can run only queue in the kernel's run queue, where the handler's timeout
	// would measure the queue rather than the handler. Twice the cores keeps every core
	// busy while some processes wait on I/O.
	DefaultExecConcurrency = 2 * runtime.GOMAXPROCS(0)
	// DefaultHTTPConcurrency is 128 requests in flight: a request costs this instance a
	// goroutine and a pooled connection only (the work runs in the endpoint's service),
	// so the bound is the endpoint's capacity; 128 keeps a 100 ms endpoint at about
	// 1,280 events/s per instance per handler and stays within the shared client's 512
	// idle connections per host.
	DefaultHTTPConcurrency = 128
	// DefaultSQLConcurrency is 16 statements in flight: each holds a database connection
	// for its transaction, and 16 keeps a handler within a small database's connection
	// limit while it drains many partitions at once.
	DefaultSQLConcurrency = 16
)

// Limit returns the handler's concurrency limit: MaxConcurrent, or the default of its
// delivery kind.
func (d *DeliverConfig) Limit() int {
	switch {
	case d.MaxConcurrent > 0:
		return d.MaxConcurrent
	case d.HTTP != "":
		return DefaultHTTPConcurrency
	case d.SQL != nil:
		return DefaultSQLConcurrency
	}
	return DefaultExecConcurrency
}

// Signed reports whether the deliver table names a signing key.
func (d *DeliverConfig) Signed() bool {
	return d.SigningKeyEnv != "" || d.SigningKeyFile != ""
}

// Mode returns "http", "exec" or "sql".
func (d *DeliverConfig) Mode() string {
	switch {
	case d.HTTP != "":
		return "http"
	case d.SQL != nil:
		return "sql"
	}
	return "exec"
}

// ProcessManagerConfig is one [[process_managers]] table.
type ProcessManagerConfig struct {
	Name string
	// SequentialBy leases each correlation value across the subscribed categories.
	SequentialBy bool
	MaxRetries   int
	RetryDelay   time.Duration
	// Deliver is nil when Go code registers the process manager.
	Deliver *DeliverConfig
	// Handles are the [[process_managers.handles]] tables.
	Handles []PMHandleConfig
}

// PMHandleConfig is one [[process_managers.handles]] table.
type PMHandleConfig struct {
	Event string
	// Correlate maps an event field onto the process manager's correlation field.
	Correlate engine.Correlate
	// Start says this event may start a new process-manager instance.
	Start bool
}

// decodeCorrelate decodes a correlate spec: either a field name, the same on both sides
// (correlate = "order_id"), or a one-entry table {pm_field = "event_field"}
// (correlate = { order_id = "order_ref" }).
func decodeCorrelate(v any) (c engine.Correlate, err error) {
	const how = `write correlate = "order_id" (the same field on both sides) or correlate = { order_id = "order_ref" } (process-manager field = event field)`
	switch v := v.(type) {
	case string:
		if v == "" {
			return c, fmt.Errorf("correlate is empty; %s", how)
		}
		return engine.Correlate{PMField: v, EventField: v}, nil
	case map[string]any:
		if len(v) != 1 {
			return c, fmt.Errorf("correlate table has %d entries, want exactly one; %s", len(v), how)
		}
		for pm, ev := range v {
			s, ok := ev.(string)
			switch {
			case !ok:
				return c, fmt.Errorf("correlate { %s = ... } maps to %s, want an event field name; %s", renderKey(pm), describe(ev), how)
			case pm == "" || s == "":
				return c, fmt.Errorf("correlate has an empty field name; %s", how)
			}
			c = engine.Correlate{PMField: pm, EventField: s}
		}
		return c, nil
	}
	return c, fmt.Errorf("correlate must be a field name or a one-entry table, not %s; %s", describe(v), how)
}

// Problem is one problem found in a config file.
type Problem struct {
	// Path is the key path, e.g. "server.partitioning.heartbeat_interval_seconds" or
	// "handlers[1].deliver.timeout". Arrays of tables are indexed from 0 in file order:
	// handlers[0] is the first [[handlers]] table. "" for a problem with the whole file.
	Path string
	// Line is the 1-based line of the key (or of the nearest enclosing table when the key
	// is missing), 0 when unknown.
	Line int
	// Message says what is wrong and what to do.
	Message string
}

// Format renders the problem as "FILE:LINE: PATH: message", leaving out ":LINE" when the
// line is unknown and "PATH: " when the problem concerns the whole file.
func (p Problem) Format(file string) string {
	var b strings.Builder
	b.WriteString(file)
	if p.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error reports every problem found in a config file: a syntax error (alone, since
// nothing after it can be trusted), or all unknown keys, wrong types and inconsistent
// values together, so the file can be fixed in one round. InitDomain also reports the
// domain's registration problems as a *Error; errors.As then still finds the
// *IncorrectUsageError it wraps.
type Error struct {
	File     string
	Problems []Problem

	err error // the underlying read, parse or Init error, for errors.Is / errors.As
}

// Error prints one problem per line as "FILE:LINE: PATH: message".
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Format(e.File)
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the underlying error: the read error of Load, the TOML parse
// error, or the *IncorrectUsageError of InitDomain; nil for problems found by the
// parser's own checks.
func (e *Error) Unwrap() error { return e.err }

// Load reads and parses a domain.toml. See Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := "the config file does not exist; check the path (testdata/domain.toml in the seqctl repository is a complete, commented example)"
		if reason, missing := readFailure(err); !missing {
			msg = "cannot read the config file: " + reason
		}
		return nil, &Error{File: path, Problems: []Problem{{Message: msg}}, err: err}
	}
	return Parse(path, data)
}

// readFailure says why os.ReadFile failed: missing when the file does not exist, else the
// reason, without the path that the caller's message names already.
func readFailure(err error) (reason string, missing bool) {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", true
	case errors.As(err, &pe):
		return pe.Err.Error(), false
	}
	return err.Error(), false
}

// Parse parses domain.toml content strictly. name is used in problem reports (a
// path, usually). Every default is applied and SEQCTL_REDIS_URL / SEQCTL_OUTBOX_DSN
// override the file. The error is a *Error naming the file, the key path and the
// line of every problem: a TOML syntax error; an unknown key (key names are
// case-sensitive); a value of the wrong type; or an inconsistent value, such as a
// heartbeat not below the lease TTL, a non-positive duration, max_retries below 1, an
// event declared in two categories, a handler naming an undeclared event, a malformed
// category, a deliver table with both or neither of http and exec, or an unknown kind.
//
// Registration rules that need the whole domain (sequential_by field existence, one
// partition key per category, broker capability) are checked by Domain.Init; InitDomain
// runs it and reports its problems against the file too.
func Parse(name string, data []byte) (*Config, error) {
	return parseConfig(name, data, os.Getenv)
}

// Domain builds the engine domain the config declares: events, commands, handlers and
// process managers (without Go functions: seqctl run sets those from the deliver tables,
// a Go program adds its own) and the backfill suffix. It does not call Init.
func (c *Config) Domain() (*engine.Domain, error) {
	if c == nil {
		return nil, errors.New("engine: nil config")
	}
	d := engine.NewDomain(c.Name)
	for _, e := range c.Events {
		d.AddEvent(engine.EventType{Name: e.Name, Category: e.Category, Fields: cloneStrings(e.Fields)})
	}
	for _, cm := range c.Commands {
		d.AddCommand(engine.CommandType{Name: cm.Name, Category: cm.Category, Fields: cloneStrings(cm.Fields)})
	}
	for i, h := range c.Handlers {
		kind := h.Kind
		if kind == 0 {
			kind = engine.EventHandlerKind
		}
		if kind != engine.EventHandlerKind && kind != engine.CommandHandlerKind {
			return nil, fmt.Errorf("engine: handlers[%d] (%q) has an unknown kind %d", i, h.Name, int(h.Kind))
		}
		d.AddHandler(engine.Handler{
			Name:         h.Name,
			Kind:         kind,
			PartOf:       h.PartOf,
			Handles:      cloneStrings(h.Handles),
			SequentialBy: h.SequentialBy,
			MaxRetries:   h.MaxRetries,
			RetryDelay:   h.RetryDelay,
			Limit:        h.Limit,
			BatchMax:     h.BatchMax,
			BatchWait:    h.BatchWait,
		})
	}
	for _, p := range c.ProcessManagers {
		pm := engine.ProcessManager{
			Name:         p.Name,
			SequentialBy: p.SequentialBy,
			MaxRetries:   p.MaxRetries,
			RetryDelay:   p.RetryDelay,
		}
		for _, h := range p.Handles {
			pm.Handles = append(pm.Handles, engine.PMHandle{Event: h.Event, Correlate: h.Correlate, Start: h.Start})
		}
		d.AddProcessManager(pm)
	}
	d.BackfillSuffix = c.Server.PriorityLanes.BackfillSuffix
	d.LanesEnabled = c.Server.PriorityLanes.Enabled
	d.LanesThreshold = c.Server.PriorityLanes.Threshold
	return d, nil
}

// EngineConfig returns the engine configuration the file describes, for the initialized
// domain d and the caller's client; the caller adds InstanceID, Logger, Observer.
func (c *Config) EngineConfig(d *engine.Domain, client redis.UniversalClient) engine.EngineConfig {
	warn := c.Server.Partitioning.MaxPartitionsWarning
	if warn == 0 {
		warn = -1 // max_partitions_warning = 0 turns the warning off
	}
	limits := map[string]int{}
	for _, h := range c.Handlers {
		if h.Deliver != nil {
			limits[h.Name] = h.Deliver.Limit()
		}
	}
	for _, p := range c.ProcessManagers {
		if p.Deliver != nil {
			limits[p.Name] = p.Deliver.Limit()
		}
	}
	return engine.EngineConfig{Domain: d, Client: client, Timing: c.Timing(), MaxPartitionsWarning: warn,
		MaxUnacked:            c.Server.Partitioning.MaxUnacked,
		KeyspaceNotifications: c.Server.Partitioning.KeyspaceNotifications,
		MinReplicas:           c.Broker.MinReplicas, ReplicaTimeout: c.Broker.ReplicaTimeout,
		MaxConcurrentHandlers: c.Server.MaxConcurrentHandlers, HandlerLimits: limits}
}

// Timing returns the [server.partitioning] timing for EngineConfig.Timing.
func (c *Config) Timing() engine.LeaseTiming {
	p := c.Server.Partitioning
	return engine.LeaseTiming{LeaseTTL: p.LeaseTTL, HeartbeatInterval: p.HeartbeatInterval, PollInterval: p.PollInterval, ReapIdle: p.ReapIdle, SweepInterval: p.SweepInterval}
}

// BrokerInfo describes the configured broker kind to Domain.Init.
func (c *Config) BrokerInfo() engine.BrokerInfo { return ConfiguredBroker(c.Broker.Kind) }

// InitDomain builds the domain and runs Init against the configured broker kind. When
// Init rejects the domain the error is a *Error for c.File holding each
// registration problem (placed at the handler or process manager it names, when it names
// one); errors.As still finds the *IncorrectUsageError.
func (c *Config) InitDomain() (*engine.Domain, error) {
	d, err := c.Domain()
	if err != nil {
		return nil, err
	}
	err = d.Init(c.BrokerInfo())
	var iue *engine.IncorrectUsageError
	if errors.As(err, &iue) {
		ce := &Error{File: c.File, err: err}
		for _, p := range iue.Problems {
			path := c.initProblemPath(p)
			ce.Problems = append(ce.Problems, Problem{Path: path.String(), Line: c.lines.lookup(path), Message: p})
		}
		return nil, ce
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// initProblemPath finds the table an Init problem is about, from the declarer the message
// starts with (`handler "X" ...`, `process manager "X" ...`); for a key conflict, the
// second declarer (the one that disagrees). nil when the problem names no single table.
func (c *Config) initProblemPath(msg string) keyPath {
	if i := strings.Index(msg, "\" but "); i >= 0 && strings.HasPrefix(msg, "conflicting ") {
		msg = msg[i+len("\" but "):]
	}
	if strings.HasPrefix(msg, "broker ") {
		return keyPath{}.key("broker").key("kind")
	}
	declarers := []struct {
		prefix, key string
		names       []string
	}{
		{"handler ", "handlers", namesOf(c.Handlers, func(h HandlerConfig) string { return h.Name })},
		{"process manager ", "process_managers", namesOf(c.ProcessManagers, func(p ProcessManagerConfig) string { return p.Name })},
		{"event ", "events", namesOf(c.Events, typeName)},
		{"command ", "commands", namesOf(c.Commands, typeName)},
	}
	for _, decl := range declarers {
		rest, ok := strings.CutPrefix(msg, decl.prefix)
		if !ok {
			continue
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil
		}
		name, _ := strconv.Unquote(q)
		if i := slices.Index(decl.names, name); i >= 0 {
			return keyPath{}.key(decl.key).index(i)
		}
		return nil
	}
	return nil
}

// namesOf returns the name of each of xs, in order.
func namesOf[T any](xs []T, name func(T) string) []string {
	names := make([]string, len(xs))
	for i, x := range xs {
		names[i] = name(x)
	}
	return names
}

func typeName(t TypeConfig) string { return t.Name }

// ConfiguredBroker describes a broker by its configured kind, for Domain.Init before a
// real broker is connected: "redis" and "redis-cluster" advertise StreamPartitioning,
// every other kind advertises nothing (Init accepts "inline" as a no-op and rejects the
// rest when a handler asks for sequential_by).
func ConfiguredBroker(kind string) engine.BrokerInfo {
	if (BrokerConfig{Kind: kind}).IsRedis() {
		return staticBroker{kind: kind, caps: []engine.Capability{engine.StreamPartitioning}}
	}
	return staticBroker{kind: kind}
}

// staticBroker is a BrokerInfo with a fixed kind and capability set.
type staticBroker struct {
	kind string
	caps []engine.Capability
}

func (b staticBroker) Kind() string { return b.kind }

func (b staticBroker) Has(c engine.Capability) bool {
	for _, x := range b.caps {
		if x == c {
			return true
		}
	}
	return false
}

func cloneStrings(xs []string) []string {
	if xs == nil {
		return nil
	}
	return append([]string(nil), xs...)
}
