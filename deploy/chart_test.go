package deploy

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/seqctl"

// Secrets the tests put in the values: none may show outside a Secret.
const (
	secretURL      = "redis://app:url-s3cret@redis-primary.example:6379/0"
	secretPassword = "pw-s3cret"
	secretTLSKey   = "-----BEGIN PRIVATE KEY-----\nkey-s3cret\n-----END PRIVATE KEY-----\n"
)

// valueSets are the values the chart is rendered and linted with: its defaults, every
// optional feature on with the secrets in the values, and everything taken from
// existing objects.
var valueSets = map[string]map[string]any{
	"defaults": {},
	"everything on": {
		"redis": map[string]any{
			"url": secretURL, "password": secretPassword, "cluster": true,
			"tls": map[string]any{"enabled": true, "ca": "ca-pem", "cert": "cert-pem", "key": secretTLSKey, "serverName": "redis.example"},
		},
		"worker":           map[string]any{"shutdownTimeoutSeconds": 120, "shutdownMarginSeconds": 20, "extraArgs": []any{"--log-level=debug"}},
		"serviceMonitor":   map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		"prometheusRule":   map[string]any{"enabled": true},
		"grafanaDashboard": map[string]any{"enabled": true},
		"autoscaling":      map[string]any{"enabled": true},
	},
	"existing objects": {
		"domain": map[string]any{"existingConfigMap": "shop-domain"},
		"redis": map[string]any{
			"existingSecret": "shop-redis",
			"tls":            map[string]any{"enabled": true, "existingSecret": "shop-redis-tls"},
		},
	},
}

// manifest is one rendered object, decoded strictly into the type of its kind.
type manifest struct {
	source string // template file
	kind   string
	name   string
	raw    string
	obj    any
}

// render renders the chart with the values, as `helm template` does.
func render(tb testing.TB, values map[string]any) []manifest {
	tb.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		tb.Fatalf("load chart: %v", err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, common.ReleaseOptions{Name: "shop", Namespace: "orders", IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		tb.Fatalf("values: %v", err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		tb.Fatalf("render: %v", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []manifest
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---") {
			if isBlankYAML(doc) {
				continue
			}
			out = append(out, decodeStrict(tb, name, doc))
		}
	}
	return out
}

func isBlankYAML(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// decodeStrict decodes one manifest into the API type of its apiVersion and kind,
// refusing unknown fields.
func decodeStrict(tb testing.TB, source, doc string) manifest {
	tb.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		tb.Fatalf("%s: %v", source, err)
	}
	var obj any
	switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		obj = &ServiceMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		obj = &PrometheusRule{}
	case "keda.sh/v1alpha1 ScaledObject":
		obj = &ScaledObject{}
	default:
		tb.Fatalf("%s: no type known for %q", source, gvk)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		tb.Fatalf("%s: %s does not decode strictly: %v\n%s", source, tm.Kind, err, doc)
	}
	name := obj.(metav1.Object).GetName()
	if name == "" {
		tb.Errorf("%s: %s without a name", source, tm.Kind)
	}
	return manifest{source: source, kind: tm.Kind, name: name, raw: doc, obj: obj}
}

func find[T any](ms []manifest, name string) (T, bool) {
	for _, m := range ms {
		if o, ok := m.obj.(T); ok && m.name == name {
			return o, true
		}
	}
	var zero T
	return zero, false
}

func TestChartRendersStrictly(t *testing.T) {
	want := map[string][]string{
		"defaults": {"ConfigMap shop-seqctl-domain", "Deployment shop-seqctl-exporter", "Deployment shop-seqctl-worker",
			"PodDisruptionBudget shop-seqctl-worker", "Service shop-seqctl-exporter", "Service shop-seqctl-worker"},
		"everything on": {"ConfigMap shop-seqctl-dashboard", "ConfigMap shop-seqctl-domain", "Deployment shop-seqctl-exporter",
			"Deployment shop-seqctl-worker", "PodDisruptionBudget shop-seqctl-worker", "PrometheusRule shop-seqctl",
			"ScaledObject shop-seqctl-worker", "Secret shop-seqctl-redis", "Secret shop-seqctl-redis-tls",
			"Service shop-seqctl-exporter", "Service shop-seqctl-worker", "ServiceMonitor shop-seqctl"},
		"existing objects": {"Deployment shop-seqctl-exporter", "Deployment shop-seqctl-worker",
			"PodDisruptionBudget shop-seqctl-worker", "Service shop-seqctl-exporter", "Service shop-seqctl-worker"},
	}
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, m := range render(t, values) {
				got = append(got, m.kind+" "+m.name)
			}
			sort.Strings(got)
			if diff := cmp.Diff(want[name], got); diff != "" {
				t.Errorf("rendered objects (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChartLints(t *testing.T) {
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			res := lint.RunAll(chartDir, values, "orders")
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestWorkerPodKeepsItsPromises checks the worker Deployment: the grace period derived
// from the shutdown deadline, the probes, a rolling update that never lowers the
// count, and the restricted security context of every pod.
func TestWorkerPodKeepsItsPromises(t *testing.T) {
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			ms := render(t, values)
			w, ok := find[*appsv1.Deployment](ms, "shop-seqctl-worker")
			if !ok {
				t.Fatal("no worker Deployment")
			}
			shutdown, margin := int64(30), int64(15)
			if name == "everything on" {
				shutdown, margin = 120, 20
			}
			spec := w.Spec.Template.Spec
			if g := spec.TerminationGracePeriodSeconds; g == nil || *g != shutdown+margin {
				t.Errorf("terminationGracePeriodSeconds = %v, want %d (shutdown deadline %d + margin %d)", g, shutdown+margin, shutdown, margin)
			}
			c := spec.Containers[0]
			if flag := fmt.Sprintf("--shutdown-timeout=%ds", shutdown); !slices.Contains(c.Args, flag) {
				t.Errorf("args %q lack %s", c.Args, flag)
			}
			if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("probes: liveness %s, readiness %s; want /healthz and /readyz", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
			}
			if ru := w.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 0 {
				t.Errorf("rolling update %+v: want maxUnavailable 0", ru)
			}
			if autoscaled := name == "everything on"; autoscaled != (w.Spec.Replicas == nil) {
				t.Errorf("replicas = %v with autoscaling %v: KEDA alone must set the count when it scales", w.Spec.Replicas, autoscaled)
			}
			for _, m := range ms {
				if d, ok := m.obj.(*appsv1.Deployment); ok {
					checkRestricted(t, d)
				}
			}
		})
	}
}

func checkRestricted(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("%s: pod security context %+v: want runAsNonRoot and a non-zero runAsUser", d.Name, ps)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s/%s: no security context", d.Name, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s/%s: root filesystem not read-only", d.Name, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s/%s: privilege escalation allowed", d.Name, c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s/%s: capabilities %+v, want every one dropped", d.Name, c.Name, sc.Capabilities)
		}
		if c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s/%s: no memory request", d.Name, c.Name)
		}
	}
}

// TestSecretsStayInSecrets puts a Redis URL, a password and a TLS key in the values:
// they reach the pods through Secrets only, never through a ConfigMap, an argument or
// an environment value.
func TestSecretsStayInSecrets(t *testing.T) {
	ms := render(t, valueSets["everything on"])
	secrets := []string{"url-s3cret", secretPassword, "key-s3cret"}
	for _, m := range ms {
		if m.kind == "Secret" {
			continue
		}
		for _, s := range secrets {
			if strings.Contains(m.raw, s) || strings.Contains(m.raw, base64.StdEncoding.EncodeToString([]byte(s))) {
				t.Errorf("%s %s shows the secret %q", m.kind, m.name, s)
			}
		}
	}
	redis, _ := find[*corev1.Secret](ms, "shop-seqctl-redis")
	if got := string(redis.Data["url"]); got != secretURL {
		t.Errorf("Secret url = %q, want %q", got, secretURL)
	}
	w, _ := find[*appsv1.Deployment](ms, "shop-seqctl-worker")
	env := map[string]string{}
	for _, e := range w.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret " + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom != nil:
			env[e.Name] = "field"
		default:
			env[e.Name] = e.Value
		}
	}
	want := map[string]string{
		"POD_NAME":                     "field",
		"SEQCTL_REDIS_URL":             "secret shop-seqctl-redis/url",
		"SEQCTL_REDIS_PASSWORD":        "secret shop-seqctl-redis/password",
		"SEQCTL_REDIS_CLUSTER":         "1",
		"SEQCTL_REDIS_TLS_CA":          "/etc/seqctl/tls/ca.crt",
		"SEQCTL_REDIS_TLS_CERT":        "/etc/seqctl/tls/tls.crt",
		"SEQCTL_REDIS_TLS_KEY":         "/etc/seqctl/tls/tls.key",
		"SEQCTL_REDIS_TLS_SERVER_NAME": "redis.example",
	}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("worker environment (-want +got):\n%s", diff)
	}
}

// TestValuesAreDocumented checks that every key of values.yaml has a comment right
// above it, or belongs to a structured default (resources, a security context) whose
// key has one.
func TestValuesAreDocumented(t *testing.T) {
	f, err := os.Open(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keyLine := regexp.MustCompile(`^(\s*)([A-Za-z0-9_.-]+):(.*)$`)
	type open struct {
		indent    int
		commented bool
	}
	var stack []open // the keys enclosing the current line
	prevComment, blockIndent := false, -1
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		indent := len(line) - len(strings.TrimLeft(line, " "))
		trimmed := strings.TrimSpace(line)
		if blockIndent >= 0 && (trimmed == "" || indent > blockIndent) {
			continue // inside a block scalar
		}
		blockIndent = -1
		if trimmed == "" {
			prevComment = false
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			prevComment = true
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			prevComment = false
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		covered := prevComment
		for _, o := range stack {
			covered = covered || o.commented
		}
		rest := strings.TrimSpace(m[3])
		if rest != "" && !covered {
			t.Errorf("values.yaml:%d: %s has no comment saying what it does, its default and what breaks", n, m[2])
		}
		if rest == "|" || rest == ">" {
			blockIndent = indent
		}
		if rest == "" {
			stack = append(stack, open{indent: indent, commented: prevComment})
		}
		prevComment = false
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
