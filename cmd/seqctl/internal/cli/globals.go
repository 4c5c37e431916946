package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
	"github.com/seqctl/seqctl/pkg/redact"
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
	// the config's [broker] kind = "redis-cluster" ask for it too (see resolveRedis).
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

// addGlobalFlags binds the global flags to f.Global and applies --no-color before any
// command runs.
func addGlobalFlags(cmd *cobra.Command, f *Factory) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.Global.ConfigPath, "config", "", "domain.toml to take categories and handlers from (default: discover them in Redis)")
	pf.StringVar(&f.Global.RedisURL, "redis-url", "", "Redis URL, rediss:// for TLS (default: $SEQCTL_REDIS_URL, else the config's broker.url, else "+DefaultRedisURL+")")
	pf.BoolVar(&f.Global.RedisCluster, "cluster", false, "connect to a Redis Cluster; --redis-url then names a seed node and more with addr, e.g. redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000 (default: $"+EnvRedisCluster+"=1, or the config's [broker] kind = \"redis-cluster\")")
	pf.StringVar(&f.Global.RedisTLS.CAFile, "redis-tls-ca", "", "PEM file of the CA that signed Redis's certificate; turns TLS on (default: $"+EnvRedisTLSCA+", else [broker.tls] ca_file, else the system roots)")
	pf.StringVar(&f.Global.RedisTLS.CertFile, "redis-tls-cert", "", "PEM client certificate for Redis's tls-auth-clients, with --redis-tls-key (default: $"+EnvRedisTLSCert+", else [broker.tls] cert_file)")
	pf.StringVar(&f.Global.RedisTLS.KeyFile, "redis-tls-key", "", "PEM private key of --redis-tls-cert (default: $"+EnvRedisTLSKey+", else [broker.tls] key_file)")
	pf.StringVar(&f.Global.RedisTLS.ServerName, "redis-tls-server-name", "", "name Redis's certificate must carry (default: $"+EnvRedisTLSServerName+", else [broker.tls] server_name, else the URL's host)")
	pf.StringVar(&f.Global.RedisTLS.MinVersion, "redis-tls-min-version", "", "lowest TLS version, 1.2 or 1.3 (default: $"+EnvRedisTLSMinVersion+", else [broker.tls] min_version, else 1.2)")
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

// Admin is the operator API the commands use. *admin.Admin implements it; tests use a
// fake.
type Admin interface {
	ListPartitions(ctx context.Context, f admin.Filter) ([]admin.Partition, error)
	Inspect(ctx context.Context, stream, handler string) (*admin.Inspection, error)
	Head(ctx context.Context, stream, handler string) (*admin.Head, error)
	Handlers(ctx context.Context, stream string) ([]string, error)
	Act(ctx context.Context, a admin.Action) (*admin.ActionResult, error)
	DLQ(ctx context.Context, stream string) ([]admin.DLQEntry, error)
	PlanReplay(ctx context.Context, stream, id string) (*admin.ReplayPlan, error)
	Replay(ctx context.Context, stream, id string, actor admin.Actor) (*admin.ReplayResult, error)
	Record(ctx context.Context, e admin.AuditEntry) error
	AuditEntries(ctx context.Context, q admin.AuditQuery) ([]admin.AuditEntry, error)
	DLQs(ctx context.Context) ([]admin.DLQSummary, error)
	PurgeDLQ(ctx context.Context, stream, through string, actor admin.Actor) (*admin.PurgeResult, error)
	Streams(ctx context.Context) ([]string, error)
	Instances(ctx context.Context) ([]admin.Instance, error)
	Groups(ctx context.Context, category string) ([]admin.Group, error)
	RemoveGroup(ctx context.Context, r admin.GroupRemoval) (*admin.GroupRemoved, error)
	Pause(ctx context.Context, req admin.PauseRequest) (*admin.PauseResult, error)
	Resume(ctx context.Context, req admin.PauseRequest) (*admin.PauseResult, error)
	PauseOf(ctx context.Context, stream, handler string) (*engine.PauseRecord, error)
	HandlerLimits() map[string]engine.HandlerLimit
	Limit(ctx context.Context, handler, value string) (*admin.Limit, error)
	Limits(ctx context.Context, q admin.LimitQuery) ([]admin.Limit, error)
	SetLimit(ctx context.Context, req admin.LimitRequest) (*admin.LimitResult, error)
	ClearLimit(ctx context.Context, req admin.LimitRequest) (*admin.LimitResult, error)
}

var _ Admin = (*admin.Admin)(nil)

// AdminOpener connects the operator API; close releases it.
type AdminOpener func(ctx context.Context) (a Admin, close func(), err error)

// orBackground is ctx, or context.Background() when ctx is nil.
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// openAdmin returns f.OpenAdmin when set (tests), else connects to Redis as the global
// flags say.
func (f *Factory) openAdmin(ctx context.Context) (Admin, func(), error) {
	a, _, closeAdmin, err := f.openAdminAt(ctx)
	return a, closeAdmin, err
}

// openAdminAt is openAdmin that also returns the URL of the Redis it connected to,
// password masked, for top's header ("" with f.OpenAdmin, which names none).
func (f *Factory) openAdminAt(ctx context.Context) (Admin, string, func(), error) {
	if f.OpenAdmin != nil {
		a, closeAdmin, err := f.OpenAdmin(ctx)
		return a, "", closeAdmin, err
	}
	a, conn, closeAdmin, err := dialAdmin(ctx, f.Global, os.Getenv, f.IOStreams.ErrOut)
	if err != nil {
		return nil, "", nil, err
	}
	return a, conn.shown, closeAdmin, nil
}

// connectAdmin loads the config (when given), resolves the connection (see
// resolveRedis), connects and checks the connection with a PING (to every master of a
// cluster). Warnings go to errOut.
func connectAdmin(ctx context.Context, g GlobalOptions, getenv func(string) string, errOut io.Writer) (Admin, func(), error) {
	a, _, closeAdmin, err := dialAdmin(ctx, g, getenv, errOut)
	return a, closeAdmin, err
}

// dialAdmin is connectAdmin, and also returns the connection it resolved: the one place
// an operator command turns its flags, environment and config into a Redis.
func dialAdmin(ctx context.Context, g GlobalOptions, getenv func(string) string, errOut io.Writer) (Admin, *redisConn, func(), error) {
	var cfg *config.Config
	opts := admin.Options{}
	if g.ConfigPath != "" {
		var err error
		if cfg, err = config.Load(g.ConfigPath); err != nil {
			return nil, nil, nil, err
		}
		if opts, err = admin.FromConfig(cfg); err != nil {
			return nil, nil, nil, err
		}
	}
	conn, err := resolveRedis(g.redisFlags(), cfg, getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	warnInsecureTLS(conn.tlsConfig(), func(msg string) { fmt.Fprintln(errOut, "seqctl: warning: "+msg) })
	// No automatic retries: a compare-and-act whose reply was lost would run again and
	// report "head moved" for the operator's own success. Fail fast and say so instead.
	conn.noRetries()
	routeRedisLogs(nil) // the errors that matter are returned; drop go-redis's own lines
	rdb := conn.newClient()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := conn.ping(pctx, rdb); err != nil {
		_ = rdb.Close()
		if msg := tlsProblem(err, conn.where()); msg != "" {
			return nil, nil, nil, errors.New(msg)
		}
		if msg := closedConnProblem(err, conn); msg != "" {
			return nil, nil, nil, errors.New(msg)
		}
		if msg := notClusterProblem(err, conn); msg != "" {
			return nil, nil, nil, errors.New(msg)
		}
		return nil, nil, nil, fmt.Errorf("cannot reach %s: %v (set --redis-url or %s)", conn.where(), err, config.EnvRedisURL)
	}
	return admin.New(rdb, opts), conn, func() { _ = rdb.Close() }, nil
}

// maskURL hides the secrets of a URL (its password, even when it does not parse, and
// secret-looking query values), for messages and the dashboard.
func maskURL(raw string) string {
	return redact.URL(raw)
}

// actor says who runs a command, for the audit log: the operating-system user and host.
func actor(command string) admin.Actor {
	a := admin.Actor{Command: command, User: os.Getenv("USER")}
	if u, err := user.Current(); err == nil && u.Username != "" {
		a.User = u.Username
	}
	a.Host, _ = os.Hostname()
	return a
}

// checkFormat validates -o for the operator commands.
func checkFormat(cmd *cobra.Command, v string) error {
	switch v {
	case "", "table", "wide", "json", "yaml":
		return nil
	}
	return usageErrorf(cmd.CommandPath(), "invalid value %q for --output: want table, wide, json or yaml", v)
}

// streamArg checks the single STREAM argument.
func streamArg(cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 1:
		return nil
	case 0:
		return usageErrorf(cmd.CommandPath(), "missing the STREAM argument, e.g. %s order:client-123", cmd.CommandPath())
	}
	return usageErrorf(cmd.CommandPath(), "unexpected argument %q: %s takes one STREAM", args[1], cmd.CommandPath())
}

// groupOf makes cmd a command that only groups subs: any arguments reach its RunE,
// groupCommand.
func groupOf(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.Args, cmd.RunE = cobra.ArbitraryArgs, groupCommand
	cmd.AddCommand(subs...)
	return cmd
}

// groupCommand is the RunE of a command that only groups subcommands: help without
// arguments, a usage error for an unknown subcommand.
func groupCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	names := []string{}
	for _, c := range cmd.Commands() {
		names = append(names, c.Name())
	}
	return usageErrorf(cmd.CommandPath(), "unknown command %q for %q (commands: %s)", args[0], cmd.CommandPath(), strings.Join(names, ", "))
}

// structured says the -o value asks for data (json or yaml) rather than text.
func structured(output string) bool { return output == "json" || output == "yaml" }

// writeData prints v as -o asks: indented JSON, or YAML with the same field names (the
// YAML is converted from the JSON, so the json tags are the one definition of both).
// Every command prints its data through here, so each format -o accepts is the format
// printed; a command calls it when structured(output) says so.
func writeData(w io.Writer, output string, v any) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("internal error: -o %q is not a data format", output)
}

// writeList prints the items of a list command as -o json|yaml asks (always an array,
// [] for none), or, when there are none, says empty on stderr when stdout is a
// terminal (a pipe gets nothing). It reports whether it printed the list: false leaves
// the table to the caller.
func writeList[T any](ios *IOStreams, output string, items []T, empty string) (bool, error) {
	if structured(output) {
		if items == nil {
			items = []T{}
		}
		return true, writeData(ios.Out, output, items)
	}
	if len(items) == 0 {
		if ios.IsTerminal {
			fmt.Fprintln(ios.ErrOut, empty)
		}
		return true, nil
	}
	return false, nil
}

// exitFor gives an operator error its exit code: not found 3, head moved or fenced 4,
// an invalid stream name 2; others keep theirs (1, or 2 for a config error).
func exitFor(err error) error {
	var ee *ExitError
	switch {
	case err == nil, errors.As(err, &ee):
		return err
	case errors.Is(err, admin.ErrNotFound), errors.Is(err, engine.ErrEntryGone):
		return &ExitError{Code: ExitNotFound, Err: err}
	case errors.Is(err, engine.ErrHeadMoved), errors.Is(err, engine.ErrFenced):
		return &ExitError{Code: ExitConflict, Err: err}
	case errors.Is(err, admin.ErrInvalidStream), errors.Is(err, keyspace.ErrInvalidStreamID):
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return err
}

// confirm asks a yes/no question on the terminal; only "y" or "yes" is yes.
func confirm(ios *IOStreams, question string) (bool, error) {
	fmt.Fprintf(ios.ErrOut, "%s [y/N] ", question)
	line, err := bufio.NewReader(ios.In).ReadString('\n')
	if err != nil && line == "" {
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(ios.ErrOut)
			return false, nil
		}
		return false, err
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// fmtMS renders milliseconds for a person: 850ms, 12.3s, 4m05s, 3h20m, 2d04h.
func fmtMS(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", ms)
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// fmtTime renders a time the same way everywhere: RFC 3339 in UTC, "-" for none.
func fmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// firstLine returns the first line of s, cut to n runes with "…".
func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	r := []rune(s)
	if n > 0 && len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
