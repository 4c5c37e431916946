package tui

import (
	"context"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
)

// Source is everything the dashboard reads and writes. The real implementation is a thin
// adapter over pkg/admin; tests use a fake. The dashboard calls it only from tea.Cmds,
// one Snapshot at a time, so an implementation need not be safe for concurrent Snapshot
// calls, but Head and the actions may run while a Snapshot is in flight.
//
// Every call gets a context with a deadline (fetchTimeout, actionTimeout) derived from the
// context given to Run; an implementation must return when it is done.
type Source interface {
	// Snapshot takes one reading of the deployment. It should be bounded and pipelined
	// (a refresh of 10,000 partitions is a handful of round trips, not 10,000); above
	// that, it may return every halted, paused and throttled partition and a sample of
	// the rest, with Totals.
	// An error means "could not read Redis": the dashboard keeps the last good snapshot,
	// shows a banner and retries with backoff.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Head reads the detail of one partition: its head entry, its halt record (if any)
	// and its lanes. A partition without a head returns a HeadDetail with EntryID "".
	Head(ctx context.Context, p PartitionRef) (HeadDetail, error)
	// Skip, MoveToDLQ and Retry resolve a halted head as a compare-and-act on expectID:
	// they change nothing and return an error that matches ErrHeadMoved (errors.Is)
	// when the head is no longer expectID.
	Skip(ctx context.Context, p PartitionRef, expectID string) error
	MoveToDLQ(ctx context.Context, p PartitionRef, expectID string) error
	Retry(ctx context.Context, p PartitionRef, expectID string) error
}

// ErrHeadMoved is what a Source action returns (wrapped, matched with errors.Is) when the
// head entry is no longer the one the operator confirmed: nothing was done. It is the
// engine's sentinel itself, so an adapter that passes pkg/engine / pkg/admin errors through
// (engine.HeadMovedError unwraps to it) needs no translation; any other Source must wrap
// this value.
var ErrHeadMoved = engine.ErrHeadMoved

// Partition states, as Partition.State reports them.
const (
	StateRunning = "running" // owned, and the owner is handling or has entries to handle
	StateIdle    = "idle"    // owned, nothing to do
	StateHalted  = "halted"  // a halt record exists: the head is poison, an operator must act
	StatePaused  = "paused"  // an operator paused it: its owner starts none of its events
	// StateThrottled: its owner holds its next event until a permit of the handler's
	// limit key is free (Partition.LimitValue names the value).
	StateThrottled = "throttled"
	StateUnowned   = "unowned" // no live lease: waiting for an instance to take it
)

// Snapshot is one reading of the deployment.
type Snapshot struct {
	Addr       string // the Redis address as the operator knows it (shown in the header)
	Instances  []Instance
	Partitions []Partition
	// Taken is when the reading was taken, preferably Redis TIME. It is the time base of
	// the events/s rate and of the instances' heartbeat ages; zero means "use the local
	// clock at arrival".
	Taken time.Time
	// Totals, when not nil, says that Partitions is part of the deployment: every
	// halted, paused and throttled partition, and a sample of the rest. The header then
	// shows the totals counted in Redis, and says that the running, idle and unowned
	// counts and the backlog are the sample's.
	Totals *Totals
}

// Totals are the sizes of a deployment too large to read whole at every refresh.
type Totals struct {
	Streams int64 // partition streams, counted in Redis
	Rows    int64 // (handler, partition) rows, counted in Redis
	// Unindexed is set when a category's state index is not built yet: the halted and
	// paused partitions shown may miss a halt older than the index.
	Unindexed bool
}

// Instance is one registered engine instance.
type Instance struct {
	ID            string
	Host          string
	PID           int
	Owned         int       // partitions whose lease it holds
	LastHeartbeat time.Time // same clock as Snapshot.Taken; see instanceStaleAfter
	// Handler slots as of the last heartbeat: calls running, the instance's limit (0:
	// unbounded) and the partitions waiting for a slot (waiting is not failing).
	SlotsInUse, SlotsLimit, SlotsWaiting int
}

// Pinger is implemented by a Source that can tell a slow Redis from an unreachable one.
// When a refresh fails on its deadline the dashboard pings: a Redis that answers is
// shown as slow (the data is stale), not as unreachable.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PartitionRef names a partition for one handler (consumer group): leases and halts are
// per (handler, category, key).
type PartitionRef struct {
	Category string
	Key      string // "" for an unpartitioned category stream
	Handler  string
}

// String is "category:key (handler)", the way the dashboard names a partition.
func (r PartitionRef) String() string {
	s := r.Category
	if r.Key != "" {
		s += ":" + r.Key
	}
	return s + " (" + r.Handler + ")"
}

// Partition is one row of the partitions table.
type Partition struct {
	Category   string
	Key        string
	Stream     string // primary stream, {category}:{key}
	Handler    string // consumer group
	Owner      string // instance id holding the lease, "" when unowned
	Generation int64  // fencing generation of the current (or last) lease, 0 if never leased
	LeaseTTL   time.Duration
	Lag        int64         // entries not yet delivered to the group, all lanes; -1 unknown
	Pending    int64         // delivered and not yet acknowledged
	HeadAge    time.Duration // age of the oldest unacknowledged entry, 0 when none
	State      string        // one of the State* constants
	// HaltedEntryID is the head entry the halt record names ("" unless halted). The
	// action dialogs use it as the expected id of the compare-and-act.
	HaltedEntryID string
	// Handled counts the entries the group has handled on this partition, cumulatively
	// (for example entries-read minus pending from XINFO GROUPS). It only has to grow
	// monotonically between snapshots; the dashboard sums the positive per-partition
	// differences between two snapshots to show events/s. 0 everywhere means unknown.
	Handled int64
	// Pause is the operator's pause of the partition; nil when it is not paused, or when
	// the source does not say (State still says StatePaused).
	Pause *PauseInfo
	// LimitValue is the value of the handler's limit key (a tenant) whose permit a
	// throttled partition waits for; "" otherwise.
	LimitValue string
}

// PauseInfo is an operator's pause of a partition.
type PauseInfo struct {
	Reason string
	By     string    // who paused it, e.g. "alice@ops-1"
	Since  time.Time // when
	Until  time.Time // when it ends by itself; zero: when it is resumed
}

// Backlog is the number of entries the handler has not handled yet: those not delivered
// (Lag) and those delivered and not acknowledged (Pending: the one in the handler and
// those read ahead with it). -1 when Lag is unknown.
func (p Partition) Backlog() int64 {
	if p.Lag < 0 {
		return -1
	}
	return p.Lag + p.Pending
}

// Ref names the partition.
func (p Partition) Ref() PartitionRef {
	return PartitionRef{Category: p.Category, Key: p.Key, Handler: p.Handler}
}

// HeadDetail is the detail pane's data for one partition.
type HeadDetail struct {
	EntryID   string    // "" when the partition has no head
	Stream    string    // the lane stream the head is on
	Lane      int       // 0 primary, 1 backfill
	EventType string    // envelope "type", may be ""
	EventID   string    // envelope "id", may be ""
	Payload   string    // envelope "data", JSON (shown pretty-printed when it parses)
	Attempts  int       // delivery attempts so far
	Error     string    // the halt reason (last handler error), "" when not halted
	Since     time.Time // when the partition halted, zero when not halted
	Lanes     []LaneInfo
}

// LaneInfo describes one lane stream of a partition.
type LaneInfo struct {
	Stream  string
	Length  int64
	Pending int64
}

// PauseSource is implemented by a Source that can pause and resume a partition; the
// dashboard then has the pause (P) and resume (U) keys. Each call gets a context with
// actionTimeout.
type PauseSource interface {
	// Pause pauses the partition for its handler until it is resumed: its owner
	// finishes the event in flight and starts no other. reason is not empty.
	Pause(ctx context.Context, p PartitionRef, reason string) error
	// Resume ends the partition's pause: its owner starts its next event at once.
	Resume(ctx context.Context, p PartitionRef) error
}

// DLQSource is implemented by a Source that can list dead-letter streams; the dashboard
// then has a DLQ view. The call gets a context with fetchTimeout.
type DLQSource interface {
	// DLQs lists every partition DLQ that has entries.
	DLQs(ctx context.Context) ([]DLQInfo, error)
}

// DLQInfo is one partition's dead-letter stream.
type DLQInfo struct {
	Stream    string // the partition, {category}:{key}
	Length    int64
	OldestID  string
	NewestID  string
	OldestAge time.Duration
}

// AuditSource is implemented by a Source that can read the audit log of operator
// actions; the dashboard then has an audit view. The call gets a context with
// fetchTimeout.
type AuditSource interface {
	// Audit returns the newest limit actions, newest first.
	Audit(ctx context.Context, limit int) ([]AuditRecord, error)
}

// AuditRecord is one operator action.
type AuditRecord struct {
	Time    time.Time
	User    string
	Host    string
	Command string
	Stream  string
	Handler string
	EntryID string
	Outcome string // "ok", or why nothing was done
	Detail  string
}
