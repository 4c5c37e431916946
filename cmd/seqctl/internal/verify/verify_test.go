package verify

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/config"
)

// A run on a private Redis finds nothing, prints a row per kind of violation and the
// figures, exits 0 and leaves no key of the workload behind; -o json prints the report.
func TestVerifyRun(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.Start(t)
	res := cmdtest.RunCLI(t, false, "verify", "run", "--redis-url", srv.URL, "--keys", "30", "--events", "10")
	if res.Code != cmdutil.ExitOK {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"lost\t0\t-", "out_of_order\t0\t-", "cap_exceeded\t0\t-", "300 events published, 300 applied"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.Stdout)
		}
	}
	keys, err := srv.Client(t).Keys(context.Background(), "*verify_*").Result()
	if err != nil || len(keys) > 0 {
		t.Errorf("keys left behind: %v %v", keys, err)
	}

	res = cmdtest.RunCLI(t, false, "verify", "run", "--redis-url", srv.URL, "--keys", "20", "--events", "5",
		"--batch-max", "4", "--tenants", "3", "--tenant-cap", "1", "--rate", "400", "--duration", "2s",
		"--poison", "2", "--faults", "--fault-every", "500ms", "--seed", "7", "-o", "json")
	if res.Code != cmdutil.ExitOK {
		t.Fatalf("under faults: exit %d\nstdout %s\nstderr %s", res.Code, res.Stdout, res.Stderr)
	}
	var out struct {
		Seed   uint64         `json:"seed"`
		Faults map[string]int `json:"faults"`
		Report struct {
			Published, Applied int
			Violations         []struct {
				Kind  string
				Count int
			} `json:"violations"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		t.Fatalf("-o json: %v\n%s", err, res.Stdout)
	}
	faults := 0
	for _, n := range out.Faults {
		faults += n
	}
	// 20 keys, 400 ev/s for 2 s: 40 events each; keys 0 and 1 halt on event 21.
	if out.Seed != 7 || faults == 0 || out.Report.Published != 800 || out.Report.Applied != 760 || len(out.Report.Violations) != 7 {
		t.Errorf("report: %+v\nstderr %s", out, res.Stderr)
	}
	if !strings.Contains(res.Stderr, "faults from seed 7") {
		t.Errorf("stderr does not name the seed:\n%s", res.Stderr)
	}
}

// Bad flags are usage errors that say what to do.
func TestVerifyRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--keys", "0"}, "--keys is 0; it must be at least 1"},
		{[]string{"--duration", "1m"}, "--duration needs --rate"},
		{[]string{"--seed", "3"}, "--seed chooses the faults: add --faults"},
		{[]string{"--batch-max", "5000"}, "at most 1000"},
	} {
		res := cmdtest.RunCLI(t, false, append([]string{"verify", "run"}, tc.args...)...)
		if res.Code != cmdutil.ExitUsage || !strings.Contains(res.Stderr, tc.says) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d saying %q", tc.args, res.Code, res.Stderr, cmdutil.ExitUsage, tc.says)
		}
	}
}
