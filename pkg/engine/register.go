package engine

import (
	"fmt"
	"sort"
	"strings"
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
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	events := map[string]EventType{}
	commands := map[string]CommandType{}
	seenType := map[string]string{}
	for _, e := range d.Events {
		if prev, dup := seenType[e.Name]; dup {
			add("event %q is declared twice (also as %s)", e.Name, prev)
			continue
		}
		if err := ValidateCategory(e.Category); err != nil {
			add("event %q: %v", e.Name, err)
		}
		seenType[e.Name] = "an event"
		events[e.Name] = e
	}
	for _, c := range d.Commands {
		if prev, dup := seenType[c.Name]; dup {
			add("command %q is declared twice (also as %s)", c.Name, prev)
			continue
		}
		if err := ValidateCategory(c.Category); err != nil {
			add("command %q: %v", c.Name, err)
		}
		seenType[c.Name] = "a command"
		commands[c.Name] = c
	}

	decls := map[string][]declaration{} // category -> declarations, in declaration order
	declare := func(category, field, by string) {
		decls[category] = append(decls[category], declaration{field: field, by: by})
	}
	names := map[string]bool{}
	for _, h := range d.Handlers {
		who := "handler " + quote(h.Name)
		if h.Name == "" {
			add("a handler has no name")
		} else if names[h.Name] {
			add("%s is declared twice", who)
		}
		names[h.Name] = true
		if len(h.Handles) == 0 {
			add("%s handles no %s", who, kindNoun(h.Kind))
		}
		for _, tname := range h.Handles {
			var fields []string
			var category string
			switch h.Kind {
			case CommandHandlerKind:
				c, ok := commands[tname]
				if !ok {
					add("%s handles %q, which is not a declared command", who, tname)
					continue
				}
				fields, category = c.Fields, c.Category
			default:
				e, ok := events[tname]
				if !ok {
					add("%s handles %q, which is not a declared event", who, tname)
					continue
				}
				fields, category = e.Fields, e.Category
			}
			if h.PartOf != "" && category != h.PartOf {
				add("%s is part of category %q but handles %q of category %q", who, h.PartOf, tname, category)
			}
			if h.SequentialBy != "" && !contains(fields, h.SequentialBy) {
				add("%s: sequential_by field %q is missing from %s %q (fields: %s)",
					who, h.SequentialBy, kindNoun(h.Kind), tname, strings.Join(fields, ", "))
			}
		}
		if h.SequentialBy != "" {
			cat := h.PartOf
			if cat == "" && len(h.Handles) > 0 {
				if e, ok := events[h.Handles[0]]; ok {
					cat = e.Category
				} else if c, ok := commands[h.Handles[0]]; ok {
					cat = c.Category
				}
			}
			if cat != "" {
				declare(cat, h.SequentialBy, who)
			}
		}
	}
	for _, pm := range d.ProcessManagers {
		who := "process manager " + quote(pm.Name)
		if pm.Name == "" {
			add("a process manager has no name")
		} else if names[pm.Name] {
			add("%s: the name is already used by another handler or process manager", who)
		}
		names[pm.Name] = true
		if len(pm.Handles) == 0 {
			add("%s handles no events", who)
		}
		pmField := ""
		for _, ph := range pm.Handles {
			e, ok := events[ph.Event]
			if !ok {
				add("%s handles %q, which is not a declared event", who, ph.Event)
				continue
			}
			if ph.Correlate.EventField == "" || ph.Correlate.PMField == "" {
				add("%s: the correlate spec for %q is empty", who, ph.Event)
				continue
			}
			if pmField == "" {
				pmField = ph.Correlate.PMField
			} else if pmField != ph.Correlate.PMField {
				add("%s correlates on two process-manager fields, %q and %q; one instance is identified by one field",
					who, pmField, ph.Correlate.PMField)
			}
			if !contains(e.Fields, ph.Correlate.EventField) {
				add("%s: event %q lacks field %q, which its correlate spec resolves (fields: %s)",
					who, ph.Event, ph.Correlate.EventField, strings.Join(e.Fields, ", "))
				continue
			}
			if pm.SequentialBy {
				declare(e.Category, ph.Correlate.EventField, who)
			}
		}
	}

	// One key per category.
	keys := map[string]string{}
	cats := sortedKeys(decls)
	for _, cat := range cats {
		ds := decls[cat]
		first := ds[0]
		ok := true
		for _, other := range ds[1:] {
			if other.field != first.field {
				add("conflicting partition keys on category %q: %s asks for %q but %s asks for %q; all handlers on a category must agree on one key or not partition it",
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
	for _, e := range events {
		eventCats[e.Category] = true
	}
	for cat := range keys {
		if !eventCats[cat] {
			delete(keys, cat)
		}
	}

	// Broker capability.
	active := false
	switch {
	case b == nil:
		add("no broker given to Init")
	case b.Has(StreamPartitioning):
		active = true
	case b.Kind() == BrokerKindInline:
		// Accepted no-op: the inline broker already handles messages in submission order.
	case len(cats) > 0:
		add("broker %q does not advertise %s, required by sequential_by on categories %s; use the redis broker, or the inline broker for tests",
			b.Kind(), StreamPartitioning, strings.Join(quoteAll(cats), ", "))
	}
	if err := ValidateBackfillSuffix(d.BackfillSuffix); err != nil {
		add("%v", err)
	}

	if len(problems) > 0 {
		return &IncorrectUsageError{Problems: problems}
	}
	d.partitionKeys = keys
	d.eventsByName = events
	d.active = active
	d.initialized = true
	return nil
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
	case s == dlqToken:
		return fmt.Errorf("backfill_suffix must not be %q, the dead-letter token", dlqToken)
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

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
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
