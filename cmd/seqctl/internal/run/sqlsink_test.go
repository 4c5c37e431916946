package run

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/internal/faultproxy"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/outbox"
)

// migratedOrdersDB returns the DSN of a fresh PostgreSQL schema with an orders table and
// the inbox table (made with 'seqctl inbox migrate').
func migratedOrdersDB(t *testing.T, cfg string) string {
	t.Helper()
	dsn := sqltest.PostgresDSN(t)
	db, _, err := outbox.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE orders (n bigserial PRIMARY KEY, id text UNIQUE, client text, seq int)"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SEQCTL_TEST_ORDERS_DB", dsn)
	r := cmdtest.RunCLI(t, false, "inbox", "migrate", "--config", cfg)
	if r.Code != 0 || !strings.Contains(r.Stdout, "handler OrderProjector: inbox table seqctl_inbox is up to date (postgres)") {
		t.Fatalf("inbox migrate: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	return dsn
}

const ordersStatement = "INSERT INTO orders(id, client, seq) VALUES ($1::jsonb->>'order_id', $3, ($1::jsonb->>'seq')::int)"

// seqctl run with a SQL sink applies each event once into the database.
func TestRunSQLSink(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.Start(t)
	cfg := cmdtest.WriteDomain(t, "sqlsink", "STATEMENT", ordersStatement)
	dsn := migratedOrdersDB(t, cfg)
	r := StartRun(t, Options{ConfigPath: cfg, Redis: redisconn.Flags{URL: srv.URL}, InstanceID: "sql", LogFormat: "text", LogLevel: "info", ShutdownTimeout: 10 * time.Second})
	for i, c := range []string{"c-1", "c-2", "c-1"} {
		cmdtest.PublishOne(t, cfg, srv.URL, `{"order_id":"o-`+string(rune('1'+i))+`","client_id":"`+c+`","seq":`+string(rune('1'+i))+`}`)
	}
	db, _, _ := outbox.Open(dsn)
	defer db.Close()
	testkit.WaitFor(t, 20*time.Second, "three orders", func() bool {
		var n int
		_ = db.QueryRow("SELECT count(*) FROM orders").Scan(&n)
		return n == 3
	})
	r.Sigs <- syscall.SIGTERM
	if err := r.Wait(t, 15*time.Second); err != nil {
		t.Fatalf("runRun = %v", err)
	}
	if strings.Contains(r.Logs.String(), dsn) {
		t.Errorf("the logs show the DSN:\n%s", r.Logs.String())
	}
	// c-2's partition is reaped (its stream deleted): prune removes its inbox row only.
	if err := srv.Client(t).Del(context.Background(), "order:c-2").Err(); err != nil {
		t.Fatal(err)
	}
	dry := cmdtest.RunCLI(t, false, "inbox", "prune", "--config", cfg, "--redis-url", srv.URL, "--dry-run")
	if dry.Code != 0 || !strings.Contains(dry.Stdout, "handler OrderProjector: inbox seqctl_inbox: 2 rows, would remove 1 of reaped partitions") {
		t.Fatalf("prune --dry-run: exit %d\n%s%s", dry.Code, dry.Stdout, dry.Stderr)
	}
	pr := cmdtest.RunCLI(t, false, "inbox", "prune", "--config", cfg, "--redis-url", srv.URL, "-o", "json")
	if pr.Code != 0 || !strings.Contains(pr.Stdout, `"removed": 1`) {
		t.Fatalf("prune: exit %d\n%s%s", pr.Code, pr.Stdout, pr.Stderr)
	}
	// Left: c-1's row, and the floor row of the removed row's hash slot (a stream
	// "__floor__:{slot}") that keeps its generation.
	var left []string
	var floor int64
	rows, _ := db.Query("SELECT stream, generation FROM seqctl_inbox ORDER BY stream")
	for rows.Next() {
		var s string
		var g int64
		_ = rows.Scan(&s, &g)
		if strings.HasPrefix(s, "__floor__:") {
			floor = g
			continue
		}
		left = append(left, s)
	}
	rows.Close()
	if strings.Join(left, ",") != "order:c-1" || floor <= 0 {
		t.Errorf("inbox rows left %v with floor %d, want only order:c-1's and a floor", left, floor)
	}
}

// A statement the database refuses to prepare, and a login it refuses, end seqctl run
// with exit 1, naming the handler and the problem; an unset DSN variable too.
func TestRunSQLSinkRefusals(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.Start(t)
	good := cmdtest.WriteDomain(t, "sqlsink", "STATEMENT", ordersStatement)
	dsn := migratedOrdersDB(t, good)
	refusing := sqltest.RefusingPostgres(t)
	for _, tt := range []struct {
		name, stmt, dsn string
		want            []string
	}{
		{"statement refused", "INSERT INTO no_such_table VALUES ($1)", dsn,
			[]string{"handler OrderProjector", "the database refused the statement", `relation "no_such_table" does not exist`}},
		{"wrong password", ordersStatement, "postgres://app:wrong-pass@" + refusing + "/app?sslmode=disable",
			[]string{"handler OrderProjector", "password authentication failed"}},
		{"dsn unset", ordersStatement, "",
			[]string{"handler OrderProjector", "SEQCTL_TEST_ORDERS_DB is not set"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SEQCTL_TEST_ORDERS_DB", tt.dsn)
			cfg := cmdtest.WriteDomain(t, "sqlsink", "STATEMENT", tt.stmt)
			ios, _, _, errOut := cmdutil.NewTestIOStreams()
			opts := Options{IO: ios, ConfigPath: cfg, Redis: redisconn.Flags{URL: srv.URL}, InstanceID: "sql", LogFormat: "text", LogLevel: "info", ShutdownTimeout: time.Second}
			err := runRun(context.Background(), &opts)
			cmdutil.PrintError(ios.ErrOut, err)
			if code := cmdutil.ExitCode(err); code != cmdutil.ExitFailure {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, errOut.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(errOut.String(), "wrong-pass") {
				t.Errorf("stderr shows the password:\n%s", errOut.String())
			}
		})
	}
}

// A database that is down when seqctl run starts is waited for: one log line for the
// cause, /readyz not ready and naming the handler; once it is up, run goes on.
func TestRunSQLSinkWaitsForTheDatabase(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.Start(t)
	cfg := cmdtest.WriteDomain(t, "sqlsink", "STATEMENT", ordersStatement)
	dsn := migratedOrdersDB(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens yet
	t.Setenv("SEQCTL_TEST_ORDERS_DB", strings.Replace(dsn, sqltest.PostgresAddr(), addr, 1))

	logs := &testkit.Buffer{}
	ios, _, _, _ := cmdutil.NewTestIOStreams()
	ios.ErrOut = logs
	sigs := make(chan os.Signal, 2)
	opts := Options{IO: ios, ConfigPath: cfg, Redis: redisconn.Flags{URL: srv.URL}, InstanceID: "sql", LogFormat: "text", LogLevel: "info",
		ShutdownTimeout: 10 * time.Second, MetricsAddr: "127.0.0.1:0", signals: sigs}
	errc := make(chan error, 1)
	go func() { errc <- runRun(context.Background(), &opts) }()
	// The metrics listen on a port the system picks (a port picked here and closed could
	// be taken before the run binds it); the log names it.
	var metricsAddr string
	testkit.WaitFor(t, 10*time.Second, "the log to name the metrics address", func() bool {
		m := regexp.MustCompile(`"serving metrics" addr=(\S+)`).FindStringSubmatch(logs.String())
		if m != nil {
			metricsAddr = m[1]
		}
		return m != nil
	})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testkit.WaitFor(t, 10*time.Second, "/readyz to name the unreachable database", func() bool {
		code, body := readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "the database of handler OrderProjector cannot be reached")
	})
	time.Sleep(2 * time.Second) // several retries
	if n := strings.Count(logs.String(), "database unreachable"); n != 1 {
		t.Errorf("logged %d times for one cause, want once:\n%s", n, logs.String())
	}
	faultproxy.StartOn(t, addr, sqltest.PostgresAddr()) // the database comes up
	testkit.WaitFor(t, 20*time.Second, "seqctl run ready once the database is up", func() bool {
		code, _ := readyz()
		return code == http.StatusOK && strings.Contains(logs.String(), "seqctl run: ready")
	})
	sigs <- syscall.SIGTERM
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("runRun = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("runRun did not return after SIGTERM")
	}
}
