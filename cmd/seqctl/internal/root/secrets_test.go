package root

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/deliver"
	"github.com/seqctl/seqctl/pkg/demo"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/outbox"
)

// TestSecretsNeverPrinted sends passwords holding %, @ and : (some of which make the URL
// unparsable) and secret query values through every path that shows a URL or DSN: the
// Redis URL of operator commands and of seqctl run, for one node and in cluster mode
// (parse errors, connection errors against a real Redis, the dashboard header), the
// config loader's problems, the outbox DSN errors, the HTTP delivery target in its
// startup log line, its errors and the failure reasons that become halt records, and the
// demo. None of the outputs may contain the secret.
func TestSecretsNeverPrinted(t *testing.T) {
	commands := cmdtest.DomainText(t, "commands")
	t.Setenv(config.EnvRedisURL, "")
	t.Setenv(config.EnvOutboxDSN, "")
	srv := redistest.Start(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", "the-real-one").Err(); err != nil {
		t.Fatal(err)
	}
	hostPort := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "redis://"), "/0")

	secrets := []string{
		"50%off",      // not a valid escape: the URL does not parse
		"p@ss:w0rd",   // parses: the userinfo runs to the last @
		"a:b@c%d",     // all three, unparsable
		"12/34#x?y",   // parses with host ":12": the password ends the authority early
		"%zz@@::pass", // unparsable
	}
	for i, secret := range secrets {
		t.Run(fmt.Sprint(i), func(t *testing.T) { // not the secret: it would be in TempDir's path
			redisURL := "redis://app:" + secret + "@" + hostPort + "/0"
			deadURL := "redis://:" + secret + "@127.0.0.1:1/0"
			hookURL := "http://hook:" + secret + "@127.0.0.1:1/orders"
			tokenURL := "http://127.0.0.1:1/orders?token=" + strings.NewReplacer("%", "", "#", "", "?", "", "&", "").Replace(secret) + "-tok"
			dsn := "postgres://app:" + secret + "@db:5432/app?sslmode=disable"
			check := func(what, out string, hidden ...string) {
				t.Helper()
				for _, h := range append(hidden, secret) {
					if strings.Contains(out, h) {
						t.Errorf("%s shows %q:\n%s", what, h, out)
					}
				}
			}
			tokenSecret := tokenURL[strings.Index(tokenURL, "token=")+len("token="):]

			// Operator commands: --redis-url, a wrong password against a real Redis and an
			// unreachable one.
			for _, u := range []string{redisURL, deadURL} {
				res := cmdtest.RunCLI(t, false, "partitions", "list", "--redis-url", u)
				if res.Code == 0 {
					t.Errorf("partitions list %s succeeded", u)
				}
				check("partitions list --redis-url", res.Stdout+res.Stderr)
			}
			check("top header", cmdutil.MaskURL(redisURL))
			conn, _ := redisconn.Resolve(redisconn.Flags{URL: redisURL}, nil, func(string) string { return "" })
			check("redisconn.Resolve shown", conn.Shown)

			// The same in cluster mode, with cluster URLs: --cluster against the real (not
			// a cluster) Redis and an unreachable one, $SEQCTL_REDIS_CLUSTER, a config of
			// kind "redis-cluster" (its problems, and seqctl run on it).
			clusterURL := "redis://app:" + secret + "@" + hostPort + "?addr=" + hostPort
			deadCluster := "redis://:" + secret + "@127.0.0.1:1?addr=127.0.0.1:2"
			for _, u := range []string{clusterURL, deadCluster} {
				res := cmdtest.RunCLI(t, false, "partitions", "list", "--cluster", "--redis-url", u)
				if res.Code == 0 {
					t.Errorf("partitions list --cluster %s succeeded", u)
				}
				check("partitions list --cluster --redis-url", res.Stdout+res.Stderr)
			}
			t.Setenv(redisconn.EnvRedisCluster, "1")
			t.Setenv(config.EnvRedisURL, clusterURL)
			res := cmdtest.RunCLI(t, false, "groups", "list")
			check("groups list with "+redisconn.EnvRedisCluster, res.Stdout+res.Stderr)
			t.Setenv(redisconn.EnvRedisCluster, "")
			t.Setenv(config.EnvRedisURL, "")
			if conn, err := redisconn.Resolve(redisconn.Flags{URL: clusterURL, Cluster: true}, nil, func(string) string { return "" }); err != nil {
				check("redisconn.Resolve cluster error", err.Error())
			} else {
				check("redisconn.Resolve cluster shown", conn.Shown+" "+conn.Where())
			}
			clusterDomain := strings.Replace(commands, `url = "redis://127.0.0.1:1/0"`, fmt.Sprintf("kind = \"redis-cluster\"\nurl = %q", clusterURL), 1)
			if _, err := config.Parse("domain.toml", []byte(clusterDomain)); err != nil {
				check("redis-cluster config problems", err.Error())
			}
			{
				path := cmdtest.WriteConfig(t, clusterDomain+`
[[handlers]]
name = "A"
handles = ["OrderPlaced"]
[handlers.deliver]
http = "http://127.0.0.1:1/orders"
`)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				ios, _, out, errOut := cmdutil.NewTestIOStreams()
				code := cmdtest.RunRoot(ctx, &cmdutil.Factory{IOStreams: ios, Build: cmdtest.TestBuild}, []string{"run", "--config", path})
				cancel()
				if code == 0 {
					t.Error("seqctl run on a redis-cluster config against one Redis succeeded")
				}
				check("seqctl run on a redis-cluster config", out.String()+errOut.String())
			}

			// seqctl run: a config whose broker URL and HTTP target hold the secret (the
			// run logs its delivery targets, then fails to connect or to parse).
			for _, broker := range []string{redisURL, deadURL} {
				runFor := func(args ...string) cmdtest.Result {
					// An unreachable Redis is waited for: stop the run after a while.
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					defer cancel()
					ios, _, out, errOut := cmdutil.NewTestIOStreams()
					code := cmdtest.RunRoot(ctx, &cmdutil.Factory{IOStreams: ios, Build: cmdtest.TestBuild}, args)
					return cmdtest.Result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
				}
				path := cmdtest.WriteConfig(t, strings.Replace(commands, `url = "redis://127.0.0.1:1/0"`, fmt.Sprintf("url = %q", broker), 1)+fmt.Sprintf(`
[[handlers]]
name = "A"
handles = ["OrderPlaced"]
[handlers.deliver]
http = %q

[[handlers]]
name = "B"
handles = ["OrderPlaced"]
[handlers.deliver]
http = %q
`, hookURL, tokenURL))
				res := runFor("run", "--config", path, "--log-format", "json")
				if !strings.Contains(res.Stderr, `"target"`) && !strings.Contains(res.Stderr, "is not a valid URL") {
					t.Errorf("run logged no delivery target:\n%s", res.Stderr)
				}
				check("seqctl run", res.Stdout+res.Stderr, tokenSecret)
				res = runFor("run", "--config", path, "--redis-url", redisURL)
				check("seqctl run --redis-url", res.Stdout+res.Stderr, tokenSecret)
			}

			// The config loader: a deliver URL that does not parse, and the broker URL.
			_, err := config.Parse("domain.toml", []byte(strings.Replace(commands, `url = "redis://127.0.0.1:1/0"`, fmt.Sprintf("url = %q", redisURL), 1)+fmt.Sprintf(`
[[handlers]]
name = "A"
handles = ["OrderPlaced"]
[handlers.deliver]
http = "http://hook:%s@127.0.0.1:1/%%zz"

[outbox]
dsn = %q
`, secret, "mysql://app:"+secret+"@db/app")))
			if err == nil {
				t.Error("config with a bad deliver URL and DSN loaded")
			}
			check("config problems", fmt.Sprint(err))

			// The outbox DSN.
			for _, d := range []string{dsn, "sqlite://?password=" + secret, "mysql://app:" + secret + "@db/app", "host=db password=" + strings.ReplaceAll(secret, " ", "") + " dbname=app"} {
				if db, _, err := outbox.Open(d); err == nil {
					_ = db.Close()
				} else {
					check("outbox.Open("+d+")", err.Error())
				}
			}

			// HTTP delivery: the constructor's error, the startup binding (logged), and
			// the failure reason (kept in the halt record).
			for _, u := range []string{hookURL, tokenURL, "http://hook:" + secret + "@[::1/x"} {
				fn, err := deliver.HTTP(deliver.HTTPConfig{URL: u})
				if err != nil {
					check("deliver.HTTP error", err.Error(), tokenSecret)
					continue
				}
				herr := fn(context.Background(), engine.Event{ID: "e1", Type: "OrderPlaced", Category: "order", Key: "k", Data: []byte(`{}`)})
				if herr == nil {
					t.Fatalf("delivery to %s succeeded", u)
				}
				check("halt reason", herr.Error(), tokenSecret)
			}

			// seqctl dev against a URL that does not parse.
			if _, err := demo.Start(context.Background(), demo.Options{RedisURL: "redis://:" + secret + "@h:%zz/0"}); err != nil {
				check("demo.Start", err.Error())
			}
		})
	}
}
