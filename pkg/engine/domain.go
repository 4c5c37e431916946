package engine

import (
	"context"
	"time"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// EventType declares an event: its name, the stream category it is published to, and the
// top-level fields of its JSON payload.
type EventType struct {
	Name     string
	Category string
	Fields   []string
}

// CommandType declares a command. Commands are dispatched synchronously today and never
// reach the outbox, so a command's category is never partitioned at runtime.
type CommandType struct {
	Name     string
	Category string
	Fields   []string
}

// HandlerKind says whether a handler consumes events or commands.
type HandlerKind int

const (
	// EventHandlerKind consumes events of one category; sequential_by is active on a
	// broker with STREAM_PARTITIONING.
	EventHandlerKind HandlerKind = iota + 1
	// CommandHandlerKind consumes commands; sequential_by is validated but inert.
	CommandHandlerKind
)

func (k HandlerKind) String() string {
	switch k {
	case EventHandlerKind:
		return "event"
	case CommandHandlerKind:
		return "command"
	}
	return "unknown"
}

// HandlerFunc handles one event. Returning nil means done (the event is acknowledged);
// an error means the attempt failed and is retried, and after MaxRetries attempts the
// partition halts. The context carries the delivery (see DeliveryFrom) and, when the
// event was published with one, the publisher's span context as the remote parent
// (trace.SpanContextFromContext); it is cancelled when the lease is lost or the engine
// shuts down past its deadline.
type HandlerFunc func(ctx context.Context, ev Event) error

// BatchFunc handles a run of consecutive events of one partition key in one call, in
// publish order (Handler.BatchMax). It is all or nothing: nil means every event of the
// run is handled (all are acknowledged); an error means none is, and the run is retried
// as a whole. When a run of more than one event fails its last attempt, its events are
// run one at a time, each in a call of its own: those before the failing one are handled
// once, and only the failing one halts the partition. The context carries the delivery
// (see DeliveryFrom): its EntryID is the first event's entry and Entries lists every
// event's, in order. A run holds one limit-key permit and one handler slot.
type BatchFunc func(ctx context.Context, evs []Event) error

// MaxBatch is the largest Handler.BatchMax.
const MaxBatch = 1000

// Defaults for handlers and process managers.
const (
	DefaultMaxRetries = 3
	DefaultRetryDelay = time.Second
)

// Handler declares an event or command handler.
type Handler struct {
	Name string
	Kind HandlerKind
	// PartOf is the category the handler consumes.
	PartOf string
	// Handles lists the event (or command) type names the handler takes.
	Handles []string
	// SequentialBy is the payload field that partitions the category, "" for none.
	SequentialBy string
	// MaxRetries is the number of attempts before the partition halts (default 3).
	MaxRetries int
	// RetryDelay is the wait between attempts (default 1s).
	RetryDelay time.Duration
	// Limit caps the handler's runs per value of a payload field (a tenant, say), across
	// every instance: see HandlerLimit. The zero value: no limit.
	Limit HandlerLimit
	// Func is the Go handler. seqctl run sets it from the [handlers.deliver] table.
	Func HandlerFunc
	// BatchFunc, instead of Func, takes runs of up to BatchMax consecutive events of one
	// partition key in one call (see BatchFunc).
	BatchFunc BatchFunc
	// BatchMax is the most events one BatchFunc call takes (0 or 1: one at a time; at
	// most MaxBatch). A run holds consecutive entries of one lane that the owner has read
	// (and, with a limit key, of one limit value); it never waits for more unless
	// BatchWait says so.
	BatchMax int
	// BatchWait is how long an owner that caught up with its partition waits before it
	// reads again, so that a run can fill up (0: never waits). It delays the first event
	// after a quiet spell by as much.
	BatchWait time.Duration
}

// HandlerLimit is a fleet-wide cap on a handler's runs per value of a payload field (the
// limit key): at most Concurrency runs at once and at most Rate starts in any window of
// Per, counted across every instance (limits.go tells how). Events stay ordered by their
// partition key; the limit only decides when a partition's next event may start. An
// operator may override both for one value at run time (RedisBroker.SetLimit).
type HandlerLimit struct {
	By          string        // the payload field; "" for no limit
	Concurrency int           // runs at once per value; 0 for no cap
	Rate        int           // starts per Per per value; 0 for no cap
	Per         time.Duration // the rate's window (time.Second, time.Minute); default a second
}

// Active reports whether the limit caps anything.
func (l HandlerLimit) Active() bool { return l.By != "" && (l.Concurrency > 0 || l.Rate > 0) }

// Correlate maps an event field onto the process manager's correlation field. In TOML it
// is either a field name (both sides alike) or a one-entry table {pm_field = "event_field"}.
type Correlate struct {
	PMField    string
	EventField string
}

// PMHandle is one event a process manager handles.
type PMHandle struct {
	Event     string
	Correlate Correlate
	Start     bool
}

// ProcessManager declares a process manager. With SequentialBy, every subscribed category
// is partitioned by the field its correlate spec maps to the correlation value, and one
// instance at a time leases each correlation value.
type ProcessManager struct {
	Name         string
	SequentialBy bool
	Handles      []PMHandle
	MaxRetries   int
	RetryDelay   time.Duration
	Func         HandlerFunc
}

// Event is one event as a handler sees it: the envelope its stream entry holds, encoded
// and decoded by package keyspace.
type Event = keyspace.Envelope

// Domain is a set of declared events, commands, handlers and process managers. Build it
// with the Add methods (or config.Load from domain.toml), then call Init once before use.
// A Domain is not safe for concurrent mutation; after Init it is read-only.
type Domain struct {
	Name            string
	Events          []EventType
	Commands        []CommandType
	Handlers        []Handler
	ProcessManagers []ProcessManager
	// BackfillSuffix is the priority-lane token, "" for DefaultBackfillSuffix. It is a
	// reserved key token.
	BackfillSuffix string
	// LanesEnabled turns priority lanes on: an event whose priority is below LanesThreshold
	// goes to its partition's backfill lane.
	LanesEnabled   bool
	LanesThreshold int

	initialized   bool
	partitionKeys map[string]string // category -> field; set by Init
	eventsByName  map[string]EventType
	active        bool // the broker applies partitioning (advertises the capability)
}

// NewDomain returns an empty domain with the given name.
func NewDomain(name string) *Domain { return &Domain{Name: name} }

// AddEvent declares an event type.
func (d *Domain) AddEvent(e EventType) *Domain { d.Events = append(d.Events, e); return d }

// AddCommand declares a command type.
func (d *Domain) AddCommand(c CommandType) *Domain { d.Commands = append(d.Commands, c); return d }

// AddHandler declares a handler.
func (d *Domain) AddHandler(h Handler) *Domain { d.Handlers = append(d.Handlers, h); return d }

// AddProcessManager declares a process manager.
func (d *Domain) AddProcessManager(p ProcessManager) *Domain {
	d.ProcessManagers = append(d.ProcessManagers, p)
	return d
}

// Initialized reports whether Init succeeded.
func (d *Domain) Initialized() bool { return d.initialized }

// PartitionKeys returns a copy of the category -> partition-key field map that Init
// derived (event categories only). It is empty before a successful Init.
func (d *Domain) PartitionKeys() map[string]string {
	out := make(map[string]string, len(d.partitionKeys))
	for k, v := range d.partitionKeys {
		out[k] = v
	}
	return out
}

// PartitionField returns the partition-key field of a category and whether the category
// is partitioned on this domain's broker (false on the inline broker or before Init).
func (d *Domain) PartitionField(category string) (string, bool) {
	f, ok := d.partitionKeys[category]
	return f, ok && d.active
}

// Event returns a declared event type by name.
func (d *Domain) Event(name string) (EventType, bool) {
	e, ok := d.eventsByName[name]
	return e, ok
}

// backfillSuffix returns the configured backfill token or the default.
func (d *Domain) backfillSuffix() string {
	if d.BackfillSuffix == "" {
		return DefaultBackfillSuffix
	}
	return d.BackfillSuffix
}
