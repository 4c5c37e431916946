// Package deliver turns the [handlers.deliver] and [process_managers.deliver] tables of
// domain.toml into engine.HandlerFuncs, so teams in any language run 'seqctl run' as a
// worker that hands each event to their HTTP endpoint or command:
//
//   - http = "URL": the event envelope is POSTed as JSON; a 2xx answer means done.
//   - exec = ["cmd", "arg"]: the envelope is written to the command's stdin; exit status 0
//     means done.
//
// A handler with batch_max above 1 takes runs of consecutive events of one key in one
// call (HTTPBatch, ExecBatch, the SQL sink's BatchHandler): a JSON array of envelopes
// (MarshalBatch), NDJSON on stdin, one transaction. A run is all or nothing.
//
// Both carry the partition (stream, key), the event id, the lease generation (the fencing
// token) and the attempt number, in headers or environment variables. Anything else (a
// non-2xx status, a non-zero exit, a connection error, the handler's timeout) fails the
// attempt: the engine retries it and, after max_retries attempts, halts the partition
// with the failure reason. docs/delivery.md is the contract for handler authors.
//
// Delivery inherits the engine's guarantee: per key, one event at a time, in publish
// order; at least once, so a handler must be idempotent (the event id and the generation
// let it be).
package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Envelope is the JSON document an HTTP or exec handler receives: the event and where it
// came from. Data is the event payload as JSON (an object, not a string holding one).
type Envelope struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Category string `json:"category"`
	// Key is the partition key, "" for an unpartitioned category.
	Key string `json:"key"`
	// Stream is the stream the entry is on: {category}:{key}, its backfill lane, or the
	// category stream.
	Stream  string `json:"stream"`
	EntryID string `json:"entry_id"`
	// Data is the payload, verbatim JSON.
	Data json.RawMessage `json:"data"`
	// PublishedAt is the Redis time of the publish, RFC 3339 in UTC with milliseconds
	// (2025-01-31T10:00:00.123Z); null when the entry carries none.
	PublishedAt *string `json:"published_at"`
	Priority    int     `json:"priority"`
}

// publishedAtLayout is RFC 3339 with exactly three fractional digits.
const publishedAtLayout = "2006-01-02T15:04:05.000Z07:00"

// ErrBadPayload is returned (wrapped) when an event's data is not valid JSON, so it
// cannot be put in the envelope. The attempt fails like any other: the partition halts
// on the entry after its retries, and an operator inspects it.
var ErrBadPayload = errors.New("deliver: event data is not valid JSON")

// NewEnvelope builds the envelope of ev as delivered with d.
func NewEnvelope(ev engine.Event, d engine.Delivery) Envelope {
	env := Envelope{
		ID: ev.ID, Type: ev.Type, Category: ev.Category, Key: ev.Key,
		Stream: d.Stream, EntryID: d.EntryID, Data: ev.Data, Priority: ev.Priority,
	}
	if env.Category == "" {
		env.Category = d.Category
	}
	if env.Key == "" {
		env.Key = d.Key
	}
	if !ev.PublishedAt.IsZero() {
		s := ev.PublishedAt.UTC().Format(publishedAtLayout)
		env.PublishedAt = &s
	}
	return env
}

// Marshal renders the envelope of ev as JSON: the exact bytes an HTTP handler receives
// as its body (and signs over) and an exec handler reads from stdin. Empty data becomes
// null; data that is not valid JSON is an ErrBadPayload.
func Marshal(ev engine.Event, d engine.Delivery) ([]byte, error) {
	env := NewEnvelope(ev, d)
	if len(env.Data) == 0 {
		env.Data = json.RawMessage("null")
	} else if !json.Valid(env.Data) {
		return nil, fmt.Errorf("%w (event %s, entry %s)", ErrBadPayload, ev.ID, d.EntryID)
	}
	return json.Marshal(env)
}

// MarshalBatch renders the envelopes of a run of events delivered with d (an
// engine.BatchFunc's call) as a JSON array: the body an HTTP handler with batch_max above
// 1 receives. Each element is what Marshal gives for the event alone, with the event's
// own entry id (d.Entries), in order.
func MarshalBatch(evs []engine.Event, d engine.Delivery) ([]byte, error) {
	out := []byte{'['}
	for k, ev := range evs {
		b, err := Marshal(ev, eventDelivery(d, k))
		if err != nil {
			return nil, err
		}
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return append(out, ']'), nil
}

// MarshalNDJSON renders the envelopes of a run as NDJSON: one envelope (Marshal) per line,
// each ended by a newline, in order: what an exec handler with batch_max above 1 reads
// from stdin.
func MarshalNDJSON(evs []engine.Event, d engine.Delivery) ([]byte, error) {
	var out []byte
	for k, ev := range evs {
		b, err := Marshal(ev, eventDelivery(d, k))
		if err != nil {
			return nil, err
		}
		out = append(append(out, b...), '\n')
	}
	return out, nil
}

// eventDelivery returns the delivery of the k-th event of a run delivered with d: d, with
// the event's own entry id (d.Entries[k]; d.EntryID for the first of a run that lists
// none).
func eventDelivery(d engine.Delivery, k int) engine.Delivery {
	one := d
	one.Entries = nil
	switch {
	case k < len(d.Entries):
		one.EntryID = d.Entries[k]
	case k > 0:
		one.EntryID = ""
	}
	return one
}

// batchEntries returns the entry ids of the first and the last event of a run of n
// events delivered with d.
func batchEntries(d engine.Delivery, n int) (first, last string) {
	return eventDelivery(d, 0).EntryID, eventDelivery(d, n-1).EntryID
}

// Delivery metadata names: HTTP headers and exec environment variables carry the same
// values.
const (
	HeaderHandler    = "X-Seq-Handler"
	HeaderStream     = "X-Seq-Stream"
	HeaderKey        = "X-Seq-Key"
	HeaderEventID    = "X-Seq-Event-Id"
	HeaderGeneration = "X-Seq-Generation"
	HeaderAttempt    = "X-Seq-Attempt"
	// The permit of a run under a limit key (limit_by): the value, the concurrency slot
	// (-1 when only the rate is capped) and the permit's generation, a fencing token per
	// (value, slot). Not sent for a handler without a limit key.
	HeaderLimitKey        = "X-Seq-Limit-Key"
	HeaderLimitSlot       = "X-Seq-Limit-Slot"
	HeaderLimitGeneration = "X-Seq-Limit-Generation"
	// A run of a handler with batch_max above 1: the entry ids of its first and last
	// events and how many it holds. Sent only by such handlers (their body is an array);
	// X-Seq-Event-Id is then the first event's id.
	HeaderFirstEntry = "X-Seq-First-Entry"
	HeaderLastEntry  = "X-Seq-Last-Entry"
	HeaderBatchSize  = "X-Seq-Batch-Size"
	// HeaderTimestamp is when the attempt was sent, in Unix seconds; signed.
	HeaderTimestamp = "X-Seq-Timestamp"
	// HeaderSignature is "v1=<hex HMAC-SHA256>", one per signing key, comma separated
	// (see CanonicalString), sent when the handler has a signing key.
	HeaderSignature = "X-Seq-Signature"

	EnvHandler    = "SEQ_HANDLER"
	EnvStream     = "SEQ_STREAM"
	EnvCategory   = "SEQ_CATEGORY"
	EnvKey        = "SEQ_KEY"
	EnvEventID    = "SEQ_EVENT_ID"
	EnvGeneration = "SEQ_GENERATION"
	EnvAttempt    = "SEQ_ATTEMPT"
	// The limit permit, as the HTTP headers above; empty for a handler without a limit key.
	EnvLimitKey        = "SEQ_LIMIT_KEY"
	EnvLimitSlot       = "SEQ_LIMIT_SLOT"
	EnvLimitGeneration = "SEQ_LIMIT_GENERATION"
	// A run of a handler with batch_max above 1, as the HTTP headers above (stdin then
	// holds NDJSON, and SEQ_EVENT_ID is the first event's id); set only for such handlers.
	EnvFirstEntry = "SEQ_FIRST_ENTRY"
	EnvLastEntry  = "SEQ_LAST_ENTRY"
	EnvBatchSize  = "SEQ_BATCH_SIZE"

	// The handler run's W3C trace context (the publisher's, when it published with one):
	// the traceparent and tracestate headers of an HTTP delivery, and the TRACEPARENT and
	// TRACESTATE variables of an exec handler (empty without one), the convention of
	// command-line tracing tools.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	EnvTraceParent    = "TRACEPARENT"
	EnvTraceState     = "TRACESTATE"
)

// limitFields returns the limit permit's value, slot and generation as text, all empty
// without one.
func limitFields(d engine.Delivery) (value, slot, gen string) {
	if d.Limit == nil {
		return "", "", ""
	}
	return d.Limit.Value, strconv.Itoa(d.Limit.Slot), strconv.FormatInt(d.Limit.Generation, 10)
}

// DefaultTimeout bounds one attempt when a deliver table sets none (the config loader
// already defaults timeout to 10s; this covers Go callers).
const DefaultTimeout = 10 * time.Second

// deliveryOf returns the delivery of a handler's context, or one derived from the event
// when the HandlerFunc is called outside the engine (in a test).
func deliveryOf(ctx context.Context, ev engine.Event) engine.Delivery {
	if d, ok := engine.DeliveryFrom(ctx); ok {
		return d
	}
	stream := ev.Category
	if ev.Key != "" {
		stream = keyspace.SingleNode.PartitionStream(ev.Category, ev.Key)
	}
	return engine.Delivery{Category: ev.Category, Key: ev.Key, Stream: stream}
}
