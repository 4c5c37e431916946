// Package redisconn is where a command of seqctl connects: one Redis or a Redis
// Cluster, resolved once from the flags, the environment and the config (Resolve), the
// client built from that, and what to tell an operator when the connection fails
// (TLSProblem, PermissionProblem, PermanentProblem, ...). Every command that talks to
// Redis goes through here, so the URL, password, TLS and timeout rules, and the wording
// of connection failures, are the same everywhere. The operator commands connect in one
// step, Connect.
package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/redact"
)

// Flags are the connection flags of a command: the global --redis-url, --cluster
// and --redis-tls-*.
type Flags struct {
	URL     string
	Cluster bool
	TLS     config.TLSConfig
}

// Conn is a resolved connection: the client options of one Redis (node) or of a
// Redis Cluster (cluster); exactly one of them is set.
type Conn struct {
	node    *redis.Options
	Cluster *redis.ClusterOptions
	// Shown is the URL with its password masked, for messages.
	Shown string
	// clusterFrom names what asked for cluster mode: "--cluster", "$SEQCTL_REDIS_CLUSTER"
	// or the config file whose [broker] kind is "redis-cluster", to say what to change
	// when the server is not a cluster.
	clusterFrom []string
	// finalNetErrors makes a cluster client give up on a request whose connection
	// failed after it was sent (see NoRetries).
	finalNetErrors bool
}

// Resolve resolves the connection of a command:
//
//   - cluster mode when any of --cluster, $SEQCTL_REDIS_CLUSTER (1, true or yes) or the
//     config's [broker] kind = "redis-cluster" asks for it; none of them turns it off;
//   - the URL: --redis-url, else $SEQCTL_REDIS_URL, else the config's broker.url, else
//     DefaultRedisURL; in cluster mode in go-redis's cluster form, a seed address and
//     more as addr parameters;
//   - the password: the URL's, else $SEQCTL_REDIS_PASSWORD;
//   - the TLS settings (see resolveTLS), and the operator commands' timeouts: 5 s to
//     dial, 30 s to read or write.
//
// A bad URL, TLS setting or $SEQCTL_REDIS_CLUSTER value is a usage error (exit 2); after
// a bad URL or TLS setting the returned Conn still names the masked URL (shown).
func Resolve(flags Flags, cfg *config.Config, getenv func(string) string) (*Conn, error) {
	clusterFrom, err := clusterMode(flags.Cluster, cfg, getenv)
	if err != nil {
		return nil, err
	}
	raw, from := flags.URL, "--redis-url"
	switch {
	case raw != "":
	case getenv(config.EnvRedisURL) != "":
		raw, from = getenv(config.EnvRedisURL), config.EnvRedisURL
	case cfg != nil && cfg.Broker.URL != "":
		raw, from = cfg.Broker.URL, cfg.File+": broker.url"
	default:
		raw, from = DefaultRedisURL, "the default"
	}
	c := &Conn{Shown: redact.URL(raw), clusterFrom: clusterFrom}
	tlsc := resolveTLS(flags.TLS, cfg, getenv)
	var tlsErr error
	if len(clusterFrom) > 0 {
		opt, err := config.ParseClusterURL(raw)
		if err != nil {
			return c, &SettingError{Err: fmt.Errorf("invalid Redis Cluster URL %s (from %s): %v; want %s", c.Shown, from, redact.Error(err, raw), config.ClusterURLForm)}
		}
		commandDefaults(getenv, &opt.Password, &opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
		if tlsErr = tlsc.ApplyClusterTLS(opt); tlsErr == nil {
			c.Cluster = opt
		}
	} else {
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return c, &SettingError{Err: fmt.Errorf("invalid Redis URL %s (from %s): %v; want redis://[user:password@]host:port/db or rediss:// for TLS", c.Shown, from, redact.Error(err, raw))}
		}
		commandDefaults(getenv, &opt.Password, &opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
		if tlsErr = tlsc.ApplyTLS(opt); tlsErr == nil {
			c.node = opt
		}
	}
	if tlsErr != nil {
		return c, &SettingError{Err: tlsSettingError(tlsErr, flags.TLS, cfg, getenv)}
	}
	return c, nil
}

// commandDefaults sets, on the fields of the options of either client (one Redis or a
// cluster), what Resolve gives every connection: the password of
// $SEQCTL_REDIS_PASSWORD when the URL carries none, and the operator commands'
// timeouts, 5 s to dial and 30 s to read or write.
func commandDefaults(getenv func(string) string, password *string, dial, read, write *time.Duration) {
	if *password == "" {
		*password = getenv(EnvRedisPassword)
	}
	*dial, *read, *write = 5*time.Second, 30*time.Second, 30*time.Second
}

// clusterMode returns what asks for cluster mode, nil for none. A value of
// $SEQCTL_REDIS_CLUSTER other than 1, true or yes is a usage error.
func clusterMode(flag bool, cfg *config.Config, getenv func(string) string) ([]string, error) {
	var from []string
	if flag {
		from = append(from, "--cluster")
	}
	switch v := getenv(EnvRedisCluster); strings.ToLower(v) {
	case "":
	case "1", "true", "yes":
		from = append(from, "$"+EnvRedisCluster)
	default:
		return nil, &SettingError{Err: fmt.Errorf("invalid value %q for $%s: set 1, true or yes to connect to a Redis Cluster, or unset it for one Redis", v, EnvRedisCluster)}
	}
	if cfg != nil && cfg.Broker.IsCluster() {
		from = append(from, cfg.File) // its [broker] kind
	}
	return from, nil
}

// SettingError is a bad connection setting: a Redis URL, a TLS setting or the value of
// $SEQCTL_REDIS_CLUSTER. The commands exit with status 2 (usage) on it.
type SettingError struct{ Err error }

func (e *SettingError) Error() string { return e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// IsCluster reports whether the connection is to a Redis Cluster.
func (c *Conn) IsCluster() bool { return c.Cluster != nil }

// Where names the server in messages: "Redis at URL" or "Redis Cluster at URL".
func (c *Conn) Where() string {
	if c.IsCluster() {
		return "Redis Cluster at " + c.Shown
	}
	return "Redis at " + c.Shown
}

// TLSConfig returns the client's TLS configuration, nil for plain TCP.
func (c *Conn) TLSConfig() *tls.Config {
	if c.IsCluster() {
		return c.Cluster.TLSConfig
	}
	return c.node.TLSConfig
}

// addrs returns the address of the node, or the cluster's seed addresses.
func (c *Conn) addrs() []string {
	if c.IsCluster() {
		return c.Cluster.Addrs
	}
	return []string{c.node.Addr}
}

// LogAttrs names the server in log lines: its address and database, or the cluster's
// seed addresses.
func (c *Conn) LogAttrs() []any {
	if c.IsCluster() {
		return []any{"cluster", c.Cluster.Addrs}
	}
	return []any{"addr", c.node.Addr, "db", c.node.DB}
}

// NoRetries turns off go-redis's automatic resending of a request, for the operator
// commands: a compare-and-act whose reply was lost would run again and report "head
// moved" for the operator's own success. One node gets MaxRetries = -1. A cluster
// client follows MOVED and ASK redirects in the same loop (MaxRedirects, left at its
// default of 3) in which it resends a request after a network error, so its node
// clients get MaxRetries = -1 and a hook that makes a failure after the request may
// have reached Redis final (see finalNetError); a dial that failed, a redirect and a
// TRYAGAIN or CLUSTERDOWN reply, which Redis answers without running the command, are
// still retried. Pipelines, which the operator commands use to read, keep go-redis's
// retries.
func (c *Conn) NoRetries() {
	if c.IsCluster() {
		c.Cluster.MaxRetries = -1
		c.finalNetErrors = true
		return
	}
	c.node.MaxRetries = -1
}

// EngineTimeouts sets the socket timeouts of seqctl run: the engine bounds its own waits
// by the lease timing, so go-redis's short default socket timeouts are kept rather than
// the operator commands' long ones, and every call's context deadline reaches the
// socket, so a frozen link never holds a call past the local lease deadline.
func (c *Conn) EngineTimeouts() {
	if c.IsCluster() {
		c.Cluster.ReadTimeout, c.Cluster.WriteTimeout = 0, 0
		c.Cluster.ContextTimeoutEnabled = true
		return
	}
	c.node.ReadTimeout, c.node.WriteTimeout = 0, 0
	c.node.ContextTimeoutEnabled = true
}

// NewClient builds the client: a *redis.ClusterClient in cluster mode (the engine and
// the operator API tell a cluster by that type), else a *redis.Client. The caller
// closes it.
func (c *Conn) NewClient() redis.UniversalClient {
	if !c.IsCluster() {
		return redis.NewClient(c.node)
	}
	cl := redis.NewClusterClient(c.Cluster)
	if c.finalNetErrors {
		cl.OnNewNode(func(n *redis.Client) { n.AddHook(finalNetErrorHook{}) })
	}
	return cl
}

// NewNamedClient is NewClient whose connections take name as their client name
// (CLIENT SETNAME): what CLIENT LIST shows, and what a fault injector can kill by.
func (c *Conn) NewNamedClient(name string) redis.UniversalClient {
	if !c.IsCluster() {
		o := *c.node
		o.ClientName = name
		return redis.NewClient(&o)
	}
	o := *c.Cluster
	o.ClientName = name
	cl := redis.NewClusterClient(&o)
	if c.finalNetErrors {
		cl.OnNewNode(func(n *redis.Client) { n.AddHook(finalNetErrorHook{}) })
	}
	return cl
}

// Ping checks the connection: a PING to the node, or to every master of the cluster,
// which also loads the cluster's slot map and checks that this host reaches each
// address the cluster announces.
func (c *Conn) Ping(ctx context.Context, rdb redis.UniversalClient) error {
	cl, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb.Ping(ctx).Err()
	}
	return cl.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		if err := n.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("cluster node %s: %w", n.Options().Addr, err)
		}
		return nil
	})
}

// finalNetErrorHook is the node-level hook of NoRetries.
type finalNetErrorHook struct{}

func (finalNetErrorHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (finalNetErrorHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if fe := finalNetError(err); fe != err {
			cmd.SetErr(fe)
			return fe
		}
		return err
	}
}

func (finalNetErrorHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// finalNetError returns err, or, when err is a network failure after the request may
// have reached Redis (the connection closed or reset, a read or write timeout), an error
// with the same text that go-redis does not retry: it wraps nothing, so go-redis's retry
// test sees neither io.EOF nor a net.Error. A failed dial (nothing was sent), a Redis
// reply and a cancelled context are left alone.
func finalNetError(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return err
	}
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) {
		return sentRequestError(err.Error())
	}
	return err
}

// sentRequestError is a network failure after a request was sent, as finalNetError
// returns it.
type sentRequestError string

func (e sentRequestError) Error() string { return string(e) }

// Transient says the failure passes with time (see engine.Transient), so that the
// operator API reports it as engine.ErrRedisUnavailable.
func (sentRequestError) Transient() bool { return true }

// CheckAddr refuses a TCP address whose port is not a port, before any dial (which
// go-redis would retry).
func CheckAddr(c *Conn) error {
	if !c.IsCluster() && c.node.Network == "unix" {
		return nil
	}
	for _, addr := range c.addrs() {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return err
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return &net.AddrError{Err: "invalid port", Addr: addr}
		}
	}
	return nil
}

// NotClusterProblem explains the reply of a Redis without cluster support to a cluster
// client, or returns "".
func NotClusterProblem(err error, c *Conn) string {
	if err == nil || c == nil || !c.IsCluster() || !strings.Contains(err.Error(), "cluster support disabled") {
		return ""
	}
	var fixes []string
	for _, f := range c.clusterFrom {
		switch {
		case f == "--cluster":
			fixes = append(fixes, "drop --cluster")
		case f == "$"+EnvRedisCluster:
			fixes = append(fixes, "unset "+EnvRedisCluster)
		default:
			fixes = append(fixes, fmt.Sprintf("set [broker] kind = %q in %s", engine.BrokerKindRedis, f))
		}
	}
	return fmt.Sprintf("Redis at %s is not a Redis Cluster (%s); to use it as one Redis, %s", c.Shown, redisReply(err), strings.Join(fixes, ", "))
}

// clusterReply matches the replies only a node of a Redis Cluster gives: a redirection
// ("MOVED 3999 10.0.0.2:6379", "ASK ...") or a CROSSSLOT refusal.
var clusterReply = regexp.MustCompile(`\b(MOVED|ASK) \d+ \S+|\bCROSSSLOT `)

// ClusterNodeProblem explains a redirection (MOVED, ASK) or a CROSSSLOT reply that a
// client of one Redis got from a node of a Redis Cluster, or returns "". where names
// the server ("" when unknown).
func ClusterNodeProblem(err error, where string) string {
	if err == nil || strings.HasPrefix(where, "Redis Cluster ") {
		return ""
	}
	if !clusterReply.MatchString(err.Error()) {
		return ""
	}
	if where == "" {
		where = "Redis"
	}
	return fmt.Sprintf("%s is a node of a Redis Cluster (%s); connect to the cluster with --cluster, %s=1 or [broker] kind = %q, and its URL: %s",
		where, redisReply(err), EnvRedisCluster, engine.BrokerKindRedisCluster, config.ClusterURLForm)
}

// urlSetting names where the Redis URL comes from, for messages that say what to fix.
const urlSetting = "the Redis URL (--redis-url, $" + config.EnvRedisURL + ", or [broker] url in domain.toml)"

// PermanentProblem returns what to fix when err cannot go away by waiting, or ""
// when it may (Redis unreachable, loading its data, failing over, busy, out of memory).
func PermanentProblem(err error, conn *Conn) string {
	msg, perm := err.Error(), PermissionProblem(err)
	var addrErr *net.AddrError
	switch {
	case errors.As(err, &addrErr) || strings.Contains(msg, "invalid port") || strings.Contains(msg, "missing port"):
		if conn.IsCluster() {
			addr := conn.addrs()[0]
			if addrErr != nil && addrErr.Addr != "" {
				addr = addrErr.Addr
			}
			return fmt.Sprintf("cannot start: the Redis Cluster address %q is not a valid host:port (%v); fix %s, e.g. redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", addr, err, urlSetting)
		}
		return fmt.Sprintf("cannot start: the Redis address %q is not a valid host:port (%v); fix %s, e.g. redis://127.0.0.1:6379/0", conn.node.Addr, err, urlSetting)
	case !conn.IsCluster() && (strings.Contains(msg, "DB index is out of range") || strings.Contains(msg, "invalid DB index")):
		return fmt.Sprintf("cannot start: Redis at %s has no database %d (its 'databases' setting is lower); fix the /%d at the end of %s", conn.Shown, conn.node.DB, conn.node.DB, urlSetting)
	case strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "invalid password") ||
		strings.Contains(msg, "invalid username-password") || strings.Contains(msg, "ERR AUTH"):
		return fmt.Sprintf("cannot start: %s refused the credentials (%v); fix the user and password in %s, or $%s", conn.Where(), redisReply(err), urlSetting, EnvRedisPassword)
	case perm != "":
		return "cannot start: " + perm + " (the user comes from " + urlSetting + ")"
	case NotClusterProblem(err, conn) != "":
		return "cannot start: " + NotClusterProblem(err, conn)
	case ClusterNodeProblem(err, conn.Where()) != "":
		return "cannot start: " + ClusterNodeProblem(err, conn.Where())
	case TLSProblem(err, conn.Where()) != "":
		return "cannot start: " + TLSProblem(err, conn.Where())
	case ClosedConnProblem(err, conn) != "":
		return "cannot start: " + ClosedConnProblem(err, conn)
	case strings.Contains(msg, "unknown command"):
		return fmt.Sprintf("cannot start: %s lacks a command seqctl needs (%v); seqctl needs Redis 6.2 or later", conn.Where(), redisReply(err))
	}
	return ""
}

// redisReply strips the engine's wrapping from a Redis error reply.
func redisReply(err error) string {
	var re redis.Error
	if errors.As(err, &re) {
		return re.Error()
	}
	return err.Error()
}

// redisLogOnce guards the go-redis logger, which is process-wide: the first command to
// connect sets it, once.
var redisLogOnce sync.Once

// RouteRedisLogs sends go-redis's own messages (dial failures, pool notices) to log at
// debug level instead of unstructured lines on stderr; a nil log drops them. The
// failures that matter reach the caller as errors and are logged there.
func RouteRedisLogs(log *slog.Logger) {
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{log: log}) })
}

type redisLogger struct{ log *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if r.log != nil {
		r.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
	}
}

// Environment variables of the operator commands.
const (
	// EnvRedisPassword is the Redis password when the URL carries none.
	EnvRedisPassword = "SEQCTL_REDIS_PASSWORD"
	// EnvRedisCluster ("1", "true" or "yes") connects to a Redis Cluster, as --cluster
	// does.
	EnvRedisCluster = "SEQCTL_REDIS_CLUSTER"
	// EnvRedisTLSCA and the other SEQCTL_REDIS_TLS_* variables stand in for the
	// --redis-tls-* flags; EnvRedisTLSInsecure ("true") accepts any server certificate,
	// with a warning at every start.
	EnvRedisTLSCA         = "SEQCTL_REDIS_TLS_CA"
	EnvRedisTLSCert       = "SEQCTL_REDIS_TLS_CERT"
	EnvRedisTLSKey        = "SEQCTL_REDIS_TLS_KEY"
	EnvRedisTLSServerName = "SEQCTL_REDIS_TLS_SERVER_NAME"
	EnvRedisTLSMinVersion = "SEQCTL_REDIS_TLS_MIN_VERSION"
	EnvRedisTLSInsecure   = "SEQCTL_REDIS_TLS_INSECURE_SKIP_VERIFY"
	// DefaultRedisURL is used when neither the flag, the environment nor a config names one.
	DefaultRedisURL = "redis://127.0.0.1:6379/0"
)

// Connect is the connection of the operator commands, the one step that turns the
// connection flags, the environment and the config (nil without --config) into a live
// client: it resolves the connection (see Resolve), warns on errOut when TLS
// verification is off, turns go-redis's automatic retries off (a compare-and-act whose
// reply was lost would run again and report "head moved" for the operator's own
// success: fail fast and say so instead), and checks the connection with a PING (to
// every master of a cluster) within 5 s, saying what to fix when it fails.
func Connect(ctx context.Context, flags Flags, cfg *config.Config, getenv func(string) string, errOut io.Writer) (*Conn, redis.UniversalClient, error) {
	conn, err := Resolve(flags, cfg, getenv)
	if err != nil {
		return nil, nil, err
	}
	WarnInsecureTLS(conn.TLSConfig(), func(msg string) { fmt.Fprintln(errOut, "seqctl: warning: "+msg) })
	conn.NoRetries()
	RouteRedisLogs(nil) // the errors that matter are returned; drop go-redis's own lines
	rdb := conn.NewClient()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := conn.Ping(pctx, rdb); err != nil {
		_ = rdb.Close()
		if msg := TLSProblem(err, conn.Where()); msg != "" {
			return nil, nil, errors.New(msg)
		}
		if msg := ClosedConnProblem(err, conn); msg != "" {
			return nil, nil, errors.New(msg)
		}
		if msg := NotClusterProblem(err, conn); msg != "" {
			return nil, nil, errors.New(msg)
		}
		return nil, nil, fmt.Errorf("cannot reach %s: %v (set --redis-url or %s)", conn.Where(), err, config.EnvRedisURL)
	}
	return conn, rdb, nil
}
