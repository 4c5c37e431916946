package validate

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/config"
)

func TestValidateParse(t *testing.T) {
	for _, tt := range []cmdtest.ParseCase[Options]{
		{Name: "defaults", Argv: nil, Want: Options{ConfigPath: "domain.toml"}},
		{Name: "config", Argv: []string{"--config", "deploy/domain.toml"}, Want: Options{ConfigPath: "deploy/domain.toml"}},
		{Name: "short flags", Argv: []string{"-c", "x.toml", "-o", "json"}, Want: Options{ConfigPath: "x.toml", Output: "json"}},
		{Name: "long output", Argv: []string{"--output=json"}, Want: Options{ConfigPath: "domain.toml", Output: "json"}},
		{Name: "unknown output", Argv: []string{"-o", "csv"}, WantErr: `invalid value "csv" for --output: want json or yaml`},
		{Name: "empty config", Argv: []string{"--config", ""}, WantErr: "--config is empty"},
		{Name: "config without value", Argv: []string{"--config"}, WantErr: "flag needs an argument"},
		{Name: "positional argument", Argv: []string{"domain.toml"}, WantErr: `unexpected argument "domain.toml"`},
		{Name: "unknown flag", Argv: []string{"--strict"}, WantErr: "unknown flag: --strict"},
	} {
		t.Run(tt.Name, func(t *testing.T) {
			ios, _, _, _ := cmdutil.NewTestIOStreams()
			var got *Options
			cmd := NewCmd(&cmdutil.Factory{IOStreams: ios}, func(o *Options) error { got = o; return nil })
			err := cmdtest.ParseCmd(t, cmd, tt.Argv...)
			cmdtest.CheckParsed(t, err, got, tt.Want, tt.WantErr, cmpopts.IgnoreFields(Options{}, "IO"))
			var ue *cmdutil.UsageError
			if errors.As(err, &ue) && ue.Command != "seqctl validate" {
				t.Errorf("UsageError.Command = %q, want seqctl validate", ue.Command)
			}
			if err == nil && got.IO != ios {
				t.Errorf("run function not called with the factory's streams")
			}
		})
	}
}

func TestValidateRun(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	t.Setenv(config.EnvOutboxDSN, "")
	inline := cmdtest.WriteDomain(t, "inline")
	invalid := cmdtest.WriteConfig(t, "name = \"x\"\n[broker]\nkind = \"kafka\"\n")
	missing := filepath.Join(t.TempDir(), "absent.toml")
	sqlSink := cmdtest.WriteDomain(t, "sqlsink", "STATEMENT", "SELECT $1::text")
	t.Setenv("SEQCTL_TEST_ORDERS_DB", "")
	tests := []struct {
		name       string
		opts       Options
		tty        bool
		color      bool
		wantCode   int
		wantStdout []string // fragments, in order
		wantStderr string   // exact
	}{
		{
			name: "terminal summary", opts: Options{ConfigPath: inline}, tty: true,
			wantStdout: []string{
				"✓ " + inline + ` is valid: domain "lab" on the inline broker (sequential_by is a no-op: inline handles messages in order)`,
				"CATEGORY  KIND   TYPES  PARTITION KEY",
				"ping      event  Ping   host (no-op on the inline broker)",
				"clock     event  Tick   not partitioned",
				"HANDLER  KIND   CATEGORY  SEQUENTIAL BY  DELIVERY",
				"Pinger   event  ping      host           go",
				"Ticker   event  clock     -              go",
			},
		},
		{
			name: "terminal summary in colour", opts: Options{ConfigPath: inline}, tty: true, color: true,
			wantStdout: []string{"\x1b[32m✓\x1b[0m", "\x1b[1mCATEGORY"},
		},
		{
			name: "plain rows for a pipe", opts: Options{ConfigPath: inline},
			wantStdout: []string{
				"valid\t" + inline + "\tlab\tinline\n",
				"category\tping\tevent\thost\tno-op\n",
				"category\tclock\tevent\t-\t-\n",
				"handler\tPinger\tevent\tping\thost\tgo\n",
				"handler\tTicker\tevent\tclock\t-\tgo\n",
			},
		},
		{
			name: "invalid config", opts: Options{ConfigPath: invalid}, wantCode: cmdutil.ExitUsage,
			wantStderr: invalid + `:3: broker.kind: unknown broker kind "kafka"; use "redis" (partitioned, production) or "inline" (in process, for tests)` + "\n",
		},
		{
			name: "sql sink without its DSN in the environment", opts: Options{ConfigPath: sqlSink}, wantCode: cmdutil.ExitFailure,
			wantStderr: sqlSink + ": handlers[0].deliver.sql.dsn_env: handler OrderProjector: the environment variable SEQCTL_TEST_ORDERS_DB is not set (or empty): " +
				"export the database's DSN in it (postgres://USER@HOST:5432/DB or sqlite://FILE) before starting seqctl run\n",
		},
		{
			name: "missing file", opts: Options{ConfigPath: missing}, wantCode: cmdutil.ExitUsage,
			wantStderr: missing + ": the config file does not exist; pass --config with the path of your domain.toml\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, out, errOut := cmdutil.NewTestIOStreams()
			ios.IsTerminal, ios.Color = tt.tty, tt.color
			opts := tt.opts
			opts.IO = ios
			err := validateRun(&opts)
			cmdutil.PrintError(ios.ErrOut, err)
			if got := cmdutil.ExitCode(err); got != tt.wantCode {
				t.Errorf("exit code = %d, want %d (err %v)", got, tt.wantCode, err)
			}
			rest := out.String()
			for _, frag := range tt.wantStdout {
				i := strings.Index(rest, frag)
				if i < 0 {
					t.Fatalf("stdout lacks %q (in order); stdout:\n%s", frag, out.String())
				}
				rest = rest[i+len(frag):]
			}
			if tt.wantStdout == nil && out.Len() > 0 {
				t.Errorf("stdout = %q, want nothing", out.String())
			}
			if diff := cmp.Diff(tt.wantStderr, errOut.String()); diff != "" {
				t.Errorf("stderr mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateJSON(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	path := cmdtest.WriteDomain(t, "inline")
	r := cmdtest.RunCLI(t, false, "validate", "--config", path, "-o", "json")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("code %d, stderr %q", r.Code, r.Stderr)
	}
	var got validateSummary
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("stdout is not the JSON summary: %v\n%s", err, r.Stdout)
	}
	want := validateSummary{
		File:   path,
		Name:   "lab",
		Broker: brokerSummary{Kind: "inline"},
		Categories: []categorySummary{
			{Name: "ping", Kind: "event", Types: []string{"Ping"}, PartitionKey: "host"},
			{Name: "clock", Kind: "event", Types: []string{"Tick"}},
		},
		Handlers: []handlerSummary{
			{Name: "Pinger", Kind: "event", Category: "ping", SequentialBy: "host", Delivery: "go"},
			{Name: "Ticker", Kind: "event", Category: "clock", Delivery: "go"},
		},
		ProcessManagers: []pmSummary{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON summary mismatch (-want +got):\n%s", diff)
	}
}

// validate -o json on an invalid file prints the problems as JSON on stdout (exit 2),
// and the unknown key and the registration problem come in the same run.
// A handler that takes batches shows them in the delivery column and in the JSON.
func TestValidateShowsBatches(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	path := cmdtest.WriteConfig(t, strings.Replace(cmdtest.DomainText(t, "inline"), "sequential_by = \"host\"\n",
		"sequential_by = \"host\"\nbatch_max = 32\nbatch_wait = \"20ms\"\n", 1))
	r := cmdtest.RunCLI(t, true, "validate", "--config", path)
	if r.Code != 0 || !strings.Contains(r.Stdout, "Pinger   event  ping      host           go, up to 32 per call, waits 20ms") {
		t.Errorf("code %d, stdout:\n%s\nwant Pinger's delivery with its batches", r.Code, r.Stdout)
	}
	r = cmdtest.RunCLI(t, false, "validate", "--config", path, "-o", "json")
	var got validateSummary
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("stdout is not the JSON summary: %v\n%s", err, r.Stdout)
	}
	want := []handlerSummary{
		{Name: "Pinger", Kind: "event", Category: "ping", SequentialBy: "host", Delivery: "go", BatchMax: 32, BatchWait: "20ms"},
		{Name: "Ticker", Kind: "event", Category: "clock", Delivery: "go"},
	}
	if diff := cmp.Diff(want, got.Handlers); diff != "" {
		t.Errorf("handlers (-want +got):\n%s", diff)
	}
}

func TestValidateJSONProblems(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	cmdtest.RepoRoot(t)
	file := "testdata/invalid/unknown_key_and_sequential_by.toml"
	r := cmdtest.RunCLI(t, false, "validate", "--config", file, "-o", "json")
	if r.Code != cmdutil.ExitUsage {
		t.Errorf("exit code = %d, want 2", r.Code)
	}
	cmdtest.Golden(t, "testdata/invalid/unknown_key_and_sequential_by.json.golden", r.Stdout)
	var got validateProblems
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.Stdout)
	}
	if got.Valid || got.File != file || len(got.Problems) != 2 || got.Problems[0].Line != 12 || got.Problems[1].Path != "handlers[0].max_retry" {
		t.Errorf("problems = %+v, want the sequential_by problem (line 12) and the unknown key (line 17)", got)
	}
	if !strings.Contains(r.Stderr, file+":17: handlers[0].max_retry: unknown key") {
		t.Errorf("stderr lacks the problem lines:\n%s", r.Stderr)
	}
	// A file that does not parse at all still gets its JSON.
	bad := cmdtest.WriteConfig(t, "name = \"x\"\n[broker\n")
	r = cmdtest.RunCLI(t, false, "validate", "--config", bad, "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil || r.Code != cmdutil.ExitUsage || len(got.Problems) == 0 {
		t.Errorf("syntax error: exit %d, stdout %q (%v)", r.Code, r.Stdout, err)
	}
}

func TestValidateYAML(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	t.Setenv(config.EnvOutboxDSN, "")
	cmdtest.RepoRoot(t)
	r := cmdtest.RunCLI(t, false, "validate", "--config", "testdata/domain.toml", "-o", "yaml")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
	cmdtest.Golden(t, "testdata/domain.validate.yaml.golden", r.Stdout)
	r = cmdtest.RunCLI(t, false, "version", "-o", "yaml")
	if r.Code != 0 || !strings.Contains(r.Stdout, "version: v1.2.3\n") || !strings.Contains(r.Stdout, "commit: abc1234\n") {
		t.Errorf("version -o yaml: exit %d\n%s", r.Code, r.Stdout)
	}
}

// TestValidateGoldens pins the exact output of 'seqctl validate' for the repository's
// example and for every testdata/invalid file. Run go test ./cmd/... -update to rewrite
// them after an intended change.
func TestValidateGoldens(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	t.Setenv(config.EnvOutboxDSN, "")
	cmdtest.RepoRoot(t)

	t.Run("domain.toml", func(t *testing.T) {
		r := cmdtest.RunCLI(t, false, "validate", "--config", "testdata/domain.toml")
		if r.Code != 0 || r.Stderr != "" {
			t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
		}
		cmdtest.Golden(t, "testdata/domain.validate.golden", r.Stdout)
	})
	t.Run("domain.toml json", func(t *testing.T) {
		r := cmdtest.RunCLI(t, false, "validate", "--config", "testdata/domain.toml", "-o", "json")
		if r.Code != 0 || r.Stderr != "" {
			t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
		}
		cmdtest.Golden(t, "testdata/domain.validate.json.golden", r.Stdout)
	})

	files, err := filepath.Glob("testdata/invalid/*.toml")
	if err != nil || len(files) < 10 {
		t.Fatalf("want at least 10 testdata/invalid files, got %d (%v)", len(files), err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".toml")
		t.Run(name, func(t *testing.T) {
			r := cmdtest.RunCLI(t, false, "validate", "--config", file)
			if r.Code != cmdutil.ExitUsage {
				t.Errorf("exit code = %d, want %d", r.Code, cmdutil.ExitUsage)
			}
			if r.Stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.Stdout)
			}
			for _, line := range strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n") {
				if !strings.HasPrefix(line, file+":") {
					t.Errorf("stderr line %q does not start with %s:", line, file)
				}
			}
			cmdtest.Golden(t, strings.TrimSuffix(file, ".toml")+".golden", r.Stderr)
		})
	}
}

// A SQL sink whose DSN variable is set validates, and shows its delivery as sql.
func TestValidateSQLSink(t *testing.T) {
	path := cmdtest.WriteDomain(t, "sqlsink", "STATEMENT", "SELECT $1::text")
	t.Setenv("SEQCTL_TEST_ORDERS_DB", "postgres://app@db:5432/app")
	ios, _, out, _ := cmdutil.NewTestIOStreams()
	if err := validateRun(&Options{IO: ios, ConfigPath: path}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "handler\tOrderProjector\tevent\torder\tclient_id\tsql\n") {
		t.Errorf("the summary does not show the sql delivery:\n%s", out.String())
	}
	if strings.Contains(out.String(), "app@db") {
		t.Errorf("the summary shows the DSN:\n%s", out.String())
	}
}
