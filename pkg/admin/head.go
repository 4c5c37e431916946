package admin

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Envelope is a stream entry's seqctl envelope (see the README's "Stream entry envelope").
type Envelope struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Category string `json:"category"`
	Key      string `json:"key"`
	// Data is the payload: the JSON as published when it is JSON, else a JSON string
	// holding the text, null when absent.
	Data     json.RawMessage `json:"data"`
	Priority int             `json:"priority"`
	// PublishedAt is the Redis time of the publish, nil when absent.
	PublishedAt *time.Time `json:"published_at"`
	// Fields holds any other fields of the entry.
	Fields map[string]string `json:"fields,omitempty"`
	// Problem says why the entry is not a seqctl envelope ("" when it is one); the
	// handler attempt fails on such an entry.
	Problem string `json:"problem,omitempty"`
}

// envelopeFields are the envelope's own field names.
var envelopeFields = []string{keyspace.FieldID, keyspace.FieldType, keyspace.FieldCategory, keyspace.FieldKey,
	keyspace.FieldData, keyspace.FieldPriority, keyspace.FieldPublishedAt}

// envelopeOf decodes an entry (keyspace.DecodeEnvelope) for operators; fields named in
// skip are left out of Fields.
func envelopeOf(m redis.XMessage, skip func(string) bool) Envelope {
	env, err := keyspace.DecodeEnvelope(m)
	e := Envelope{ID: env.ID, Type: env.Type, Category: env.Category, Key: env.Key, Priority: env.Priority}
	e.Data = rawJSON(string(env.Data), m.Values[keyspace.FieldData] != nil)
	if !env.PublishedAt.IsZero() {
		t := env.PublishedAt.UTC()
		e.PublishedAt = &t
	}
	for k, v := range m.Values {
		if slices.Contains(envelopeFields, k) || (skip != nil && skip(k)) {
			continue
		}
		if e.Fields == nil {
			e.Fields = map[string]string{}
		}
		s, _ := v.(string)
		e.Fields[k] = s
	}
	if err != nil {
		e.Problem = "not a seqctl envelope: the entry has no id or type field"
	}
	return e
}

// rawJSON returns s as JSON: itself when valid JSON, else a JSON string; null when absent.
func rawJSON(s string, present bool) json.RawMessage {
	if !present {
		return json.RawMessage("null")
	}
	if s != "" && json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// HeadStatus says where a head entry is.
type HeadStatus string

// The head statuses.
const (
	// HeadHalted: the partition halted on the entry after its attempts failed.
	HeadHalted HeadStatus = "halted"
	// HeadPending: delivered to the owner and not acknowledged (being handled, or
	// waiting for its next attempt).
	HeadPending HeadStatus = "pending"
	// HeadUndelivered: the next entry, not delivered yet.
	HeadUndelivered HeadStatus = "undelivered"
)

// Head is the head entry of a partition for one handler: the entry it halted on, else its
// oldest pending entry, else the next entry it has not been delivered.
type Head struct {
	// Stream is the partition's primary stream; Lane the stream the entry is on.
	Stream  string     `json:"stream"`
	Handler string     `json:"handler"`
	ID      string     `json:"id"`
	Lane    string     `json:"lane"`
	Status  HeadStatus `json:"status"`
	// Attempts is the entry's delivery count (from the stream's counter, which survives
	// takeovers); for a halted head, the attempts of its halt record when they are more
	// (a batch retries a run of events within one delivery).
	Attempts int64 `json:"attempts"`
	// LastError is the error of the last attempt, recorded when the partition halted;
	// "" otherwise (failed attempts before the halt are only logged by the owner).
	LastError string `json:"last_error"`
	// HaltedSince is when the partition halted, nil when not halted.
	HaltedSince *time.Time `json:"halted_since"`
	// AgeMS is the entry's age by its id and Redis TIME, in milliseconds.
	AgeMS int64 `json:"age_ms"`
	// IdleMS is the time since its last delivery, for a pending entry.
	IdleMS int64 `json:"idle_ms"`
	// Consumer is the consumer holding a pending entry ("{owner}:{generation}").
	Consumer string `json:"consumer,omitempty"`
	// ProcessManager is set when Handler is a sequential process manager.
	ProcessManager bool     `json:"process_manager"`
	Envelope       Envelope `json:"envelope"`
}

// Head returns the head entry of a partition for a handler. It is a *NotFoundError when
// the handler is caught up (nothing halted, pending or undelivered).
func (a *Admin) Head(ctx context.Context, stream, handler string) (*Head, error) {
	p, err := a.ParseStream(stream)
	if err != nil {
		return nil, err
	}
	ref, err := a.ref(ctx, p, handler)
	if err != nil {
		return nil, err
	}
	halt, err := a.halt(ctx, ref)
	if err != nil {
		return nil, err
	}
	h, err := a.headOf(ctx, p, ref, halt)
	if err != nil {
		return nil, err
	}
	if h == nil {
		// One EXISTS per lane: a backfill lane shares the primary's slot on Redis Cluster,
		// but the pipeline keeps this free of any layout reasoning.
		pipe := a.rdb.Pipeline()
		var exists []*redis.IntCmd
		for _, l := range a.lanes(p) {
			exists = append(exists, pipe.Exists(ctx, l))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, translate(err)
		}
		n := int64(0)
		for _, c := range exists {
			n += c.Val()
		}
		if n == 0 {
			return nil, &NotFoundError{What: "partition", Name: p.Stream(), Hint: "it has no stream (check the name with 'seqctl partitions list')"}
		}
		return nil, &NotFoundError{What: "head", Name: "of " + p.Stream() + " for " + handler,
			Hint: "the handler is caught up: nothing is halted, pending or undelivered"}
	}
	return h, nil
}

// halt reads the halt record of a head, its time in UTC; nil when it is not halted.
func (a *Admin) halt(ctx context.Context, ref engine.HeadRef) (*engine.HaltRecord, error) {
	h, err := a.broker.Halt(ctx, ref)
	if err != nil {
		return nil, translate(err)
	}
	if h != nil {
		h.Since = h.Since.UTC()
	}
	return h, nil
}

// headOf finds and reads the head entry (sequential calls: it is about one partition).
func (a *Admin) headOf(ctx context.Context, p PartitionName, ref engine.HeadRef, halt *engine.HaltRecord) (*Head, error) {
	now, err := a.rdb.Time(ctx).Result()
	if err != nil {
		return nil, translate(err)
	}
	h := &Head{Stream: p.Stream(), Handler: ref.Group, ProcessManager: ref.ProcessManager}
	switch {
	case halt != nil:
		h.ID, h.Lane, h.Status, h.LastError = halt.EntryID, halt.Stream, HeadHalted, halt.Error
		since := halt.Since
		h.HaltedSince = &since
		h.Attempts = int64(halt.Attempts)
		if h.Lane == "" {
			h.Lane = p.Stream()
		}
		if pe, err := a.pendingRange(ctx, h.Lane, ref.Group, h.ID, h.ID, 1); err != nil {
			return nil, err
		} else if len(pe) == 1 {
			// A batch retries a run within one delivery and splits it on its last
			// attempt, so the halt record may count more attempts than deliveries.
			h.Attempts, h.IdleMS, h.Consumer = max(h.Attempts, pe[0].RetryCount), pe[0].Idle.Milliseconds(), pe[0].Consumer
		}
	default:
		found := false
		for _, lane := range a.lanes(p) {
			pe, err := a.pendingRange(ctx, lane, ref.Group, "-", "+", 1)
			if err != nil {
				return nil, err
			}
			if len(pe) == 1 {
				h.ID, h.Lane, h.Status = pe[0].ID, lane, HeadPending
				h.Attempts, h.IdleMS, h.Consumer = pe[0].RetryCount, pe[0].Idle.Milliseconds(), pe[0].Consumer
				found = true
				break
			}
			next, err := a.nextUndelivered(ctx, lane, ref.Group)
			if err != nil {
				return nil, err
			}
			if next != "" {
				h.ID, h.Lane, h.Status = next, lane, HeadUndelivered
				found = true
				break
			}
		}
		if !found {
			return nil, nil
		}
	}
	h.AgeMS = max(now.UnixMilli()-int64(keyspace.ParseStreamID(h.ID).MS), 0)
	msgs, err := a.rdb.XRange(ctx, h.Lane, h.ID, h.ID).Result()
	if err != nil && !isNoKey(err) {
		return nil, translate(err)
	}
	if len(msgs) == 1 {
		h.Envelope = envelopeOf(msgs[0], nil)
	} else {
		h.Envelope = Envelope{Data: json.RawMessage("null"), Problem: "the entry is no longer in the stream (trimmed or deleted)"}
	}
	return h, nil
}

// pendingRange is XPENDING with details; a missing stream or group gives nothing.
func (a *Admin) pendingRange(ctx context.Context, stream, group, start, end string, count int64) ([]redis.XPendingExt, error) {
	pe, err := a.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: start, End: end, Count: count}).Result()
	if err != nil {
		if isNoGroup(err) || isNoKey(err) || errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return nil, translate(err)
	}
	return pe, nil
}

// nextUndelivered returns the first entry after the group's last-delivered id (the
// first entry when the group does not exist yet), "" when there is none.
func (a *Admin) nextUndelivered(ctx context.Context, stream, group string) (string, error) {
	start := "-"
	groups, err := a.rdb.XInfoGroups(ctx, stream).Result()
	switch {
	case isNoKey(err):
		return "", nil
	case err != nil:
		return "", translate(err)
	}
	for _, g := range groups {
		if g.Name == group {
			start = "(" + g.LastDeliveredID
		}
	}
	msgs, err := a.rdb.XRangeN(ctx, stream, start, "+", 1).Result()
	if err != nil {
		return "", translate(err)
	}
	if len(msgs) == 0 {
		return "", nil
	}
	return msgs[0].ID, nil
}

func isNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

func isNoKey(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "no such key") || strings.HasPrefix(err.Error(), "NOGROUP"))
}
