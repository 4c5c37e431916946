package run

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/config"
)

// TestSecretsNotInHaltRecords runs seqctl run for real against an HTTP target whose
// password and token are secrets: the attempts fail (nothing listens), the partition
// halts, and neither the halt record shown by 'seqctl head show -o json' nor the run's
// log holds the secrets, while both name the masked target.
func TestSecretsNotInHaltRecords(t *testing.T) {
	t.Setenv(config.EnvRedisURL, "")
	srv := redistest.Start(t)
	const token = "tok-3f9a-secret"
	cfg := cmdtest.WriteDomain(t, "http-unreachable", "TOKEN", token)
	r := StartRun(t, Options{ConfigPath: cfg, Redis: redisconn.Flags{URL: srv.URL}, InstanceID: "secrets", LogFormat: "json", LogLevel: "debug", ShutdownTimeout: 5 * time.Second})
	defer func() {
		r.Sigs <- syscall.SIGTERM
		r.Wait(t, 10*time.Second)
	}()
	cmdtest.PublishOne(t, cfg, srv.URL, `{"client_id":"c-1"}`)
	var shown cmdtest.Result
	testkit.WaitFor(t, 20*time.Second, "the halt record of order:c-1", func() bool {
		shown = cmdtest.RunCLI(t, false, "head", "show", "order:c-1", "--handler", "Projector", "--config", cfg, "--redis-url", srv.URL, "-o", "json")
		return strings.Contains(shown.Stdout, "connection refused")
	})
	t.Logf("head show:\n%s", shown.Stdout)
	for what, out := range map[string]string{"head show": shown.Stdout + shown.Stderr, "run log": r.Logs.String()} {
		for _, s := range []string{"w0rd", token} {
			if strings.Contains(out, s) {
				t.Errorf("%s shows %q:\n%s", what, s, out)
			}
		}
		if !strings.Contains(out, "http://hook:xxxxx@127.0.0.1:1/orders?token=xxxxx") {
			t.Errorf("%s does not name the masked target:\n%s", what, out)
		}
	}
}
