package top

import (
	"context"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
)

// BenchmarkSnapshotAtScale times the dashboard's first snapshot against the Redis of
// $SEQCTL_SCALE_REDIS_URL, filled by scripts/bench-operator-scale.sh (category order,
// handler OrderProjector), and reports the process's peak RSS. Skipped without it.
//
//	SEQCTL_SCALE_REDIS_URL=redis://127.0.0.1:6391/0 go test ./cmd/seqctl/internal/top -run '^$' -bench SnapshotAtScale -benchtime 1x
func BenchmarkSnapshotAtScale(b *testing.B) {
	adm := admin.New(testkit.ScaleClient(b), admin.Options{Topology: &admin.Topology{Categories: []admin.CategoryTopology{
		{Name: "order", Groups: []admin.GroupTopology{{Name: "OrderProjector"}}}}}})
	src := &Source{Admin: adm}
	for b.Loop() {
		start := time.Now()
		snap, err := src.Snapshot(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/snapshot")
		b.ReportMetric(float64(len(snap.Partitions)), "rows")
	}
	b.ReportMetric(float64(testkit.PeakRSS(b))/(1<<20), "MB-peak-rss")
}
