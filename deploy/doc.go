// Package deploy holds the tests of what deploys seqctl: the Helm chart in helm/seqctl,
// the Grafana dashboard in grafana/ and the alerting rules in prometheus/. They run
// offline (no cluster, no registry, no daemon) as part of `make test`:
//
//   - chart_test.go renders the chart with its default values and with every optional
//     feature on, decodes each manifest strictly into the Kubernetes type of its kind
//     (crd_test.go holds the custom resources' types, from their published schemas),
//     and runs helm lint;
//   - rules_test.go checks the rules and runs their unit tests with promtool;
//   - metrics_test.go starts seqctl run and seqctl exporter against a private
//     redis-server and fails when the dashboard, the rules or the ScaledObject name a
//     series neither exports.
//
// This is a Go module of its own, so that Helm, the Kubernetes API types and the image
// builder (package image) stay out of the dependencies of seqctl's library users.
package deploy
