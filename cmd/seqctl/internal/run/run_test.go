package run

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/config"
)

func TestRunParse(t *testing.T) {
	defaults := Options{ConfigPath: "domain.toml", LogFormat: "text", LogLevel: "info", ShutdownTimeout: 30 * time.Second}
	cmdtest.ParseTable(t, "", NewCmd, []cmdtest.ParseCase[Options]{
		{Name: "defaults", Want: defaults},
		{
			Name: "every flag",
			Argv: []string{"--config", "deploy/domain.toml", "--redis-url", "redis://r:6379/1", "--instance-id", "worker-1",
				"--metrics-addr", ":9464", "--log-format", "json", "--log-level", "debug", "--shutdown-timeout", "5s"},
			Want: Options{ConfigPath: "deploy/domain.toml", Redis: redisconn.Flags{URL: "redis://r:6379/1"}, InstanceID: "worker-1",
				MetricsAddr: ":9464", LogFormat: "json", LogLevel: "debug", ShutdownTimeout: 5 * time.Second},
		},
		{Name: "empty config is ./domain.toml", Argv: []string{"--config", ""}, Want: defaults},
		{Name: "bad log format", Argv: []string{"--log-format", "yaml"}, WantErr: `invalid value "yaml" for --log-format`},
		{Name: "bad log level", Argv: []string{"--log-level", "verbose"}, WantErr: `invalid value "verbose" for --log-level`},
		{Name: "zero shutdown timeout", Argv: []string{"--shutdown-timeout", "0s"}, WantErr: "--shutdown-timeout must be positive"},
		{Name: "bad duration", Argv: []string{"--shutdown-timeout", "soon"}, WantErr: `invalid argument "soon"`},
		{Name: "instance id with a space", Argv: []string{"--instance-id", "a b"}, WantErr: "contains white space"},
		{Name: "positional argument", Argv: []string{"domain.toml"}, WantErr: `unexpected argument "domain.toml"`},
	}, cmpopts.IgnoreFields(Options{}, "IO"), cmpopts.IgnoreUnexported(Options{}))
}

// TestRunConfigProblems checks the failures 'seqctl run' finds before it connects to
// anything: each exits 2 and names the problem.
func TestRunConfigProblems(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	t.Setenv("RUN_TEST_SECRET", "")
	commands := cmdtest.DomainText(t, "commands")
	tests := []struct {
		name       string
		config     string
		extraArgs  []string
		wantStderr []string
	}{
		{
			name: "handler without a deliver table",
			config: commands + `
[[handlers]]
name = "OrderProjector"
handles = ["OrderPlaced"]
sequential_by = "client_id"
`,
			wantStderr: []string{`handlers[1]: handler "OrderProjector" has no [handlers.deliver] table, so seqctl run cannot deliver its events`},
		},
		{
			name: "unset signing secret and a missing program",
			config: commands + `
[[handlers]]
name = "A"
handles = ["OrderPlaced"]
[handlers.deliver]
http = "http://127.0.0.1:1/a"
signing_key_env = "RUN_TEST_SECRET"

[[handlers]]
name = "B"
handles = ["OrderPlaced"]
[handlers.deliver]
exec = ["/nonexistent/handler"]
`,
			wantStderr: []string{
				"handlers[1].deliver.signing_key_env: the environment variable RUN_TEST_SECRET is not set (or empty)",
				`handlers[2].deliver.exec: cannot run "/nonexistent/handler"`,
			},
		},
		{
			name:       "only command handlers",
			config:     commands,
			wantStderr: []string{"nothing to run"},
		},
		{
			name: "inline broker",
			config: strings.Replace(commands, `url = "redis://127.0.0.1:1/0"`, `kind = "inline"`, 1) + `
[[handlers]]
name = "A"
handles = ["OrderPlaced"]
[handlers.deliver]
exec = ["cat"]
`,
			wantStderr: []string{`broker.kind: seqctl run needs the redis broker, not "inline"`},
		},
		{
			name:       "bad redis url flag",
			config:     commands + "\n[[handlers]]\nname = \"A\"\nhandles = [\"OrderPlaced\"]\n[handlers.deliver]\nexec = [\"cat\"]\n",
			extraArgs:  []string{"--redis-url", "http://nope"},
			wantStderr: []string{"invalid Redis URL http://nope (from --redis-url)"},
		},
		{
			name:       "invalid toml",
			config:     "name = \n",
			wantStderr: []string{"domain.toml:1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := cmdtest.WriteConfig(t, tt.config)
			res := cmdtest.RunCLI(t, false, append([]string{"run", "--config", path}, tt.extraArgs...)...)
			if res.Code != cmdutil.ExitUsage {
				t.Errorf("exit code = %d, want 2; stderr:\n%s", res.Code, res.Stderr)
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(res.Stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, res.Stderr)
				}
			}
		})
	}
}

func TestRunMissingConfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.toml")
	res := cmdtest.RunCLI(t, false, "run", "--config", missing)
	if res.Code != cmdutil.ExitUsage || res.Stderr != missing+": the config file does not exist; pass --config with the path of your domain.toml\n" {
		t.Errorf("code %d, stderr %q", res.Code, res.Stderr)
	}
}

// TestRunHelp checks that the help documents the signals and exit codes.
func TestRunHelp(t *testing.T) {
	res := cmdtest.RunCLI(t, false, "run", "--help")
	for _, w := range []string{"A second SIGTERM or SIGINT\nforces the exit (status 1)", "Example", "--shutdown-timeout", "/readyz"} {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("help lacks %q", w)
		}
	}
}

// inProcessRun is a 'seqctl run' in the test process, so the race detector sees it: the
// signals it gets, what it returns, and its log.
type inProcessRun struct {
	Sigs chan os.Signal
	errc chan error
	Logs *testkit.Buffer
}

// StartRun starts runRun with opts, its stderr and its signals the test's, and waits
// until it is ready.
func StartRun(t *testing.T, opts Options) *inProcessRun {
	t.Helper()
	r := &inProcessRun{Sigs: make(chan os.Signal, 2), errc: make(chan error, 1), Logs: &testkit.Buffer{}}
	ios, _, _, _ := cmdutil.NewTestIOStreams()
	ios.ErrOut = r.Logs
	opts.IO, opts.signals = ios, r.Sigs
	go func() { r.errc <- runRun(context.Background(), &opts) }()
	testkit.WaitFor(t, 10*time.Second, "seqctl run to be ready", func() bool { return strings.Contains(r.Logs.String(), "seqctl run: ready") })
	return r
}

// Wait returns what runRun returned, failing the test when it has not returned within
// timeout.
func (r *inProcessRun) Wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-r.errc:
		return err
	case <-time.After(timeout):
		t.Fatalf("runRun did not return within %v of the signal", timeout)
		return nil
	}
}

// TestRunInProcess drives runRun in the test process: it delivers an event to an exec
// handler, shuts down on the first signal with nil (exit 0), and on a second signal
// during a slow shutdown returns exit status 1 at once.
func TestRunInProcess(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.Start(t)
	dir := t.TempDir()
	handler := filepath.Join(dir, "handler.sh")
	cmdtest.WriteFile(t, handler, "#!/bin/sh\ncat >> \"$OUT/got\"\necho >> \"$OUT/got\"\nsleep \"${HOLD:-0}\"\n")
	if err := os.Chmod(handler, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUT", dir)
	cfg := cmdtest.WriteDomain(t, "exec", "HANDLER", handler)
	opts := Options{ConfigPath: cfg, Redis: redisconn.Flags{URL: srv.URL}, InstanceID: "in-process", LogFormat: "text", LogLevel: "info", ShutdownTimeout: 10 * time.Second}
	got := func() string { b, _ := os.ReadFile(filepath.Join(dir, "got")); return string(b) }

	t.Run("graceful", func(t *testing.T) {
		r := StartRun(t, opts)
		cmdtest.PublishOne(t, cfg, srv.URL, `{"client_id":"c-1"}`)
		testkit.WaitFor(t, 10*time.Second, "the event of c-1 delivered", func() bool { return strings.Contains(got(), `"key":"c-1"`) })
		r.Sigs <- syscall.SIGTERM
		if err := r.Wait(t, 10*time.Second); err != nil {
			t.Errorf("runRun = %v, want nil (exit 0)", err)
		}
		if !strings.Contains(r.Logs.String(), "signal received: shutting down gracefully") {
			t.Errorf("logs:\n%s", r.Logs.String())
		}
	})
	t.Run("second signal", func(t *testing.T) {
		t.Setenv("HOLD", "30")
		r := StartRun(t, opts)
		cmdtest.PublishOne(t, cfg, srv.URL, `{"client_id":"c-2"}`)
		testkit.WaitFor(t, 10*time.Second, "the event of c-2 delivered", func() bool { return strings.Contains(got(), `"key":"c-2"`) })
		r.Sigs <- syscall.SIGTERM
		r.Sigs <- syscall.SIGINT
		if err := r.Wait(t, 5*time.Second); cmdutil.ExitCode(err) != cmdutil.ExitFailure {
			t.Errorf("runRun = %v, want exit 1", err)
		}
	})
}
