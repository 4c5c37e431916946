// Package enginetest runs engines for the tests of the packages built on the engine
// (admin, the outbox's callers, the CLI). The engine's own tests cannot import it (it
// imports the engine); they share internal/testkit with everyone.
package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
)

// QuickTiming is the lease timing tests run with: a lease TTL of 2 s, so that a takeover
// after a stopped owner comes within seconds.
var QuickTiming = engine.LeaseTiming{LeaseTTL: 2 * time.Second, HeartbeatInterval: 400 * time.Millisecond, PollInterval: 50 * time.Millisecond}

// Start starts an engine of cfg, with QuickTiming, a 100 ms discovery interval and a 5 s
// shutdown timeout where cfg leaves them zero, and shuts it down at cleanup.
func Start(tb testing.TB, cfg engine.EngineConfig) *engine.Engine {
	tb.Helper()
	if cfg.Timing == (engine.LeaseTiming{}) {
		cfg.Timing = QuickTiming
	}
	if cfg.DiscoveryInterval == 0 {
		cfg.DiscoveryInterval = 100 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	e, err := engine.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}
