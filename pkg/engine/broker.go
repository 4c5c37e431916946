package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
	keys Keys          // the key layout: Redis Cluster for a cluster client
	repl replicaPolicy // operator writes wait for replicas; see WithReplicas
	// stepHook, when set (tests), runs between the steps of a publish on Redis Cluster
	// ("appended", "indexed"); false stops the publish there, as a crash would.
	stepHook func(step string) bool
}

// NewRedisBroker returns a broker over the client; a *redis.ClusterClient selects the
// Redis Cluster key layout (see Keys).
func NewRedisBroker(c redis.UniversalClient) *RedisBroker {
	return &RedisBroker{rdb: c, keys: KeysFor(c)}
}

// Keys returns the key layout the broker writes.
func (b *RedisBroker) Keys() Keys { return b.keys }

// Kind returns "redis".
func (b *RedisBroker) Kind() string { return BrokerKindRedis }

// Has reports StreamPartitioning.
func (b *RedisBroker) Has(c Capability) bool { return c == StreamPartitioning }

// Client returns the broker's client.
func (b *RedisBroker) Client() redis.UniversalClient { return b.rdb }

// Publish routes and appends one event. The key is extracted and validated first: an
// invalid key returns a *InvalidKeyError and nothing is written. For a partition stream
// the XADD and the index SADD happen in one script.
//
// With a broker made WithReplicas (min_replicas N > 0) it then waits for N replicas
// (unless opt.SkipReplicaWait): when fewer acknowledge in time it returns the Published
// of the event, which is on the primary, with a *ReplicaShortfallError: a failover may
// lose it.
func (b *RedisBroker) Publish(ctx context.Context, d *Domain, eventType string, data []byte, opt PublishOptions) (Published, error) {
	r, err := d.Route(eventType, data, opt.Priority)
	if err != nil {
		return Published{}, err
	}
	ev := Event{ID: opt.ID, Type: eventType, Category: r.Category, Key: r.Key, Data: data, Priority: opt.Priority}
	if ev.ID == "" {
		ev.ID = NewEventID()
	}
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
	r = b.keys.Place(r)
	keys, args := b.publishCall(r, ev, dedupeSeq)
	res, err := scriptPublish.Run(ctx, b.rdb, keys, args...).Slice()
	if err != nil {
		return Published{}, translateRedisErr(err)
	}
	return b.published(ctx, r, ev, res)
}

// published reads publish.lua's reply and, on Redis Cluster, writes the index when the
// script asks for it (see indexAfterAppend).
func (b *RedisBroker) published(ctx context.Context, r Route, ev Event, res []any) (Published, error) {
	code, _ := res[0].(int64)
	id, _ := res[1].(string)
	pub := Published{EventID: ev.ID, Category: r.Category, Key: r.Key, Stream: r.Stream, EntryID: id, Duplicate: code == 0}
	if x, _ := res[2].(int64); x == 1 {
		if b.stepHook != nil && !b.stepHook("appended") {
			return pub, nil
		}
		if err := b.indexAfterAppend(ctx, r, id); err != nil {
			return pub, err
		}
	}
	return pub, nil
}

// publishCall returns the KEYS and ARGV of publish.lua for a placed route.
func (b *RedisBroker) publishCall(r Route, ev Event, dedupeSeq int64) ([]string, []any) {
	k := b.keys
	keys := []string{r.Stream, r.Stream, r.Stream, r.Stream, r.Stream, k.BellChannel(r.Stream), r.Stream}
	flags := ""
	if r.Key != "" {
		if k.cluster {
			flags += "c"
			keys[6] = k.IndexedMarkKey(k.PartitionStream(r.Category, r.Key))
		} else {
			flags += "i"
			keys[1], keys[2] = r.Index, k.ControlStream()
		}
	}
	if dedupeSeq > 0 {
		flags += "m"
		keys[3] = k.OutboxMarkKey(r.Stream)
	} else if ev.ID != "" {
		flags += "e"
		keys[4] = k.EventMarkKey(r.Stream, ev.ID)
	}
	args := append([]any{r.Key, r.Category, dedupeSeq, PublishDedupeWindow.Milliseconds(), flags}, envelopeArgs(ev)...)
	return keys, args
}

// indexAfterAppend is the second step of a publish on Redis Cluster, when the script
// reported the partition's indexed mark missing (a new partition, or one reaped): write
// the key into the category index, announce the partition on the control stream, and set
// the indexed mark while the lane still exists, in that order. A publisher that stops
// before the mark is set leaves it missing, so the next publish of the key (a retry after
// the error, the relay's next attempt) writes the index again.
func (b *RedisBroker) indexAfterAppend(ctx context.Context, r Route, id string) error {
	return indexPartition(ctx, b.rdb, b.keys, r.Category, r.Key, r.Stream, id, b.stepHook)
}

// indexValue is what an index write stores for a partition key on Redis Cluster: the
// entry id it indexes and a random part, so that no two writes store the same value and
// a reaper's compare-and-remove (unindex.lua) never matches a write that came after its
// read, even a retried publish's, which indexes an entry appended before.
func indexValue(entryID string) string { return entryID + "/" + randomToken() }

// indexPartition writes a partition key into its category's index on Redis Cluster (see
// indexAfterAppend), announces it (discovery adds it to its view; an instance that
// dropped the key while the partition was gone takes it again at once), then sets the
// indexed mark only while the lane exists (mark.lua): after a reap that came in between,
// the mark stays missing and the key's next publish indexes it again. The reaper uses it
// too, to heal a partition whose publisher stopped between the append and the index.
func indexPartition(ctx context.Context, c redis.UniversalClient, k Keys, category, key, lane, id string, hook func(string) bool) error {
	stream := k.PartitionStream(category, key)
	if err := c.HSet(ctx, k.PartitionIndex(category), key, indexValue(id)).Err(); err != nil {
		return fmt.Errorf("engine: appended %s to %s but could not index it yet (the next publish of the key does): %w",
			id, stream, translateRedisErr(err))
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: k.ControlStream(), MaxLen: 1000, Approx: true,
		Values: []any{"op", "partition", "category", category, "key", key}}).Err(); err != nil {
		return fmt.Errorf("engine: indexed %s but could not announce it (discovery finds it on its next full read): %w",
			stream, translateRedisErr(err))
	}
	if hook != nil && !hook("indexed") {
		return nil
	}
	if err := scriptMark.Run(ctx, c, []string{k.IndexedMarkKey(stream), lane}).Err(); err != nil {
		return fmt.Errorf("engine: indexed %s but could not mark it (the next publish indexes it again): %w",
			stream, translateRedisErr(err))
	}
	return nil
}

// InlineBroker runs handlers in-process, in strict submission order, one event at a time.
// It does not advertise StreamPartitioning: sequential_by is an accepted no-op there,
// since submission order already holds. Partition operations return ErrNotSupported.
type InlineBroker struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []inlineItem // guarded by mu
	busy   bool         // the dispatcher is handling an item; guarded by mu
	closed bool         // guarded by mu
	failed []InlineFailure
	dom    *Domain
	done   chan struct{}
}

type inlineItem struct {
	ev Event
}

// InlineFailure records an event a handler gave up on after its retries.
type InlineFailure struct {
	Handler string
	Event   Event
	Err     error
}

// NewInlineBroker returns an inline broker. Call Start with the initialized domain.
func NewInlineBroker() *InlineBroker {
	b := &InlineBroker{done: make(chan struct{})}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Kind returns "inline".
func (b *InlineBroker) Kind() string { return BrokerKindInline }

// Has reports no capability.
func (b *InlineBroker) Has(Capability) bool { return false }

// Start begins dispatching to the domain's handlers (those with a Func).
func (b *InlineBroker) Start(d *Domain) error {
	if !d.Initialized() {
		return errors.New("engine: domain not initialized: call Init first")
	}
	b.mu.Lock()
	b.dom = d
	b.mu.Unlock()
	go b.dispatch()
	return nil
}

// Publish validates and enqueues an event; handlers run in submission order.
func (b *InlineBroker) Publish(_ context.Context, d *Domain, eventType string, data []byte, opt PublishOptions) (Published, error) {
	r, err := d.Route(eventType, data, opt.Priority)
	if err != nil {
		return Published{}, err
	}
	ev := Event{ID: opt.ID, Type: eventType, Category: r.Category, Key: r.Key, Data: data, Priority: opt.Priority}
	if ev.ID == "" {
		ev.ID = NewEventID()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return Published{}, errors.New("engine: inline broker closed")
	}
	b.queue = append(b.queue, inlineItem{ev: ev})
	b.cond.Broadcast()
	return Published{EventID: ev.ID, Category: r.Category, Key: r.Key, Stream: r.Stream}, nil
}

func (b *InlineBroker) dispatch() {
	defer close(b.done)
	for {
		b.mu.Lock()
		for len(b.queue) == 0 && !b.closed {
			b.cond.Wait()
		}
		if len(b.queue) == 0 {
			b.mu.Unlock()
			return
		}
		it := b.queue[0]
		b.queue = b.queue[1:]
		b.busy = true
		d := b.dom
		b.mu.Unlock()
		for _, h := range d.Handlers {
			if h.Func == nil || !contains(h.Handles, it.ev.Type) {
				continue
			}
			var err error
			for attempt := 1; attempt <= orInt(h.MaxRetries, DefaultMaxRetries); attempt++ {
				ctx := WithDelivery(context.Background(), Delivery{Handler: h.Name, Category: it.ev.Category, Key: it.ev.Key, Stream: it.ev.Category, Attempt: attempt})
				if err = h.Func(ctx, it.ev); err == nil {
					break
				}
			}
			if err != nil {
				b.mu.Lock()
				b.failed = append(b.failed, InlineFailure{Handler: h.Name, Event: it.ev, Err: err})
				b.mu.Unlock()
			}
		}
		b.mu.Lock()
		b.busy = false
		b.cond.Broadcast()
		b.mu.Unlock()
	}
}

// Wait blocks until every published event has been handled.
func (b *InlineBroker) Wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.queue) > 0 || b.busy {
		b.cond.Wait()
	}
}

// Failures returns the events handlers gave up on.
func (b *InlineBroker) Failures() []InlineFailure {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]InlineFailure(nil), b.failed...)
}

// Close stops the dispatcher after the queue is drained.
func (b *InlineBroker) Close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	started := b.dom != nil
	b.mu.Unlock()
	if started {
		<-b.done
	}
}

// Partition operations are not supported inline.

// Skip is not supported by the inline broker.
func (b *InlineBroker) Skip(context.Context, HeadRef, string, bool) error {
	return fmt.Errorf("%w: skip (the inline broker has no partitions)", ErrNotSupported)
}

// MoveToDLQ is not supported by the inline broker.
func (b *InlineBroker) MoveToDLQ(context.Context, HeadRef, string, bool) error {
	return fmt.Errorf("%w: move to DLQ (the inline broker has no partitions)", ErrNotSupported)
}

// Retry is not supported by the inline broker.
func (b *InlineBroker) Retry(context.Context, HeadRef, string) error {
	return fmt.Errorf("%w: retry (the inline broker has no partitions)", ErrNotSupported)
}

// Halt is not supported by the inline broker.
func (b *InlineBroker) Halt(context.Context, HeadRef) (*HaltRecord, error) {
	return nil, fmt.Errorf("%w: halt records (the inline broker has no partitions)", ErrNotSupported)
}
