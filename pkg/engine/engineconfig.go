package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// LeaseTiming is the partitioned consumer's timing ([server.partitioning]).
type LeaseTiming struct {
	// LeaseTTL is how long a lease survives without renewal (default 15s). Shorter means
	// faster failover after a crash.
	LeaseTTL time.Duration
	// HeartbeatInterval is how often the session is renewed (default LeaseTTL/5). It must
	// be below LeaseTTL.
	HeartbeatInterval time.Duration
	// PollInterval is the fallback wait of a worker whose wake-up path failed (default
	// 250ms). Idle partitions do not poll: they are woken by the doorbell.
	PollInterval time.Duration
	// ReapIdle is how long a drained partition must sit idle before its owner retires it
	// (default 1h).
	ReapIdle time.Duration
	// SweepInterval is how often idle owned partitions are checked for entries that rang
	// no doorbell, while Redis sends no keyspace notifications for streams (default 2s;
	// see sweep.go).
	SweepInterval time.Duration
}

func (t *LeaseTiming) applyDefaults() {
	if t.LeaseTTL <= 0 {
		t.LeaseTTL = DefaultLeaseTTL
	}
	if t.HeartbeatInterval <= 0 {
		t.HeartbeatInterval = t.LeaseTTL / 5
	}
	if t.PollInterval <= 0 {
		t.PollInterval = DefaultPollInterval
	}
	if t.ReapIdle <= 0 {
		t.ReapIdle = DefaultReapIdle
	}
	if t.SweepInterval <= 0 {
		t.SweepInterval = DefaultSweepInterval
	}
}

// EngineConfig configures an Engine. Zero values take the documented defaults.
type EngineConfig struct {
	// Domain is the initialized domain whose handlers (with Func set) the engine runs.
	Domain *Domain
	// Client is the Redis client; the caller owns it and closes it after the engine stops.
	// Set ContextTimeoutEnabled on its options: the engine bounds every call by a context
	// deadline, and without that option go-redis waits for its own socket timeouts, so a
	// frozen link can hold a call past the local lease deadline (handlers are still
	// cancelled at the deadline by a timer).
	Client redis.UniversalClient
	// InstanceID names this instance in leases and the registry (default host-pid-random).
	// It must not contain white space.
	InstanceID string
	// Timing is the lease timing.
	Timing LeaseTiming
	// BatchSize is how many new entries one fenced read may return (default 16). Each is
	// started only while the local lease deadline holds.
	BatchSize int
	// MaxUnacked is how many handled events of one partition may lack an acknowledgement
	// that Redis confirmed (default 1): with 1, an event starts only after the previous
	// one's ack was confirmed, so after any failure (a crash, a Redis pause or restart) at
	// most the event in flight runs again. With N, up to N handled events may run again
	// after a failure, always in order. Acks of all partitions of the instance share one
	// call per flush, so the strict default pays a round trip per flush, not per event.
	MaxUnacked int
	// KeyspaceNotifications is whether idle partitions are woken by Redis keyspace
	// notifications, so that entries other publishers append with a plain XADD wake their
	// owner within a round trip (see sweep.go): KeyspaceAuto (the default: adds K and t
	// to notify-keyspace-events where they are missing and CONFIG SET is allowed),
	// KeyspaceUse (only where already on, never CONFIG SET) or KeyspaceOff (never: such
	// entries wait for the sweep, every Timing.SweepInterval).
	KeyspaceNotifications string
	// DiscoveryInterval is how often the liveness of other owners and the fair share are
	// checked: the crash-detection period. The default follows the lease TTL: half of
	// Timing.LeaseTTL (after its default), between 250 ms and 2 s, so 2 s with the
	// default TTL, and a deployment that shortens the TTL for fast failover also notices
	// dead owners and released partitions that much sooner. New partitions and released
	// leases are announced on the control stream and handled at once; the whole
	// partition indexes are read only every 15 intervals as a backstop, and when notices
	// may have been lost (see indexView). The first pass after Start waits an eighth of
	// an interval (at most 250 ms) so that instances started together share the
	// partitions from the start (see startSettle).
	DiscoveryInterval time.Duration
	// ShutdownTimeout bounds how long Shutdown waits for in-flight handlers (default 30s).
	ShutdownTimeout time.Duration
	// Logger receives structured logs (default slog.Default()).
	Logger *slog.Logger
	// MaxPartitionsWarning is the live partitions per category above which a warning is
	// logged, once per crossing (default 2000; negative turns the warning off).
	MaxPartitionsWarning int
	// Observer receives metrics events (default: none).
	Observer Observer
	// TracerProvider, when set, gets a consumer span for each handler run (see
	// handlerContext in trace.go); nil starts none, and the publisher's trace context
	// still reaches the handlers.
	TracerProvider trace.TracerProvider
	// Handlers restricts the engine to these handler / process manager names (default:
	// every handler and process manager with a Func).
	Handlers []string
	// MinReplicas is how many replicas must acknowledge a lease grant before the new
	// owner starts working the partition ([broker] min_replicas, default 0: no wait).
	// On a shortfall the leases of the pass are given back and a warning is logged; see
	// WaitReplicas and replicas.go.
	MinReplicas int
	// ReplicaTimeout bounds each wait for replicas ([broker] replica_timeout_ms; default
	// DefaultReplicaTimeout or LeaseTTL/4, whichever is shorter). It must be below the
	// lease TTL.
	ReplicaTimeout time.Duration
	// MaxConcurrentHandlers caps the handler calls running at once in this instance,
	// across every handler ([server] max_concurrent_handlers). Default 0: no cap of the
	// instance's own, only each handler's (HandlerLimits). A partition whose event waits
	// for a slot is not failing: its handler's timeout has not started and the wait is
	// not an attempt (see slots.go). Slots are handed out first come, first served.
	MaxConcurrentHandlers int
	// HandlerLimits caps the calls running at once per handler or process manager, by
	// name ([handlers.deliver] max_concurrent; Config.EngineConfig fills the defaults per
	// delivery kind: exec DefaultExecConcurrency, http DefaultHTTPConcurrency). A name
	// that is missing or mapped to 0 has no limit of its own, which is the default for Go
	// handlers: their goroutines are cheap and what they call is theirs to bound.
	HandlerLimits map[string]int
}

// Validate checks the configuration and fills defaults.
func (c *EngineConfig) Validate() error {
	if c.Domain == nil || !c.Domain.Initialized() {
		return errors.New("engine: EngineConfig.Domain must be an initialized domain (call Domain.Init)")
	}
	if c.Client == nil {
		return errors.New("engine: EngineConfig.Client is nil")
	}
	c.Timing.applyDefaults()
	if c.Timing.HeartbeatInterval >= c.Timing.LeaseTTL {
		return fmt.Errorf("engine: heartbeat interval %v must be below the lease TTL %v", c.Timing.HeartbeatInterval, c.Timing.LeaseTTL)
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), NewEventID()[:6])
	}
	for _, r := range c.InstanceID {
		if isSpace(r) {
			return fmt.Errorf("engine: instance id %q contains white space", c.InstanceID)
		}
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 16
	}
	switch c.KeyspaceNotifications {
	case "":
		c.KeyspaceNotifications = KeyspaceAuto
	case KeyspaceAuto, KeyspaceUse, KeyspaceOff:
	default:
		return fmt.Errorf("engine: KeyspaceNotifications %q: want %q, %q or %q", c.KeyspaceNotifications, KeyspaceAuto, KeyspaceUse, KeyspaceOff)
	}
	if c.MaxUnacked < 0 {
		return fmt.Errorf("engine: MaxUnacked %d is negative; use 1 (the default) or more", c.MaxUnacked)
	}
	if c.MaxUnacked == 0 {
		c.MaxUnacked = DefaultMaxUnacked
	}
	if c.DiscoveryInterval <= 0 {
		c.DiscoveryInterval = defaultDiscoveryInterval(c.Timing.LeaseTTL)
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.MaxPartitionsWarning == 0 {
		c.MaxPartitionsWarning = 2000
	}
	switch {
	case c.MinReplicas < 0:
		return fmt.Errorf("engine: MinReplicas must be 0 (no wait) or a replica count, got %d", c.MinReplicas)
	case c.MinReplicas > 0 && keyspace.For(c.Client).IsCluster():
		return errReplicasOnCluster
	case c.ReplicaTimeout < 0:
		return fmt.Errorf("engine: ReplicaTimeout must not be negative, got %v", c.ReplicaTimeout)
	case c.ReplicaTimeout >= c.Timing.LeaseTTL:
		return fmt.Errorf("engine: ReplicaTimeout %v must be below the lease TTL %v", c.ReplicaTimeout, c.Timing.LeaseTTL)
	case c.MaxConcurrentHandlers < 0:
		return fmt.Errorf("engine: MaxConcurrentHandlers must be 0 (no instance-wide cap) or positive, got %d", c.MaxConcurrentHandlers)
	}
	for name, n := range c.HandlerLimits {
		if n < 0 {
			return fmt.Errorf("engine: HandlerLimits[%q] must be 0 (no limit) or positive, got %d", name, n)
		}
	}
	return nil
}

// defaultDiscoveryInterval is the discovery period of a lease TTL: half the TTL, between
// 250 ms and 2 s.
func defaultDiscoveryInterval(leaseTTL time.Duration) time.Duration {
	return min(max(leaseTTL/2, 250*time.Millisecond), 2*time.Second)
}

func orInt(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func orDur(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}

// replicaTimeout is the engine's effective wait: the configured one, else
// DefaultReplicaTimeout capped at a quarter of the lease TTL.
func (c *EngineConfig) replicaTimeout() time.Duration {
	if c.ReplicaTimeout > 0 {
		return c.ReplicaTimeout
	}
	return min(DefaultReplicaTimeout, c.Timing.LeaseTTL/4)
}
