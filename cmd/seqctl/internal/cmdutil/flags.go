package cmdutil

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/pkg/config"
)

// GlobalOptions are the flags every command accepts (bound on the root command). A
// command that declares a flag of the same name locally (validate's --config) uses its
// own.
type GlobalOptions struct {
	// ConfigPath is the domain.toml the categories and handlers come from (--config);
	// "" means discover them in Redis.
	ConfigPath string
	// RedisURL is --redis-url; "" means $SEQCTL_REDIS_URL, else the config's broker.url,
	// else DefaultRedisURL.
	RedisURL string
	// RedisCluster is --cluster: connect to a Redis Cluster. $SEQCTL_REDIS_CLUSTER and
	// the config's [broker] kind = "redis-cluster" ask for it too (see redisconn.Resolve).
	RedisCluster bool
	// RedisTLS are the --redis-tls-* flags; each empty one falls back to its
	// SEQCTL_REDIS_TLS_* variable, then to the config's [broker.tls].
	RedisTLS config.TLSConfig
	// Output is -o: "" or "table", "wide", "json", "yaml".
	Output string
	// NoHeaders drops the header row of tables (--no-headers).
	NoHeaders bool
	// NoColor turns colour off (--no-color); NO_COLOR does the same.
	NoColor bool
}

// AddGlobalFlags binds the global flags to f.Global and applies --no-color before any
// command runs.
func AddGlobalFlags(cmd *cobra.Command, f *Factory) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.Global.ConfigPath, "config", "", "domain.toml to take categories and handlers from (default: discover them in Redis)")
	pf.StringVar(&f.Global.RedisURL, "redis-url", "", "Redis URL, rediss:// for TLS (default: $SEQCTL_REDIS_URL, else the config's broker.url, else "+redisconn.DefaultRedisURL+")")
	pf.BoolVar(&f.Global.RedisCluster, "cluster", false, "connect to a Redis Cluster; --redis-url then names a seed node and more with addr, e.g. redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000 (default: $"+redisconn.EnvRedisCluster+"=1, or the config's [broker] kind = \"redis-cluster\")")
	pf.StringVar(&f.Global.RedisTLS.CAFile, "redis-tls-ca", "", "PEM file of the CA that signed Redis's certificate; turns TLS on (default: $"+redisconn.EnvRedisTLSCA+", else [broker.tls] ca_file, else the system roots)")
	pf.StringVar(&f.Global.RedisTLS.CertFile, "redis-tls-cert", "", "PEM client certificate for Redis's tls-auth-clients, with --redis-tls-key (default: $"+redisconn.EnvRedisTLSCert+", else [broker.tls] cert_file)")
	pf.StringVar(&f.Global.RedisTLS.KeyFile, "redis-tls-key", "", "PEM private key of --redis-tls-cert (default: $"+redisconn.EnvRedisTLSKey+", else [broker.tls] key_file)")
	pf.StringVar(&f.Global.RedisTLS.ServerName, "redis-tls-server-name", "", "name Redis's certificate must carry (default: $"+redisconn.EnvRedisTLSServerName+", else [broker.tls] server_name, else the URL's host)")
	pf.StringVar(&f.Global.RedisTLS.MinVersion, "redis-tls-min-version", "", "lowest TLS version, 1.2 or 1.3 (default: $"+redisconn.EnvRedisTLSMinVersion+", else [broker.tls] min_version, else 1.2)")
	pf.StringVarP(&f.Global.Output, "output", "o", "", "output format: table, wide, json or yaml (default: a table on a terminal, tab-separated rows in a pipe)")
	pf.BoolVar(&f.Global.NoHeaders, "no-headers", false, "print tables without their header row")
	pf.BoolVar(&f.Global.NoColor, "no-color", false, "never colour the output (NO_COLOR=1 does the same)")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if f.Global.NoColor {
			f.IOStreams.Color = false
		}
		return nil
	}
}

// ConfigRedis loads the command's config file (domain.toml when --config is not given)
// and resolves its Redis from the flags, the environment and that file.
func (g GlobalOptions) ConfigRedis() (*config.Config, *redisconn.Conn, error) {
	cfg, err := LoadConfigFile(ConfigOrDefault(g.ConfigPath))
	if err != nil {
		return nil, nil, err
	}
	conn, err := redisconn.Resolve(g.RedisFlags(), cfg, os.Getenv)
	return cfg, conn, err
}

// RedisFlags returns the connection flags among the global ones.
func (g GlobalOptions) RedisFlags() redisconn.Flags {
	return redisconn.Flags{URL: g.RedisURL, Cluster: g.RedisCluster, TLS: g.RedisTLS}
}
