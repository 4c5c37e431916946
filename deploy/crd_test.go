package deploy

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The custom resources the chart renders, as Go types written from their published
// CRD schemas, restricted to the fields the chart may set: strict decoding into them
// refuses a field the schema does not have, or a value of the wrong type.

// ServiceMonitor is monitoring.coreos.com/v1 ServiceMonitor (prometheus-operator,
// example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml).
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ServiceMonitorSpec `json:"spec"`
}

// ServiceMonitorSpec is the spec of a ServiceMonitor.
type ServiceMonitorSpec struct {
	JobLabel          string               `json:"jobLabel,omitempty"`
	TargetLabels      []string             `json:"targetLabels,omitempty"`
	PodTargetLabels   []string             `json:"podTargetLabels,omitempty"`
	Endpoints         []Endpoint           `json:"endpoints"`
	Selector          metav1.LabelSelector `json:"selector"`
	NamespaceSelector *NamespaceSelector   `json:"namespaceSelector,omitempty"`
	SampleLimit       *uint64              `json:"sampleLimit,omitempty"`
}

// NamespaceSelector picks the namespaces of a ServiceMonitor's Services.
type NamespaceSelector struct {
	Any        bool     `json:"any,omitempty"`
	MatchNames []string `json:"matchNames,omitempty"`
}

// Endpoint is one scraped port of a ServiceMonitor.
type Endpoint struct {
	Port          string              `json:"port,omitempty"`
	TargetPort    *string             `json:"targetPort,omitempty"`
	Path          string              `json:"path,omitempty"`
	Scheme        string              `json:"scheme,omitempty"`
	Params        map[string][]string `json:"params,omitempty"`
	Interval      string              `json:"interval,omitempty"`
	ScrapeTimeout string              `json:"scrapeTimeout,omitempty"`
	HonorLabels   bool                `json:"honorLabels,omitempty"`
}

// PrometheusRule is monitoring.coreos.com/v1 PrometheusRule (prometheus-operator,
// example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml).
type PrometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              PrometheusRuleSpec `json:"spec"`
}

// PrometheusRuleSpec is the spec of a PrometheusRule.
type PrometheusRuleSpec struct {
	Groups []RuleGroup `json:"groups,omitempty"`
}

// RuleGroup is a group of rules, as in a Prometheus rules file.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Limit    *int   `json:"limit,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is an alerting or recording rule. The schema's expr is int-or-string; the chart
// writes strings.
type Rule struct {
	Record        string            `json:"record,omitempty"`
	Alert         string            `json:"alert,omitempty"`
	Expr          string            `json:"expr"`
	For           string            `json:"for,omitempty"`
	KeepFiringFor string            `json:"keep_firing_for,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// ScaledObject is keda.sh/v1alpha1 ScaledObject (kedacore/keda,
// config/crd/bases/keda.sh_scaledobjects.yaml).
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec is the spec of a ScaledObject.
type ScaledObjectSpec struct {
	ScaleTargetRef        ScaleTarget    `json:"scaleTargetRef"`
	PollingInterval       *int32         `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32         `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32         `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32         `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32         `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32         `json:"maxReplicaCount,omitempty"`
	Triggers              []ScaleTrigger `json:"triggers"`
}

// ScaleTarget names the scaled workload.
type ScaleTarget struct {
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	Name                   string `json:"name"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

// ScaleTrigger is one scaler; metadata is a map of strings in the schema.
type ScaleTrigger struct {
	Type              string            `json:"type"`
	Name              string            `json:"name,omitempty"`
	UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	MetricType        string            `json:"metricType,omitempty"`
	AuthenticationRef *struct {
		Name string `json:"name"`
		Kind string `json:"kind,omitempty"`
	} `json:"authenticationRef,omitempty"`
}
