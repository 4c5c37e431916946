package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
)

// BenchmarkRefreshAtScale times one refresh of the backlog exporter against the Redis of
// $SEQCTL_SCALE_REDIS_URL, filled by scripts/bench-operator-scale.sh, and reports the
// process's peak RSS. Skipped without it.
//
//	SEQCTL_SCALE_REDIS_URL=redis://127.0.0.1:6391/0 go test ./pkg/metrics -run '^$' -bench RefreshAtScale -benchtime 1x
func BenchmarkRefreshAtScale(b *testing.B) {
	top := &admin.Topology{Categories: []admin.CategoryTopology{{Name: "order", Groups: []admin.GroupTopology{{Name: "OrderProjector"}}}}}
	e := NewBacklogExporter(BacklogOptions{Lister: admin.New(testkit.ScaleClient(b), admin.Options{Topology: top}), Declared: DeclaredPairs(top)})
	for b.Loop() {
		start := time.Now()
		if err := e.Refresh(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/refresh")
	}
	b.ReportMetric(float64(testkit.PeakRSS(b))/(1<<20), "MB-peak-rss")
}
