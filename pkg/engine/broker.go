package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// PublishOptions are the optional parts of a publish.
type PublishOptions struct {
	// ID is the event id; a random one is assigned when empty.
	ID string
	// Priority is the lane priority (default 0); with lanes enabled, below the threshold
	// means the backfill lane.
	Priority int
	// SkipReplicaWait leaves out the wait for replicas of a broker made WithReplicas
	// ([broker] min_replicas): a caller that publishes many events sets it on each and
	// calls RedisBroker.AwaitReplicas once after the last, one WAIT for all of them.
	SkipReplicaWait bool
}

// Published says where an event went.
type Published struct {
	EventID  string `json:"event_id"`
	Category string `json:"category"`
	Key      string `json:"key,omitempty"`
	Stream   string `json:"stream"`
	EntryID  string `json:"entry_id"`
	// Duplicate is set by PublishRouted when the dedupe mark showed the event was already
	// appended; nothing was written.
	Duplicate bool `json:"duplicate,omitempty"`
}

// RedisBroker publishes to Redis Streams and advertises StreamPartitioning: partitioned
// events go to {category}:{key} streams, consumed by an Engine under ownership leases.
// It takes a redis.UniversalClient that the caller owns.
type RedisBroker struct {
	rdb  redis.UniversalClient
	keys keyspace.Keys // the key layout: Redis Cluster for a cluster client
	repl replicaPolicy // operator writes wait for replicas; see WithReplicas
	// stepHook, when set (tests), runs between the steps of a publish on Redis Cluster
	// ("appended", "indexed"); false stops the publish there, as a crash would.
	stepHook func(step string) bool
}

// NewRedisBroker returns a broker over the client; a *redis.ClusterClient selects the
// Redis Cluster key layout (see keyspace.Keys).
func NewRedisBroker(c redis.UniversalClient) *RedisBroker {
	return &RedisBroker{rdb: c, keys: keyspace.For(c)}
}

// keyspace.Keys returns the key layout the broker writes.
func (b *RedisBroker) Keys() keyspace.Keys { return b.keys }

// Kind returns "redis".
func (b *RedisBroker) Kind() string { return BrokerKindRedis }

// Has reports StreamPartitioning.
func (b *RedisBroker) Has(c Capability) bool { return c == StreamPartitioning }

// Client returns the broker's client.
func (b *RedisBroker) Client() redis.UniversalClient { return b.rdb }

// Publish routes and appends one event. The key is extracted and validated first: an
// invalid key returns a *InvalidKeyError and nothing is written. For a partition stream
// the XADD and the index SADD happen in one script. When ctx carries a valid span context
// (OpenTelemetry), the entry stores it as W3C trace context for the handlers.
//
// With a broker made WithReplicas (min_replicas N > 0) it then waits for N replicas
// (unless opt.SkipReplicaWait): when fewer acknowledge in time it returns the Published
// of the event, which is on the primary, with a *ReplicaShortfallError: a failover may
// lose it.
func (b *RedisBroker) Publish(ctx context.Context, d *Domain, eventType string, data []byte, opt PublishOptions) (Published, error) {
	r, ev, err := d.routeEvent(eventType, data, opt)
	if err != nil {
		return Published{}, err
	}
	stampTrace(ctx, &ev)
	pub, err := b.PublishRouted(ctx, r, ev, 0)
	if err != nil || opt.SkipReplicaWait {
		return pub, err
	}
	return pub, b.waitReplicas(ctx, "publish")
}

// AwaitReplicas waits for the replicas of a broker made WithReplicas to acknowledge
// every write done before the call (one WAIT), for a caller that published many events
// with SkipReplicaWait or PublishRouted; write names them in a shortfall ("publish of 12
// events"). With no replicas required it returns nil at once.
func (b *RedisBroker) AwaitReplicas(ctx context.Context, write string) error {
	return b.waitReplicas(ctx, write)
}

// PublishDedupeWindow is how long a direct publish remembers an event id on its stream:
// within it, a second append of the same event id (go-redis resending the script after a
// lost reply, or a caller retrying with the same PublishOptions.ID) is skipped and
// reported as Duplicate. Each remembered id costs a small key for this long.
const PublishDedupeWindow = time.Minute

// PublishRouted appends an event whose route was already computed with Domain.Route (the
// outbox relay routes each row at publish time from the key stored on the row).
//
// It is idempotent under retries. With dedupeSeq > 0 (the relay) the append happens only
// if dedupeSeq is above the last sequence recorded for the stream, and the record
// advances in the same script. Otherwise the event id is remembered on the stream for
// PublishDedupeWindow. Published.Duplicate reports a skipped append (the entry id is
// then the one appended before).
func (b *RedisBroker) PublishRouted(ctx context.Context, r Route, ev Event, dedupeSeq int64) (Published, error) {
	r = r.In(b.keys)
	res, err := b.publishCall(r, ev, dedupeSeq).Run(ctx, b.rdb)
	if err != nil {
		return Published{}, translateRedisErr(err)
	}
	return b.published(ctx, r, ev, res)
}

// published reads publish.lua's reply and, on Redis Cluster, writes the index when the
// script asks for it (see indexAfterAppend).
func (b *RedisBroker) published(ctx context.Context, r Route, ev Event, res scripts.PublishReply) (Published, error) {
	pub := Published{EventID: ev.ID, Category: r.Category, Key: r.Key, Stream: r.Stream, EntryID: res.EntryID, Duplicate: !res.Appended}
	if res.IndexNeeded {
		return pub, b.indexAfterAppend(ctx, r, res.EntryID)
	}
	return pub, nil
}

// publishCall is the publish.lua call of an event on a placed route.
func (b *RedisBroker) publishCall(r Route, ev Event, dedupeSeq int64) scripts.Publish {
	k := b.keys
	c := scripts.Publish{Stream: r.Stream, Bell: k.BellChannel(r.Stream), Key: r.Key, Category: r.Category,
		DedupeSeq: dedupeSeq, WindowMS: PublishDedupeWindow.Milliseconds(), Fields: ev.Fields()}
	if r.Key != "" {
		if k.IsCluster() {
			c.IndexedMark = k.IndexedMarkKey(k.PartitionStream(r.Category, r.Key))
		} else {
			c.Index, c.Control = r.Index, k.ControlStream()
		}
	}
	if dedupeSeq > 0 {
		c.OutboxMark = k.OutboxMarkKey(r.Stream)
	} else if ev.ID != "" {
		c.EventMark = k.EventMarkKey(r.Stream, ev.ID)
	}
	return c
}

// indexAfterAppend is the second step of a publish on Redis Cluster, when the script
// reported the partition's indexed mark missing (a new partition, or one reaped): write
// the key into the category index, announce the partition on the control stream, and set
// the indexed mark while the lane still exists, in that order. A publisher that stops
// before the mark is set leaves it missing, so the next publish of the key (a retry after
// the error, the relay's next attempt) writes the index again.
func (b *RedisBroker) indexAfterAppend(ctx context.Context, r Route, id string) error {
	if b.stepHook != nil && !b.stepHook("appended") {
		return nil
	}
	return indexPartition(ctx, b.rdb, b.keys, r.Category, r.Key, r.Stream, id, b.stepHook)
}

// indexValue is what an index write stores for a partition key on Redis Cluster: the
// entry id it indexes and a random part, so that no two writes store the same value and
// a reaper's compare-and-remove (unindex.lua) never matches a write that came after its
// read, even a retried publish's, which indexes an entry appended before.
func indexValue(entryID string) string { return keyspace.IndexValue(entryID, randomToken()) }

// indexPartition writes a partition key into its category's index on Redis Cluster (see
// indexAfterAppend), announces it (discovery adds it to its view; an instance that
// dropped the key while the partition was gone takes it again at once), then sets the
// indexed mark only while the lane exists (mark.lua): after a reap that came in between,
// the mark stays missing and the key's next publish indexes it again. The reaper uses it
// too, to heal a partition whose publisher stopped between the append and the index.
func indexPartition(ctx context.Context, c redis.UniversalClient, k keyspace.Keys, category, key, lane, id string, hook func(string) bool) error {
	stream := k.PartitionStream(category, key)
	if err := c.HSet(ctx, k.PartitionIndex(category), key, indexValue(id)).Err(); err != nil {
		return fmt.Errorf("engine: appended %s to %s but could not index it yet (the next publish of the key does): %w",
			id, stream, translateRedisErr(err))
	}
	if err := announce(ctx, c, k, keyspace.Notice{Op: keyspace.NoticePartition, Category: category, Key: key}); err != nil {
		return fmt.Errorf("engine: indexed %s but could not announce it (discovery finds it on its next full read): %w",
			stream, translateRedisErr(err))
	}
	if hook != nil && !hook("indexed") {
		return nil
	}
	if _, err := (scripts.Mark{Mark: k.IndexedMarkKey(stream), Lane: lane}).Run(ctx, c); err != nil {
		return fmt.Errorf("engine: indexed %s but could not mark it (the next publish indexes it again): %w",
			stream, translateRedisErr(err))
	}
	return nil
}

// Partition operations are not supported inline.
