// Package keyspace names everything seqctl keeps in Redis, and reads and writes every
// record it stores there: each key name is built by one method of Keys, and each stored
// format (the event envelope, a lease value, an owner and an instance id, the halt
// record, the instance registry entry, a stream entry id) is encoded and decoded by one
// function of this package. The engine, the operator commands (pkg/admin), the outbox
// and the CLI all use it, so a format has one definition.
//
// Public names are fixed by the specification, since operators and other tools rely on
// them (the README's key layout): the partition streams "{category}:{key}", their
// backfill lanes and dead-letter streams, and the discovery index
// "{category}:__partitions__". Internal names use the reserved __name__ form in a
// position no partition key can take (partition keys may not contain ':' nor have the
// __name__ form, nor may categories), so they never collide with a stream. Per-partition
// internal keys start with the partition stream wrapped in a Redis Cluster hash tag,
// e.g. "{order:client-123}:__lease__:Projector", so they hash to the same slot as the
// primary stream "order:client-123".
//
// Files: keys.go (Keys and every name), channels.go (pub/sub channel names and their
// inverses), records.go (the stored records).
package keyspace

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Keys builds the key names of one deployment: the single-node layout (SingleNode, the
// zero value) or the Redis Cluster layout (Cluster), where the partition key is the hash
// tag of everything that belongs to a partition:
//
//	primary stream     order:{client-123}             (single node: order:client-123)
//	backfill lane      order:{client-123}:backfill
//	dead-letter stream order:{client-123}:dlq
//	lease, halt, ...   order:{client-123}:__lease__:Projector
//	generation         {client-123}:__gen__:Projector (single node: one per group)
//	category DLQ       {order}:dlq                    (single node: order:dlq)
//	global keys        {__seqctl__}:control, {__seqctl__}:instances, ...
//
// So every script touches one slot: a partition's lanes, lease, halt record, marks and
// doorbell hash alike, and so do the partitions of all categories that share a key,
// which is what a process manager's correlation unit spans. The category index and the
// group registry have slots of their own; no script touches them in cluster mode (see
// publish.lua and reap.lua, and the protocol in docs/concepts.md).
type Keys struct{ cluster bool }

// SingleNode and Cluster are the two layouts.
var (
	SingleNode = Keys{}
	Cluster    = Keys{cluster: true}
)

// For returns the layout that suits a client: Cluster for a Redis Cluster client.
func For(c any) Keys {
	if _, ok := c.(interface {
		ForEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error
	}); ok {
		return Cluster
	}
	return SingleNode
}

// IsCluster reports the Redis Cluster layout.
func (k Keys) IsCluster() bool { return k.cluster }

// DLQToken is the reserved last segment of a dead-letter stream; no partition key may be
// this token.
const DLQToken = "dlq"

// globalTag is the hash tag of the global keys in cluster mode: the instance registry,
// the control, wake and audit streams, session keys and the replica barrier share one
// slot, so the doorbell's one blocking read over the control and wake streams is a
// single-slot command.
const globalTag = "{__seqctl__}"

// tagged returns the prefix of the per-stream internal keys of a stream (or lease unit):
// the stream itself when it carries a hash tag already (a cluster partition stream),
// else the stream wrapped in one.
func (k Keys) tagged(stream string) string {
	if k.cluster && strings.Contains(stream, "{") {
		return stream
	}
	return "{" + stream + "}"
}

// SlotTag returns the hash-tag content that decides the Redis Cluster slot of a stream
// or unit name (the whole name when it has no tag).
func SlotTag(s string) string {
	if i := strings.IndexByte(s, '{'); i >= 0 {
		if j := strings.IndexByte(s[i+1:], '}'); j > 0 {
			return s[i+1 : i+1+j]
		}
	}
	return s
}

func (k Keys) global(name string) string {
	if k.cluster {
		return globalTag + ":" + name
	}
	return "__seqctl__:" + name
}

// CategoryStream is the unpartitioned stream of a category (stream): used for events with
// no partition key, or when the broker lacks STREAM_PARTITIONING.
func (k Keys) CategoryStream(category string) string { return category }

// PartitionStream is the primary lane of one partition (stream): "{category}:{key}", with
// the key as the hash tag in cluster mode ("order:{client-123}").
func (k Keys) PartitionStream(category, key string) string {
	if k.cluster {
		return category + ":{" + key + "}"
	}
	return category + ":" + key
}

// LaneStream is the backfill lane of one partition (stream): the primary lane and
// ":{backfill_suffix}".
func (k Keys) LaneStream(category, key, suffix string) string {
	return k.PartitionStream(category, key) + ":" + suffix
}

// DLQStream is the dead-letter stream of one partition (stream): the primary lane and
// ":dlq". Only the operator's move-to-DLQ writes it.
func (k Keys) DLQStream(category, key string) string {
	return k.PartitionStream(category, key) + ":" + DLQToken
}

// CategoryDLQStream is the dead-letter stream of an unpartitioned category stream
// (stream): "{category}:dlq" ("{order}:dlq" in cluster mode, in the category stream's
// slot). No partition key can be "dlq", so it never collides.
func (k Keys) CategoryDLQStream(category string) string {
	if k.cluster {
		return "{" + category + "}:" + DLQToken
	}
	return category + ":" + DLQToken
}

// PartitionIndex is the discovery index of a category: "{category}:__partitions__". On
// one node a set of partition keys, which the publish script adds to and the owner's
// reap removes from; in cluster mode a hash (partition key -> IndexValue), removed from
// only by a compare on that value (see reap.lua and unindex.lua).
func (k Keys) PartitionIndex(category string) string { return category + ":__partitions__" }

// IndexMembers queues the read of a category's indexed partition keys: SMEMBERS of the
// set on one node, HKEYS of the hash on Redis Cluster.
func (k Keys) IndexMembers(ctx context.Context, c redis.Cmdable, category string) *redis.StringSliceCmd {
	if k.cluster {
		return c.HKeys(ctx, k.PartitionIndex(category))
	}
	return c.SMembers(ctx, k.PartitionIndex(category))
}

// IndexHas queues whether a category's index holds a partition key: SISMEMBER, or
// HEXISTS on Redis Cluster.
func (k Keys) IndexHas(ctx context.Context, c redis.Cmdable, category, key string) *redis.BoolCmd {
	if k.cluster {
		return c.HExists(ctx, k.PartitionIndex(category), key)
	}
	return c.SIsMember(ctx, k.PartitionIndex(category), key)
}

// IndexSize queues the read of the number of members of a category's index: SCARD, or
// HLEN on Redis Cluster.
func (k Keys) IndexSize(ctx context.Context, c redis.Cmdable, category string) *redis.IntCmd {
	if k.cluster {
		return c.HLen(ctx, k.PartitionIndex(category))
	}
	return c.SCard(ctx, k.PartitionIndex(category))
}

// IndexScan reads one page of a category's indexed partition keys from cursor, about
// count of them, those matching the glob match ("" for all): SSCAN of the set on one
// node, HSCAN of the hash on Redis Cluster (its fields). The next cursor is 0 after the
// last page. A key may be returned twice (SCAN's
// guarantee): callers that must not list it twice deduplicate.
func (k Keys) IndexScan(ctx context.Context, c redis.Cmdable, category string, cursor uint64, match string, count int64) ([]string, uint64, error) {
	if !k.cluster {
		return c.SScan(ctx, k.PartitionIndex(category), cursor, match, count).Result()
	}
	pairs, next, err := c.HScan(ctx, k.PartitionIndex(category), cursor, match, count).Result()
	keys := make([]string, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		keys = append(keys, pairs[i])
	}
	return keys, next, err
}

// The states a state index (StateIndex) is kept for.
const (
	IndexHalted = "halted"
	IndexPaused = "paused"
)

// StateIndex is the index of a category's units in one operator state, IndexHalted or
// IndexPaused: "{category}:__halted__", "{category}:__paused__" (sorted set: StateMember
// -> Redis TIME in ms of its last write). A writer adds the member before it writes the
// halt or pause record (engine/scripts stateindex.lua), never after, and nothing but a
// reader's verified prune removes one: so the index may name a unit that is no longer
// halted or paused, never miss one that is. It lets 'partitions list --state halted' and
// 'seqctl top' read the halted and paused partitions without reading every partition.
// The key has a Redis Cluster slot of its own; no script touches it with a partition's
// keys.
func (k Keys) StateIndex(category, state string) string { return category + ":__" + state + "__" }

// StateIndexBuilt records that a category's state indexes are complete (string, the
// Redis TIME in ms of the rebuild): written by 'seqctl partitions list --rebuild-index'
// after a scan of every partition indexed the halts and pauses that predate the index.
// Until it exists, readers do not trust the index and read every partition.
func (k Keys) StateIndexBuilt(category string) string { return category + ":__stateindex__" }

// StateMember is the member of a state index that names one unit for one group: the
// partition key, or a process manager's correlation value, and the group.
func StateMember(key, group string, pm bool) string {
	kind := "p"
	if pm {
		kind = "pm"
	}
	return kind + ":" + key + ":" + group
}

// ParseStateMember reads a StateMember; ok is false for anything else.
func ParseStateMember(m string) (key, group string, pm, ok bool) {
	kind, rest, found := strings.Cut(m, ":")
	if !found || (kind != "p" && kind != "pm") {
		return "", "", false, false
	}
	key, group, found = strings.Cut(rest, ":") // partition keys have no ':'
	if !found || group == "" {
		return "", "", false, false
	}
	return key, group, kind == "pm", true
}

// GroupRegistry is the set of consumer groups expected to read a category's partitions
// (set of group names): "{category}:__groups__". A partition is reaped only when every
// group in it has delivered and acknowledged everything, so a handler that is down or not
// yet deployed does not lose events.
func (k Keys) GroupRegistry(category string) string { return category + ":__groups__" }

// LeaseKey holds the ownership lease of one unit for one consumer group (string Lease,
// "{owner}:{generation}"). A unit is a partition stream, or a process manager's
// correlation unit (see PMUnit). On one node it lives while its owner's session does; in
// cluster mode it carries a PX expiry of the lease TTL while the partition is busy and is
// its own liveness (there is no cross-slot session key to check).
func (k Keys) LeaseKey(unit, group string) string { return k.tagged(unit) + ":__lease__:" + group }

// HaltKey holds the durable halt record of one partition lane for one group (hash, see
// Halt). Its presence stops the owner from advancing that partition until an operator
// resolves the head.
func (k Keys) HaltKey(stream, group string) string { return k.tagged(stream) + ":__halt__:" + group }

// PauseKey holds an operator's pause of one unit for one group (hash, see Pause), in the
// unit's slot. While it exists the owner starts no event of the unit; an expiry (PEXPIRE)
// ends a pause given a duration by itself.
func (k Keys) PauseKey(unit, group string) string { return k.PausePrefix(unit) + group }

// PausePrefix is PauseKey without the group: reap.lua checks every registered group's
// pause of a partition with it.
func (k Keys) PausePrefix(unit string) string { return k.tagged(unit) + ":__pause__:" }

// PMPauseForm returns the two parts around a group's name in the pause key of a process
// manager's correlation value: PauseKey(PMUnit(g, value), g) is head + g + middle + g for
// every group g. reap.lua checks, with it, the pause of every registered group that may
// be a process manager over the partition of key value (in the partition's slot).
func (k Keys) PMPauseForm(value string) (head, middle string) {
	const mark = "\x00"
	parts := strings.Split(k.PauseKey(k.PMUnit(mark, value), mark), mark)
	return parts[0], parts[1]
}

// GenerationKey is the fencing-generation counter of a unit's lease (string, INCR): one
// per group on a single node, which keeps every partition's generation strictly
// increasing across a reap and re-creation without a key per partition; in cluster mode
// one per group and slot tag, in the unit's slot, deleted with the reap (generations are
// floored at Redis time, so they keep increasing).
func (k Keys) GenerationKey(unit, group string) string {
	if k.cluster {
		return "{" + SlotTag(unit) + "}:__gen__:" + group
	}
	return "__seqctl__:generation:" + group
}

// IndexedMarkKey records, in cluster mode, that a partition stream's key is in the
// category index (string "1"): publish.lua reports its absence so the publisher writes
// the index after the append, and reap.lua deletes it with the stream. Not used on a
// single node, where publish.lua writes the index itself.
func (k Keys) IndexedMarkKey(stream string) string { return k.tagged(stream) + ":__indexed__" }

// InstancesKey is the registry of live engine instances (hash: RegistryField ->
// Instance). A field per process keeps two processes started with one --instance-id
// apart, so fair share counts both.
func (k Keys) InstancesKey() string { return k.global("instances") }

// AuditStream is the append-only log of operator actions (stream).
func (k Keys) AuditStream() string { return k.global("audit") }

// WakeStream is an instance's private notice stream (stream, capped): an operator's
// resolve of a halted head asks the owner to resume there (op=resume), and a shutting
// down instance appends to it to end its own blocking read at once (op=interrupt).
func (k Keys) WakeStream(instance string) string { return k.global("wake:" + instance) }

// PMUnit names the lease unit of a process manager's correlation value. It is not a
// stream; it only appears inside LeaseKey. The correlation value is the hash tag in
// cluster mode, so the unit shares the slot of its partitions.
func (k Keys) PMUnit(pm, value string) string {
	if k.cluster {
		return "__pm__:" + pm + ":{" + value + "}"
	}
	return "__pm__:" + pm + ":" + value
}

// SessionKey is an instance incarnation's liveness key (string, PX = lease TTL), renewed
// by the heartbeat with one PEXPIRE however many partitions the instance owns. On one
// node a lease whose owner's session key is gone is free: that is how leases expire; the
// fencing scripts build this name from the owner part of a lease value. In cluster mode
// the scripts never read it (the lease is its own liveness); the heartbeat and operators
// still use it to see which instances are alive.
func (k Keys) SessionKey(owner string) string { return k.SessionPrefix() + owner }

// SessionPrefix is the prefix of every session key.
func (k Keys) SessionPrefix() string { return k.global("session:") }

// ControlStream carries notices every instance listens to (stream, capped at about 1,000
// entries): a new partition was indexed (op=partition), a partition was reaped
// (op=reaped), a lease was released (op=released). It lets discovery and takeover react
// at once instead of polling.
func (k Keys) ControlStream() string { return k.global("control") }

// OutboxMarkKey records the last outbox row published to a stream (hash: seq, id),
// written by the publish script in the same step as the XADD, so a relay that crashes
// before it marks its row never publishes the row twice.
func (k Keys) OutboxMarkKey(stream string) string { return k.tagged(stream) + ":__outbox__" }

// EventMarkKey remembers that an event id was appended to a stream (string: the entry id,
// with a PX expiry of the publish dedupe window), written by the publish script in the
// same step as the XADD: a publish resent after a lost reply appends nothing.
func (k Keys) EventMarkKey(stream, eventID string) string {
	return k.tagged(stream) + ":__event__:" + eventID
}

// ReplicaBarrierKey is written right before a WAIT for replicas (string, PX one minute),
// so that the WAIT covers every write the primary applied before it, whichever
// connection made them. Only written with [broker] min_replicas > 0.
func (k Keys) ReplicaBarrierKey() string { return k.global("replicas") }

// KeyspaceProbeKey is a stream of one entry that an instance appends to and deletes at
// once, to learn whether Redis sends keyspace notifications when it may not read the
// setting: "__seqctl__:probe:{instance}". In cluster mode tag is a hash tag that puts it
// on the master probed: "__seqctl__:probe:{instance}:{tag}", the last braces literal.
func (k Keys) KeyspaceProbeKey(instance, tag string) string {
	if k.cluster {
		return "__seqctl__:probe:" + instance + ":{" + tag + "}"
	}
	return "__seqctl__:probe:" + instance
}
