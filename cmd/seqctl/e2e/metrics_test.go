package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
)

// metricsAddr reads the address 'seqctl run' serves metrics on from its JSON log.
func metricsAddr(t *testing.T, p *proc) string {
	t.Helper()
	line := p.waitLog(`"msg":"serving metrics"`, 10*time.Second)
	var rec struct {
		Addr string `json:"addr"`
	}
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Addr == "" {
		t.Fatalf("cannot read the metrics address from %q: %v", line, err)
	}
	return "http://" + rec.Addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sampleRE matches one sample line of the text exposition: name, optional labels, value.
var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)`)

// labelRE matches one label pair inside the braces.
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// TestRunMetricsScrape: /metrics exposes the documented metrics, no label value carries
// a partition key, and /healthz and /readyz answer.
func TestRunMetricsScrape(t *testing.T) {
	f := newFixture(t, "exec.domain.toml", lockScript(t))
	a := f.run("a", []string{"SEQTEST_SLEEP=0"}, "--metrics-addr", "127.0.0.1:0")
	base := metricsAddr(t, a)
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	a.waitReady(10 * time.Second)
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}

	keys := []string{"secret-key-alpha", "secret-key-beta", "secret-key-gamma"}
	f.publish(append(steps(keys, 1, 5), step{"poison-secret-key", 1}))
	var body string
	testkit.WaitFor(t, 20*time.Second, "15 processed events and a halt in the metrics", func() bool {
		_, body = get(t, base+"/metrics")
		return strings.Contains(body, `seqctl_events_processed_total{category="step",handler="Stepper"} 15`) &&
			strings.Contains(body, `seqctl_partition_halts_total{category="step",handler="Stepper"} 1`)
	})

	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("unparsable sample %q", line)
			continue
		}
		names[m[1]] = true
		for _, l := range labelRE.FindAllStringSubmatch(m[3], -1) {
			if strings.Contains(l[2], "secret-key") || strings.Contains(l[2], "step:") {
				t.Errorf("label %s=%q of %s carries a partition key", l[1], l[2], m[1])
			}
		}
	}
	if strings.Contains(body, "secret-key") {
		t.Error("a partition key appears in the scrape")
	}
	for _, want := range []string{
		"seqctl_events_processed_total",
		"seqctl_events_failed_total",
		"seqctl_events_retried_total",
		"seqctl_handler_duration_seconds_bucket",
		"seqctl_handler_duration_seconds_sum",
		"seqctl_handler_duration_seconds_count",
		"seqctl_publish_to_handle_latency_seconds_bucket",
		"seqctl_partitions_owned",
		"seqctl_lease_acquisitions_total",
		"seqctl_lease_losses_total",
		"seqctl_fenced_rejections_total",
		"seqctl_partitions_halted",
		"seqctl_partition_halts_total",
		"seqctl_live_partitions",
		"seqctl_relay_backlog",
		"seqctl_ready",
		"seqctl_lag_seconds",
		"go_goroutines",
		"process_resident_memory_bytes",
	} {
		if !names[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, want := range []string{
		`seqctl_events_failed_total{category="step",handler="Stepper"} 3`,
		`seqctl_events_retried_total{category="step",handler="Stepper"} 2`,
		`seqctl_partitions_owned{handler="Stepper"} 4`,
		`seqctl_partitions_halted 1`,
		`seqctl_live_partitions{category="step"} 4`,
		`seqctl_lease_acquisitions_total{handler="Stepper"} 4`,
		`seqctl_ready 1`,
		`seqctl_relay_backlog 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	a.stop(syscall.SIGTERM, 10*time.Second)
}

// TestRunWaitsForRedis checks that 'seqctl run' started while Redis is down says so in
// its log, keeps trying, and runs once Redis is back.
func TestRunWaitsForRedis(t *testing.T) {
	f := newFixture(t, "exec.domain.toml", lockScript(t))
	f.srv.Kill()
	a := f.run("a", nil, "--metrics-addr", "127.0.0.1:0")
	base := metricsAddr(t, a)
	a.waitLog(`"msg":"redis unreachable: retrying"`, 10*time.Second)
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d while Redis is down, want 503", code)
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d while Redis is down, want 200", code)
	}
	f.srv.Restart()
	a.waitReady(15 * time.Second)
	f.publish([]step{{"k0", 1}})
	testkit.WaitFor(t, 10*time.Second, "the event to be delivered", func() bool {
		return complete(readExecLog(t, f.dir), []string{"k0"}, 1)
	})
	a.stop(syscall.SIGINT, 10*time.Second)
}
