package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Capability is a feature a broker advertises.
type Capability string

// StreamPartitioning is advertised by brokers that route partitioned events to per-key
// streams and consume them under ownership leases (the Redis broker).
const StreamPartitioning Capability = "STREAM_PARTITIONING"

// Broker kinds known to registration.
const (
	BrokerKindRedis = "redis"
	// BrokerKindRedisCluster is the Redis broker on a Redis Cluster: the same streams
	// and scripts, reached through a cluster client that follows MOVED and ASK.
	BrokerKindRedisCluster = "redis-cluster"
	BrokerKindInline       = "inline"
)

// BrokerInfo is what Domain.Init needs to know about the target broker.
type BrokerInfo interface {
	// Kind names the broker ("redis", "inline", ...).
	Kind() string
	// Has reports whether the broker advertises a capability.
	Has(Capability) bool
}

// IncorrectUsageError collects every problem Domain.Init found. Init never stops at the
// first problem: an operator fixes a domain in one round.
type IncorrectUsageError struct {
	Problems []string
}

func (e *IncorrectUsageError) Error() string {
	if len(e.Problems) == 1 {
		return "engine: incorrect usage: " + e.Problems[0]
	}
	return fmt.Sprintf("engine: incorrect usage (%d problems):\n  - %s", len(e.Problems), strings.Join(e.Problems, "\n  - "))
}

// declaration records who asked for a partition key on a category.
type declaration struct {
	field string
	by    string // "handler OrderProjector" / "process manager OrderFulfillment"
}

// Init validates the domain against the broker and freezes it. It checks, and reports all
// failures together in one *IncorrectUsageError:
//
//   - declarations: names are unique, categories well formed, handled types declared;
//   - field existence: every type a handler handles declares its sequential_by field, and
//     every event a sequential process manager handles declares the field its correlate
//     spec resolves;
//   - one key per category: all declarers on a category agree on one field (a sequential
//     process manager's correlation field counts as a declaration on each category);
//   - broker capability: a broker advertising StreamPartitioning passes, the inline broker
//     passes as a no-op, any other broker is rejected for the partitioned categories.
//
// On success PartitionKeys returns the category -> field map.
func (d *Domain) Init(b BrokerInfo) error {
	r := registration{
		events: map[string]EventType{}, commands: map[string]CommandType{},
		decls: map[string][]declaration{}, names: map[string]bool{},
	}
	r.types(d.Events, d.Commands)
	for _, h := range d.Handlers {
		r.handler(h)
	}
	for _, pm := range d.ProcessManagers {
		r.processManager(pm)
	}
	keys, cats := r.partitionKeys()
	active := r.brokerCapable(b, cats)
	if err := ValidateBackfillSuffix(d.BackfillSuffix); err != nil {
		r.add("%v", err)
	}
	if len(r.problems) > 0 {
		return &IncorrectUsageError{Problems: r.problems}
	}
	d.partitionKeys = keys
	d.eventsByName = r.events
	d.active = active
	d.initialized = true
	return nil
}

// registration is Domain.Init's work: what it learnt of the domain so far, and every
// problem found, in the order found.
type registration struct {
	problems []string
	events   map[string]EventType
	commands map[string]CommandType
	decls    map[string][]declaration // category -> declarations, in declaration order
	names    map[string]bool          // handler and process manager names
}

func (r *registration) add(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *registration) declare(category, field, by string) {
	r.decls[category] = append(r.decls[category], declaration{field: field, by: by})
}

// types checks the declared events and commands: unique names, valid categories.
func (r *registration) types(events []EventType, commands []CommandType) {
	seenType := map[string]string{}
	declared := func(kind, as, name, category string) bool {
		if prev, dup := seenType[name]; dup {
			r.add("%s %q is declared twice (also as %s)", kind, name, prev)
			return false
		}
		if err := ValidateCategory(category); err != nil {
			r.add("%s %q: %v", kind, name, err)
		}
		seenType[name] = as
		return true
	}
	for _, e := range events {
		if declared("event", "an event", e.Name, e.Category) {
			r.events[e.Name] = e
		}
	}
	for _, c := range commands {
		if declared("command", "a command", c.Name, c.Category) {
			r.commands[c.Name] = c
		}
	}
}

// name checks that a handler or process manager has a name no other one uses.
func (r *registration) name(name, who, missing, dup string) {
	if name == "" {
		r.add("%s", missing)
	} else if r.names[name] {
		r.add("%s%s", who, dup)
	}
	r.names[name] = true
}

// handler checks one handler and records its sequential_by declaration.
func (r *registration) handler(h Handler) {
	who := "handler " + quote(h.Name)
	r.name(h.Name, who, "a handler has no name", " is declared twice")
	if len(h.Handles) == 0 {
		r.add("%s handles no %s", who, kindNoun(h.Kind))
	}
	for _, tname := range h.Handles {
		fields, category, ok := r.handledType(h.Kind, tname)
		if !ok {
			r.add("%s handles %q, which is not a declared %s", who, tname, kindNoun(h.Kind))
			continue
		}
		if h.PartOf != "" && category != h.PartOf {
			r.add("%s is part of category %q but handles %q of category %q", who, h.PartOf, tname, category)
		}
		if h.SequentialBy != "" && !slices.Contains(fields, h.SequentialBy) {
			r.add("%s: sequential_by field %q is missing from %s %q (fields: %s)",
				who, h.SequentialBy, kindNoun(h.Kind), tname, strings.Join(fields, ", "))
		}
		if h.Limit.By != "" && !slices.Contains(fields, h.Limit.By) {
			r.add("%s: limit_by field %q is missing from %s %q (fields: %s)",
				who, h.Limit.By, kindNoun(h.Kind), tname, strings.Join(fields, ", "))
		}
	}
	r.limit(who, h)
	r.batch(who, h)
	if h.SequentialBy == "" {
		return
	}
	cat := h.PartOf
	if cat == "" && len(h.Handles) > 0 {
		if e, ok := r.events[h.Handles[0]]; ok {
			cat = e.Category
		} else if c, ok := r.commands[h.Handles[0]]; ok {
			cat = c.Category
		}
	}
	if cat != "" {
		r.declare(cat, h.SequentialBy, who)
	}
}

// limit checks a handler's limit: a field and at least one cap, or nothing at all.
func (r *registration) limit(who string, h Handler) {
	l := h.Limit
	switch {
	case l.Concurrency < 0 || l.Rate < 0 || l.Per < 0:
		r.add("%s: limit_concurrency and limit_rate cannot be negative", who)
	case l.By == "" && (l.Concurrency > 0 || l.Rate > 0):
		r.add("%s: limit_concurrency and limit_rate need limit_by, the payload field whose values they cap (a tenant id, say)", who)
	case l.By != "" && l.Concurrency == 0 && l.Rate == 0:
		r.add("%s: limit_by %q caps nothing: add limit_concurrency (runs at once per value) or limit_rate (\"100/s\"), or remove it", who, l.By)
	case l.By != "" && h.Kind == CommandHandlerKind:
		r.add("%s: limit_by applies to event handlers; a command handler dispatches synchronously", who)
	case l.Rate > 0 && l.Per > 0 && l.Per < time.Millisecond:
		r.add("%s: limit_rate's window is %v; use a second or more (\"20/s\", \"600/m\")", who, l.Per)
	}
}

// batch checks a handler's batch settings: a size within 1..MaxBatch, a wait only with a
// size above one, an event handler, and one Go function of the kind the size asks for.
// A handler without Func or BatchFunc is checked again when an engine runs it (seqctl
// run binds its deliver table after Init).
func (r *registration) batch(who string, h Handler) {
	switch {
	case h.BatchMax < 0 || h.BatchMax > MaxBatch:
		r.add("%s: batch_max %d is out of range: use 1 (one event per call, the default) up to %d", who, h.BatchMax, MaxBatch)
	case h.BatchWait < 0:
		r.add("%s: batch_wait %v is negative: use 0 (never wait to fill a batch) or a duration such as \"20ms\"", who, h.BatchWait)
	case h.BatchWait > 0 && h.BatchMax <= 1:
		r.add("%s: batch_wait %v waits to fill batches, but batch_max is %d: set batch_max above 1, or remove batch_wait", who, h.BatchWait, max(h.BatchMax, 1))
	case (h.BatchMax > 1 || h.BatchFunc != nil) && h.Kind == CommandHandlerKind:
		r.add("%s: batch_max applies to event handlers; a command handler dispatches synchronously", who)
	default:
		if err := h.funcProblem(); err != "" {
			r.add("%s: %s", who, err)
		}
	}
}

// funcProblem says what is wrong with the handler's Go functions for its batch size, ""
// when nothing is (or none is set yet).
func (h Handler) funcProblem() string {
	switch {
	case h.Func != nil && h.BatchFunc != nil:
		return "both Func and BatchFunc are set: set BatchFunc to take batches, Func to take one event per call"
	case h.BatchMax > 1 && h.Func != nil:
		return fmt.Sprintf("batch_max is %d but the handler is a Func, which takes one event per call: set BatchFunc instead", h.BatchMax)
	}
	return ""
}

// handledType returns the fields and category of the command (for a command handler) or
// event a handler handles, and whether it is declared.
func (r *registration) handledType(kind HandlerKind, name string) (fields []string, category string, ok bool) {
	if kind == CommandHandlerKind {
		c, ok := r.commands[name]
		return c.Fields, c.Category, ok
	}
	e, ok := r.events[name]
	return e.Fields, e.Category, ok
}

// processManager checks one process manager and, when it is sequential, records its
// correlation field as a declaration on each category it handles.
func (r *registration) processManager(pm ProcessManager) {
	who := "process manager " + quote(pm.Name)
	r.name(pm.Name, who, "a process manager has no name", ": the name is already used by another handler or process manager")
	if len(pm.Handles) == 0 {
		r.add("%s handles no events", who)
	}
	pmField := ""
	for _, ph := range pm.Handles {
		e, ok := r.events[ph.Event]
		if !ok {
			r.add("%s handles %q, which is not a declared event", who, ph.Event)
			continue
		}
		if ph.Correlate.EventField == "" || ph.Correlate.PMField == "" {
			r.add("%s: the correlate spec for %q is empty", who, ph.Event)
			continue
		}
		if pmField == "" {
			pmField = ph.Correlate.PMField
		} else if pmField != ph.Correlate.PMField {
			r.add("%s correlates on two process-manager fields, %q and %q; one instance is identified by one field",
				who, pmField, ph.Correlate.PMField)
		}
		if !slices.Contains(e.Fields, ph.Correlate.EventField) {
			r.add("%s: event %q lacks field %q, which its correlate spec resolves (fields: %s)",
				who, ph.Event, ph.Correlate.EventField, strings.Join(e.Fields, ", "))
			continue
		}
		if pm.SequentialBy {
			r.declare(e.Category, ph.Correlate.EventField, who)
		}
	}
}

// partitionKeys checks one key per category and returns the partition map of the event
// categories, and every category declared partitioned (sorted).
func (r *registration) partitionKeys() (keys map[string]string, cats []string) {
	keys = map[string]string{}
	cats = sortedKeys(r.decls)
	for _, cat := range cats {
		ds := r.decls[cat]
		first := ds[0]
		ok := true
		for _, other := range ds[1:] {
			if other.field != first.field {
				r.add("conflicting partition keys on category %q: %s asks for %q but %s asks for %q; all handlers on a category must agree on one key or not partition it",
					cat, first.by, first.field, other.by, other.field)
				ok = false
			}
		}
		if ok {
			keys[cat] = first.field
		}
	}
	// Command categories never reach the outbox: their declarations are checked above and
	// are inert at runtime, so only event categories go into the partition map.
	eventCats := map[string]bool{}
	for _, e := range r.events {
		eventCats[e.Category] = true
	}
	for cat := range keys {
		if !eventCats[cat] {
			delete(keys, cat)
		}
	}
	return keys, cats
}

// brokerCapable checks the broker against the partitioned categories; it reports whether
// partitioning is active (the broker advertises StreamPartitioning).
func (r *registration) brokerCapable(b BrokerInfo, cats []string) (active bool) {
	switch {
	case b == nil:
		r.add("no broker given to Init")
	case b.Has(StreamPartitioning):
		return true
	case b.Kind() == BrokerKindInline:
		// Accepted no-op: the inline broker already handles messages in submission order.
	case len(cats) > 0:
		r.add("broker %q does not advertise %s, required by sequential_by on categories %s; use the redis broker, or the inline broker for tests",
			b.Kind(), StreamPartitioning, strings.Join(quoteAll(cats), ", "))
	}
	return false
}

// ValidateCategory checks a category name: non-empty, no ':' or white space, and not the
// reserved __name__ form.
func ValidateCategory(c string) error {
	switch {
	case c == "":
		return fmt.Errorf("category is empty")
	case strings.ContainsRune(c, ':'):
		return fmt.Errorf("category %q contains ':'; category names become stream-name prefixes", c)
	case strings.IndexFunc(c, isSpace) >= 0:
		return fmt.Errorf("category %q contains white space", c)
	case isSentinel(c):
		return fmt.Errorf("category %q has the reserved __name__ form", c)
	}
	return nil
}

// ValidateBackfillSuffix checks a [server.priority_lanes] backfill suffix: like a key,
// but "" means the default.
func ValidateBackfillSuffix(s string) error {
	if s == "" {
		return nil
	}
	switch {
	case strings.ContainsRune(s, ':'), strings.IndexFunc(s, isSpace) >= 0:
		return fmt.Errorf("backfill_suffix %q must not contain ':' or white space", s)
	case s == keyspace.DLQToken:
		return fmt.Errorf("backfill_suffix must not be %q, the dead-letter token", keyspace.DLQToken)
	case isSentinel(s):
		return fmt.Errorf("backfill_suffix %q has the reserved __name__ form", s)
	}
	return nil
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}

func kindNoun(k HandlerKind) string {
	if k == CommandHandlerKind {
		return "command"
	}
	return "event"
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = quote(x)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
