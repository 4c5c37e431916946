// Package ctxwait waits for a duration or for a context to end, whichever comes first:
// the one sleep of the engine's retry loops, the SQL sink's backoff and the CLI's pacer.
package ctxwait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends; it reports whether d passed with ctx still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}
