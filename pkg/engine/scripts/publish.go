package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var publishScript = load("publish.lua", false)

// Publish appends an event to its stream (publish.lua): on one node with the index write
// and the new partition's notice in the same step; deduplicated by an outbox sequence
// (DedupeSeq > 0) or by the event id (EventMark set).
type Publish struct {
	Stream string // the target lane stream
	// Index and Control are the category index and the control stream, written on one
	// node (Index set); "" on Redis Cluster and for an unpartitioned category.
	Index, Control string
	// IndexedMark is the partition's indexed mark, read on Redis Cluster (set there for a
	// partitioned category, "" otherwise).
	IndexedMark string
	OutboxMark  string // the stream's outbox dedupe mark, with DedupeSeq > 0
	EventMark   string // the event id's mark, for a direct publish
	// After is the event mark of the event before this one on the same stream in a
	// PublishMany batch: the event is appended only when that one was (or had been).
	After     string
	Bell      string // the stream's doorbell channel
	Key       string // the partition key ("" when not partitioned)
	Category  string
	DedupeSeq int64
	WindowMS  int64 // how long an event id is remembered (with EventMark)
	Fields    []any // the envelope's field/value pairs (keyspace.Envelope.Fields)
}

// PublishReply is publish.lua's reply.
type PublishReply struct {
	Appended bool   // false: a duplicate, nothing appended
	EntryID  string // the entry appended, or the one appended before
	// IndexNeeded: on Redis Cluster the partition's indexed mark is missing and the entry
	// is in the stream: the publisher must write the index (see the protocol in
	// docs/concepts.md).
	IndexNeeded bool
	// AfterRefused: nothing was appended because the event before it in the batch was
	// not (Publish.After).
	AfterRefused bool
}

// args returns the call's KEYS and ARGV.
func (c Publish) args() ([]string, []any) {
	s := c.Stream
	keys := []string{s, s, s, s, s, c.Bell, s, s}
	flags := ""
	switch {
	case c.Index != "":
		flags += "i"
		keys[1], keys[2] = c.Index, c.Control
	case c.IndexedMark != "":
		flags += "c"
		keys[6] = c.IndexedMark
	}
	switch {
	case c.DedupeSeq > 0:
		flags += "m"
		keys[3] = c.OutboxMark
	case c.EventMark != "":
		flags += "e"
		keys[4] = c.EventMark
	}
	if c.After != "" {
		flags += "p"
		keys[7] = c.After
	}
	args := append([]any{c.Key, c.Category, c.DedupeSeq, c.WindowMS, flags}, c.Fields...)
	return keys, args
}

// EvalSha queues the call on a pipeline (see RunPipelined).
func (c Publish) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	return publishScript.evalSha(ctx, pipe, c)
}

// Run calls the script.
func (c Publish) Run(ctx context.Context, rdb redis.Scripter) (PublishReply, error) {
	return ParsePublish(publishScript.run(ctx, rdb, c))
}

// ParsePublish reads the reply of a call.
func ParsePublish(cmd *redis.Cmd) (PublishReply, error) {
	return reply("publish.lua", cmd, func(code int64, rest []any) (PublishReply, error) {
		return PublishReply{Appended: code == 1, EntryID: str(rest, 0), IndexNeeded: num(rest, 1) == 1, AfterRefused: code == -1}, nil
	})
}
