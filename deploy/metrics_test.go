package deploy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
)

// metricsDomain makes every series appear: an HTTP handler with a limit key whose cap
// of 1 leaves the second tenant's partition throttled while the first one's event is
// held in the handler.
const metricsDomain = `name = "deploy"

[broker]
kind = "redis"

[server.partitioning]
lease_ttl_ms = 2000
heartbeat_interval_seconds = 0.2
poll_interval_seconds = 0.05

[[events]]
name = "OrderPlaced"
category = "order"
fields = ["order_id", "client_id", "tenant_id"]

[[handlers]]
name = "OrderProjector"
part_of = "order"
handles = ["OrderPlaced"]
sequential_by = "client_id"
limit_by = "tenant_id"
limit_concurrency = 1

[handlers.deliver]
http = "%s"
timeout = "60s"
`

// buildSeqctl builds the seqctl binary from the repository root, with the flags of the
// end-to-end tests of `make test` (the race detector there), so that under `make test`
// the build cache already holds every package.
func buildSeqctl(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "seqctl")
	args := []string{"build", "-o", bin}
	if os.Getenv("SEQCTL_DEPLOY_RACE") != "0" && runtime.GOARCH == "amd64" {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/seqctl/seqctl/cmd/seqctl")...)
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build seqctl: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startProcess starts seqctl with args and stops it with SIGTERM at cleanup.
func startProcess(tb testing.TB, bin string, args ...string) *testkit.Buffer {
	tb.Helper()
	var logs testkit.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return &logs
}

func scrape(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// sampleNames returns the names of the samples of a text exposition (a histogram's
// _bucket, _sum and _count included).
func sampleNames(exposition string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(exposition))
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			names[l[:i]] = true
		}
	}
	return names
}

// seriesRef finds the seqctl series a PromQL expression or a dashboard names.
var seriesRef = regexp.MustCompile(`\bseqctl_[a-z0-9_]+`)

// TestEveryReferencedSeriesIsExported runs seqctl run and seqctl exporter against a
// private redis-server, scrapes both, and checks every seqctl_ series that the
// dashboard, the alerting rules and the ScaledObject name against what they export: a
// renamed or removed metric fails here.
func TestEveryReferencedSeriesIsExported(t *testing.T) {
	if testing.Short() {
		t.Skip("builds seqctl and runs it against Redis")
	}
	exported := exportedSeries(t)
	sources := referencingSources(t)
	var names []string
	for src, text := range sources {
		refs := seriesRef.FindAllString(text, -1)
		if len(refs) == 0 {
			t.Errorf("%s names no seqctl series", src)
		}
		for _, ref := range refs {
			if !exported[ref] {
				names = append(names, fmt.Sprintf("%s: %s", src, ref))
			}
		}
	}
	sort.Strings(names)
	for _, n := range names {
		t.Errorf("%s is exported by neither seqctl run nor seqctl exporter", n)
	}
}

// exportedSeries builds seqctl, runs seqctl run and seqctl exporter against a private
// redis-server with one partition in its handler and one throttled by its tenant's cap,
// and returns the names of the samples both export.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	bin := buildSeqctl(t)
	srv := redistest.Start(t)

	release := make(chan struct{})
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(handler.Close)
	t.Cleanup(func() { close(release) }) // runs before handler.Close and after the processes stop

	dir := t.TempDir()
	config := filepath.Join(dir, "domain.toml")
	if err := os.WriteFile(config, fmt.Appendf(nil, metricsDomain, handler.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	global := []string{"--config", config, "--redis-url", srv.URL}
	runAddr, exporterAddr := freeAddr(t), freeAddr(t)
	runLogs := startProcess(t, bin, append([]string{"run", "--metrics-addr", runAddr, "--shutdown-timeout", "1s"}, global...)...)
	exporterLogs := startProcess(t, bin, append([]string{"exporter", "--listen", exporterAddr, "--interval", "200ms"}, global...)...)

	for i, client := range []string{"c-1", "c-2"} {
		data := fmt.Sprintf(`{"order_id":"o-%d","client_id":%q,"tenant_id":"acme"}`, i, client)
		publish := exec.Command(bin, append([]string{"publish", "--event", "OrderPlaced", "--data", data}, global...)...)
		if out, err := publish.CombinedOutput(); err != nil {
			t.Fatalf("seqctl publish: %v\n%s", err, out)
		}
	}

	// One partition in its handler, the other throttled by its tenant's cap: the
	// exporter lists the waiting tenant once the owner's heartbeat says so.
	var run, exporter string
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		run, exporter = scrape(runAddr), scrape(exporterAddr)
		if strings.Contains(run, "seqctl_ready 1") && strings.Contains(exporter, `seqctl_limit_waiting_partitions{handler="OrderProjector",value="acme"} 1`) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no throttled partition in the exporter's series\nrun /metrics:\n%s\nexporter /metrics:\n%s\nrun log:\n%s\nexporter log:\n%s",
				run, exporter, runLogs, exporterLogs)
		case <-time.After(100 * time.Millisecond):
		}
	}
	exported := sampleNames(run)
	for n := range sampleNames(exporter) {
		exported[n] = true
	}
	return exported
}

// referencingSources returns the texts that name seqctl series, by where they come from:
// the dashboard, the alerting rules and each trigger of the rendered ScaledObject.
func referencingSources(t *testing.T) map[string]string {
	t.Helper()
	sources := map[string]string{}
	for _, f := range []string{"grafana/seqctl.json", rulesFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources[f] = string(b)
	}
	so, ok := find[*ScaledObject](render(t, valueSets["everything on"]), "shop-seqctl-worker")
	if !ok {
		t.Fatal("no ScaledObject rendered")
	}
	for _, tr := range so.Spec.Triggers {
		sources["ScaledObject trigger "+tr.Name] = tr.Metadata["query"]
	}
	return sources
}
