package e2e

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
)

// exporterSample returns the value of the series name{labels} (name alone for no labels)
// on a /metrics body, and whether it is there.
func exporterSample(body, name, labels string) (float64, bool) {
	prefix := name + " "
	if labels != "" {
		prefix = name + "{" + labels + "} "
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// seqctl exporter with no seqctl run: the handler's series are at 0 from the start; one
// published event shows as a backlog of 1 on an unowned partition with a lag above 0
// within two refreshes; once a seqctl run has handled it, the backlog and the lag are 0
// and the partition idle. SIGTERM stops the exporter with status 0.
func TestExporterScaleFromZero(t *testing.T) {
	const interval = 500 * time.Millisecond
	f := newFixture(t, "exec.domain.toml", lockScript(t))
	exp := f.start("exporter", nil, "exporter", "--listen", "127.0.0.1:0", "--interval", interval.String(), "--log-format", "json")
	base := metricsAddr(t, exp)
	const pair = `category="step",handler="Stepper"`
	scrape := func() string { _, body := get(t, base+"/metrics"); return body }
	value := func(body, name, labels string) float64 {
		v, ok := exporterSample(body, name, labels)
		if !ok {
			t.Fatalf("/metrics has no %s{%s}:\n%s", name, labels, body)
		}
		return v
	}

	body := scrape()
	for _, name := range []string{"seqctl_backlog_events", "seqctl_lag_seconds", "seqctl_backlog_unknown_partitions"} {
		if v := value(body, name, pair); v != 0 {
			t.Errorf("%s = %v before any event, want 0", name, v)
		}
	}
	if v := value(body, "seqctl_backlog_partitions", pair+`,state="unowned"`); v != 0 {
		t.Errorf("unowned partitions = %v before any event, want 0", v)
	}

	f.publish([]step{{key: "client-7731", seq: 1}})
	published := time.Now()
	pending := func() bool {
		b := scrape()
		return value(b, "seqctl_backlog_events", pair) == 1 &&
			value(b, "seqctl_backlog_partitions", pair+`,state="unowned"`) == 1 &&
			value(b, "seqctl_lag_seconds", pair) > 0
	}
	testkit.WaitFor(t, 2*interval+500*time.Millisecond, "backlog 1, one unowned partition and a lag above 0", pending)
	t.Logf("the pending event showed %v after the publish", time.Since(published).Round(time.Millisecond))
	body = scrape()
	if strings.Contains(body, "client-7731") {
		t.Errorf("a label carries the partition key:\n%s", body)
	}
	if v := value(body, "seqctl_exporter_refresh_errors_total", ""); v != 0 {
		t.Errorf("refresh errors = %v, want 0", v)
	}

	a := f.run("a", []string{"SEQTEST_SLEEP=0"})
	a.waitReady(10 * time.Second)
	testkit.WaitFor(t, 10*time.Second, "backlog 0, lag 0 and the partition idle once handled", func() bool {
		b := scrape()
		return value(b, "seqctl_backlog_events", pair) == 0 && value(b, "seqctl_lag_seconds", pair) == 0 &&
			value(b, "seqctl_backlog_partitions", pair+`,state="idle"`) == 1
	})
	exp.stop(syscall.SIGTERM, 5*time.Second)
	if !strings.Contains(exp.logText(), "seqctl exporter: stopped") {
		t.Errorf("no stop line in the exporter's log:\n%s", exp.logText())
	}
}
