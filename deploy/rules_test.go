package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

const (
	rulesFile     = "prometheus/seqctl-alerts.yaml"
	rulesTestFile = "prometheus/seqctl-alerts_test.yaml"
	runbookFile   = "../docs/operator-runbook.md"
	runbookURL    = "https://github.com/seqctl/seqctl/blob/main/docs/operator-runbook.md#"
)

// promtool returns promtool's path. CI installs it (.ci/run); elsewhere the test skips
// without it, saying how to get it.
func promtool(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal("promtool not found on PATH: .ci/run installs it (apt-get install prometheus)")
		}
		tb.Skip("promtool not found on PATH: apt-get install prometheus (Debian), or brew install prometheus")
	}
	return p
}

func TestRulesCheckAndUnitTests(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func readRules(tb testing.TB) PrometheusRuleSpec {
	tb.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		tb.Fatal(err)
	}
	var spec PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		tb.Fatalf("%s: %v", rulesFile, err)
	}
	return spec
}

// TestEveryAlertIsTestedBothWays checks that the unit tests make each alert fire once
// and stay quiet once.
func TestEveryAlertIsTestedBothWays(t *testing.T) {
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &suite); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range suite.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] {
				t.Errorf("%s: no unit test makes it fire", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: no unit test where it does not fire", r.Alert)
			}
		}
	}
}

// TestEveryAlertHasARunbookSection checks each alert's runbook_url against the headings
// of docs/operator-runbook.md, as GitHub makes their anchors.
func TestEveryAlertHasARunbookSection(t *testing.T) {
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	inFence := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			u := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(u, runbookURL)
			switch {
			case !ok:
				t.Errorf("%s: runbook_url %q is not a section of %s", r.Alert, u, filepath.Base(runbookFile))
			case !anchors[anchor]:
				t.Errorf("%s: %s has no section #%s", r.Alert, filepath.Base(runbookFile), anchor)
			}
			if r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("%s: want a summary and a severity", r.Alert)
			}
		}
	}
}

// TestChartShipsTheRules checks that the chart's PrometheusRule holds the rules file's
// groups unchanged.
func TestChartShipsTheRules(t *testing.T) {
	pr, ok := find[*PrometheusRule](render(t, valueSets["everything on"]), "shop-seqctl")
	if !ok {
		t.Fatal("no PrometheusRule rendered")
	}
	if diff := cmp.Diff(readRules(t), pr.Spec); diff != "" {
		t.Errorf("PrometheusRule spec differs from %s (-file +chart):\n%s", rulesFile, diff)
	}
}
