package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/redact"
)

// Where a command connects: one Redis or a Redis Cluster, resolved once from the flags,
// the environment and the config by resolveRedis, and the client built from that. Every
// command that talks to Redis goes through here, so the URL, password, TLS and timeout
// rules, and the wording of connection failures, are the same everywhere.

// redisFlags are the connection flags of a command: the global --redis-url, --cluster
// and --redis-tls-*.
type redisFlags struct {
	URL     string
	Cluster bool
	TLS     config.TLSConfig
}

// configRedis loads the command's config file (domain.toml when --config is not given)
// and resolves its Redis from the flags, the environment and that file.
func (g GlobalOptions) configRedis() (*config.Config, *redisConn, error) {
	cfg, err := loadConfigFile(configOrDefault(g.ConfigPath))
	if err != nil {
		return nil, nil, err
	}
	conn, err := resolveRedis(g.redisFlags(), cfg, os.Getenv)
	return cfg, conn, err
}

// redisFlags returns the connection flags among the global ones.
func (g GlobalOptions) redisFlags() redisFlags {
	return redisFlags{URL: g.RedisURL, Cluster: g.RedisCluster, TLS: g.RedisTLS}
}

// redisConn is a resolved connection: the client options of one Redis (node) or of a
// Redis Cluster (cluster); exactly one of them is set.
type redisConn struct {
	node    *redis.Options
	cluster *redis.ClusterOptions
	// shown is the URL with its password masked, for messages.
	shown string
	// clusterFrom names what asked for cluster mode: "--cluster", "$SEQCTL_REDIS_CLUSTER"
	// or the config file whose [broker] kind is "redis-cluster", to say what to change
	// when the server is not a cluster.
	clusterFrom []string
	// finalNetErrors makes a cluster client give up on a request whose connection
	// failed after it was sent (see noRetries).
	finalNetErrors bool
}

// resolveRedis resolves the connection of a command:
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
// a bad URL or TLS setting the returned redisConn still names the masked URL (shown).
func resolveRedis(flags redisFlags, cfg *config.Config, getenv func(string) string) (*redisConn, error) {
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
	c := &redisConn{shown: maskURL(raw), clusterFrom: clusterFrom}
	tlsc := resolveTLS(flags.TLS, cfg, getenv)
	var tlsErr error
	if len(clusterFrom) > 0 {
		opt, err := config.ParseClusterURL(raw)
		if err != nil {
			return c, &ExitError{Code: ExitUsage, Err: fmt.Errorf("invalid Redis Cluster URL %s (from %s): %v; want %s", c.shown, from, redact.Error(err, raw), config.ClusterURLForm)}
		}
		commandDefaults(getenv, &opt.Password, &opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
		if tlsErr = tlsc.ApplyClusterTLS(opt); tlsErr == nil {
			c.cluster = opt
		}
	} else {
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return c, &ExitError{Code: ExitUsage, Err: fmt.Errorf("invalid Redis URL %s (from %s): %v; want redis://[user:password@]host:port/db or rediss:// for TLS", c.shown, from, redact.Error(err, raw))}
		}
		commandDefaults(getenv, &opt.Password, &opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
		if tlsErr = tlsc.ApplyTLS(opt); tlsErr == nil {
			c.node = opt
		}
	}
	if tlsErr != nil {
		return c, &ExitError{Code: ExitUsage, Err: tlsSettingError(tlsErr, flags.TLS, cfg, getenv)}
	}
	return c, nil
}

// commandDefaults sets, on the fields of the options of either client (one Redis or a
// cluster), what resolveRedis gives every connection: the password of
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
		return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("invalid value %q for $%s: set 1, true or yes to connect to a Redis Cluster, or unset it for one Redis", v, EnvRedisCluster)}
	}
	if cfg != nil && cfg.Broker.IsCluster() {
		from = append(from, cfg.File) // its [broker] kind
	}
	return from, nil
}

// isCluster reports whether the connection is to a Redis Cluster.
func (c *redisConn) isCluster() bool { return c.cluster != nil }

// where names the server in messages: "Redis at URL" or "Redis Cluster at URL".
func (c *redisConn) where() string {
	if c.isCluster() {
		return "Redis Cluster at " + c.shown
	}
	return "Redis at " + c.shown
}

// tlsConfig returns the client's TLS configuration, nil for plain TCP.
func (c *redisConn) tlsConfig() *tls.Config {
	if c.isCluster() {
		return c.cluster.TLSConfig
	}
	return c.node.TLSConfig
}

// addrs returns the address of the node, or the cluster's seed addresses.
func (c *redisConn) addrs() []string {
	if c.isCluster() {
		return c.cluster.Addrs
	}
	return []string{c.node.Addr}
}

// logAttrs names the server in log lines: its address and database, or the cluster's
// seed addresses.
func (c *redisConn) logAttrs() []any {
	if c.isCluster() {
		return []any{"cluster", c.cluster.Addrs}
	}
	return []any{"addr", c.node.Addr, "db", c.node.DB}
}

// noRetries turns off go-redis's automatic resending of a request, for the operator
// commands: a compare-and-act whose reply was lost would run again and report "head
// moved" for the operator's own success. One node gets MaxRetries = -1. A cluster
// client follows MOVED and ASK redirects in the same loop (MaxRedirects, left at its
// default of 3) in which it resends a request after a network error, so its node
// clients get MaxRetries = -1 and a hook that makes a failure after the request may
// have reached Redis final (see finalNetError); a dial that failed, a redirect and a
// TRYAGAIN or CLUSTERDOWN reply, which Redis answers without running the command, are
// still retried. Pipelines, which the operator commands use to read, keep go-redis's
// retries.
func (c *redisConn) noRetries() {
	if c.isCluster() {
		c.cluster.MaxRetries = -1
		c.finalNetErrors = true
		return
	}
	c.node.MaxRetries = -1
}

// engineTimeouts sets the socket timeouts of seqctl run: the engine bounds its own waits
// by the lease timing, so go-redis's short default socket timeouts are kept rather than
// the operator commands' long ones, and every call's context deadline reaches the
// socket, so a frozen link never holds a call past the local lease deadline.
func (c *redisConn) engineTimeouts() {
	if c.isCluster() {
		c.cluster.ReadTimeout, c.cluster.WriteTimeout = 0, 0
		c.cluster.ContextTimeoutEnabled = true
		return
	}
	c.node.ReadTimeout, c.node.WriteTimeout = 0, 0
	c.node.ContextTimeoutEnabled = true
}

// newClient builds the client: a *redis.ClusterClient in cluster mode (the engine and
// the operator API tell a cluster by that type), else a *redis.Client. The caller
// closes it.
func (c *redisConn) newClient() redis.UniversalClient {
	if !c.isCluster() {
		return redis.NewClient(c.node)
	}
	cl := redis.NewClusterClient(c.cluster)
	if c.finalNetErrors {
		cl.OnNewNode(func(n *redis.Client) { n.AddHook(finalNetErrorHook{}) })
	}
	return cl
}

// ping checks the connection: a PING to the node, or to every master of the cluster,
// which also loads the cluster's slot map and checks that this host reaches each
// address the cluster announces.
func (c *redisConn) ping(ctx context.Context, rdb redis.UniversalClient) error {
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

// finalNetErrorHook is the node-level hook of noRetries.
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

// checkRedisAddr refuses a TCP address whose port is not a port, before any dial (which
// go-redis would retry).
func checkRedisAddr(c *redisConn) error {
	if !c.isCluster() && c.node.Network == "unix" {
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

// notClusterProblem explains the reply of a Redis without cluster support to a cluster
// client, or returns "".
func notClusterProblem(err error, c *redisConn) string {
	if err == nil || c == nil || !c.isCluster() || !strings.Contains(err.Error(), "cluster support disabled") {
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
	return fmt.Sprintf("Redis at %s is not a Redis Cluster (%s); to use it as one Redis, %s", c.shown, redisReply(err), strings.Join(fixes, ", "))
}

// clusterReply matches the replies only a node of a Redis Cluster gives: a redirection
// ("MOVED 3999 10.0.0.2:6379", "ASK ...") or a CROSSSLOT refusal.
var clusterReply = regexp.MustCompile(`\b(MOVED|ASK) \d+ \S+|\bCROSSSLOT `)

// clusterNodeProblem explains a redirection (MOVED, ASK) or a CROSSSLOT reply that a
// client of one Redis got from a node of a Redis Cluster, or returns "". where names
// the server ("" when unknown).
func clusterNodeProblem(err error, where string) string {
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
