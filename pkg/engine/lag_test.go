package engine

import (
	"context"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
)

// Stats.Lag reports, per handler and category, the age of the oldest event an owned
// partition has taken and not handled: it grows while a handler holds the partition's
// backlog, and the pair is gone once the backlog is handled.
func TestStatsReportTheLag(t *testing.T) {
	srv, _, b := startNode(t)
	release := make(chan struct{})
	d := testDomain(t, func(ctx context.Context, ev Event) error {
		<-release
		return nil
	}, nil)
	e := startEngine(t, srv, d, "i1", 2*time.Second)
	publish(t, b, d, "c-1", 1, false)
	publish(t, b, d, "c-1", 2, false)
	lagOf := func() (time.Duration, bool) {
		for _, l := range e.Stats().Lag {
			if l.Handler == "Projector" && l.Category == "order" {
				return l.Age, true
			}
		}
		return 0, false
	}
	testkit.WaitFor(t, 5*time.Second, "a lag of 300ms or more while the handler holds", func() bool {
		age, ok := lagOf()
		return ok && age >= 300*time.Millisecond
	})
	close(release)
	testkit.WaitFor(t, 5*time.Second, "no lag once both events are handled", func() bool {
		_, ok := lagOf()
		return !ok
	})
}
