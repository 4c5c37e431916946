package engine

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every Redis key name the product reads or writes is built in this file, and only here.
//
// Public names are fixed by the specification, since operators and other tools rely on
// them. Internal names use the reserved __name__ form in a position no partition key can
// take (partition keys may not contain ':' nor have the __name__ form, and category names
// may not contain ':' nor have the __name__ form), so they never collide with a stream.
// Per-partition internal keys start with the partition stream wrapped in a Redis Cluster
// hash tag, e.g. "{order:client-123}:__lease__:Projector", so they hash to the same slot as
// the primary stream "order:client-123".
//
// The package functions below give the single-node layout. Keys gives the layout of a
// deployment, single node or Redis Cluster; in cluster mode every key a script touches
// beside a partition stream shares the stream's slot, and global keys share one slot
// (see Keys).

// CategoryStream is the unpartitioned stream of a category (stream): used for events with
// no partition key, or when the broker lacks STREAM_PARTITIONING.
func CategoryStream(category string) string { return category }

// PartitionStream is the primary lane of one partition (stream): "{category}:{key}".
func PartitionStream(category, key string) string { return category + ":" + key }

// LaneStream is the backfill lane of one partition (stream):
// "{category}:{key}:{backfill_suffix}".
func LaneStream(category, key, suffix string) string {
	return category + ":" + key + ":" + suffix
}

// DLQStream is the dead-letter stream of one partition (stream): "{category}:{key}:dlq".
// Only the operator's move-to-DLQ writes it.
func DLQStream(category, key string) string { return category + ":" + key + ":" + dlqToken }

// CategoryDLQStream is the dead-letter stream of an unpartitioned category stream
// (stream): "{category}:dlq". No partition key can be "dlq", so it never collides.
func CategoryDLQStream(category string) string { return category + ":" + dlqToken }

// PartitionIndex is the discovery index of a category (set of partition keys):
// "{category}:__partitions__". The publish script adds to it; the owner's reap removes.
func PartitionIndex(category string) string { return category + ":__partitions__" }

// GroupRegistry is the set of consumer groups expected to read a category's partitions
// (set of group names): "{category}:__groups__". A partition is reaped only when every
// group in it has delivered and acknowledged everything, so a handler that is down or not
// yet deployed does not lose events.
func GroupRegistry(category string) string { return category + ":__groups__" }

// LeaseKey holds the ownership lease of one unit for one consumer group (string
// "{owner}:{generation}", with a PX expiry). A unit is a partition stream, or a process
// manager's correlation unit (see PMUnit).
func LeaseKey(unit, group string) string { return "{" + unit + "}:__lease__:" + group }

// HaltKey holds the durable halt record of one partition lane for one group (hash: entry,
// lane, attempts, error, since_ms, owner, generation). Its presence stops the owner from
// advancing that partition until an operator resolves the head.
func HaltKey(stream, group string) string { return "{" + stream + "}:__halt__:" + group }

// GenerationKey is the fencing-generation counter of a consumer group (string, INCR).
// One counter per group keeps every partition's generation strictly increasing, even
// across a reap and re-creation of the partition, without a key per partition.
func GenerationKey(group string) string { return "__seqctl__:generation:" + group }

// InstancesKey is the registry of live engine instances (hash: "{instance id}#{random}",
// one field per process, -> JSON with id, owner, host, pid, started, last heartbeat). A
// field per process keeps two processes started with one --instance-id apart, so fair
// share counts both.
func InstancesKey() string { return "__seqctl__:instances" }

// AuditStream is the append-only log of operator actions (stream).
func AuditStream() string { return "__seqctl__:audit" }

// WakeStream is an instance's private notice stream (stream, capped): an operator's
// resolve of a halted head asks the owner to resume there (op=resume), and a shutting
// down instance appends to it to end its own blocking read at once (op=interrupt).
func WakeStream(instance string) string { return "__seqctl__:wake:" + instance }

// BellChannel is the doorbell of one lane stream (sharded pub/sub channel, not a key):
// "{stream}:__bell__". Every script that appends to a lane SPUBLISHes the new entry id
// here in the same step, and the owner's doorbell SSUBSCRIBEs while the owner holds the
// lane, so an idle partition costs no Redis call until an entry arrives. The hash tag
// puts the channel in the slot of the stream "stream" itself, as Redis Cluster requires
// of sharded channels touched by a script.
func BellChannel(stream string) string { return "{" + stream + "}:__bell__" }

// PMUnit names the lease unit of a process manager's correlation value. It is not a
// stream; it only appears inside LeaseKey.
func PMUnit(pm, value string) string { return "__pm__:" + pm + ":" + value }

// SessionKey is an instance incarnation's liveness key (string, PX = lease TTL), renewed by
// the heartbeat with one PEXPIRE however many partitions the instance owns. A lease whose
// owner's session key is gone is free: that is how leases expire.
//
// The fencing scripts build this name from the owner part of a lease value, so these keys
// are not declared in KEYS: seqctl needs a single Redis node (or a primary with replicas),
// not Redis Cluster.
func SessionKey(owner string) string { return sessionPrefix + owner }

const sessionPrefix = "__seqctl__:session:"

// ControlStream carries notices every instance listens to (stream, capped): a new
// partition was created, a lease was released. It lets discovery and takeover react at
// once instead of polling.
func ControlStream() string { return "__seqctl__:control" }

// OutboxMarkKey records the last outbox row published to a stream (hash: seq, id), written
// by the publish script in the same step as the XADD, so a relay that crashes before it
// marks its row never publishes the row twice.
func OutboxMarkKey(stream string) string { return "{" + stream + "}:__outbox__" }

// EventMarkKey remembers that an event id was appended to a stream (string: the entry id,
// with a PX expiry of the publish dedupe window), written by the publish script in the
// same step as the XADD: a publish resent after a lost reply appends nothing.
func EventMarkKey(stream, eventID string) string { return "{" + stream + "}:__event__:" + eventID }

// ReplicaBarrierKey is written right before a WAIT for replicas (string, PX one minute),
// so that the WAIT covers every write the primary applied before it, whichever
// connection made them (see WaitReplicas). Only written with [broker] min_replicas > 0.
func ReplicaBarrierKey() string { return "__seqctl__:replicas" }

// globalTag is the hash tag of the global keys in cluster mode: the instance registry,
// the control, wake and audit streams, session keys and the replica barrier share one
// slot, so the doorbell's one blocking read over the control and wake streams is a
// single-slot command.
const globalTag = "{__seqctl__}"

// Keys builds the key names of one deployment: the single-node layout (the zero value,
// as the package functions) or the Redis Cluster layout, where the partition key is the
// hash tag of everything that belongs to a partition:
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

// SingleNodeKeys and ClusterKeys are the two layouts.
var (
	SingleNodeKeys = Keys{}
	ClusterKeys    = Keys{cluster: true}
)

// KeysFor returns the layout that suits a client: ClusterKeys for a Redis Cluster client.
func KeysFor(c any) Keys {
	if _, ok := c.(interface {
		ForEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error
	}); ok {
		return ClusterKeys
	}
	return SingleNodeKeys
}

// Cluster reports the Redis Cluster layout.
func (k Keys) Cluster() bool { return k.cluster }

// tagged returns the prefix of the per-stream internal keys of a stream (or lease unit):
// the stream itself when it carries a hash tag already (a cluster partition stream),
// else the stream wrapped in one.
func (k Keys) tagged(stream string) string {
	if k.cluster && strings.Contains(stream, "{") {
		return stream
	}
	return "{" + stream + "}"
}

// slotTag returns the hash-tag content that decides the slot of a stream or unit.
func slotTag(s string) string {
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

// CategoryStream: see the package function.
func (k Keys) CategoryStream(category string) string { return category }

// PartitionStream is the primary lane: "{category}:{key}", with the key as the hash tag
// in cluster mode ("order:{client-123}").
func (k Keys) PartitionStream(category, key string) string {
	if k.cluster {
		return category + ":{" + key + "}"
	}
	return PartitionStream(category, key)
}

// LaneStream is the backfill lane: the primary lane and the suffix.
func (k Keys) LaneStream(category, key, suffix string) string {
	return k.PartitionStream(category, key) + ":" + suffix
}

// DLQStream is a partition's dead-letter stream: the primary lane and ":dlq".
func (k Keys) DLQStream(category, key string) string {
	return k.PartitionStream(category, key) + ":" + dlqToken
}

// CategoryDLQStream is the dead-letter stream of an unpartitioned category stream;
// "{category}:dlq" in cluster mode, in the category stream's slot.
func (k Keys) CategoryDLQStream(category string) string {
	if k.cluster {
		return "{" + category + "}:" + dlqToken
	}
	return CategoryDLQStream(category)
}

// PartitionIndex: see the package function. In cluster mode it is a hash (partition key
// -> the entry id of the publish that indexed it and a random part, see indexValue),
// removed from only by a compare on that value (see reap.lua and unindex.lua).
func (k Keys) PartitionIndex(category string) string { return PartitionIndex(category) }

// GroupRegistry: see the package function.
func (k Keys) GroupRegistry(category string) string { return GroupRegistry(category) }

// LeaseKey: see the package function. In cluster mode the lease carries a PX expiry of
// the lease TTL and is its own liveness (there is no cross-slot session key to check).
func (k Keys) LeaseKey(unit, group string) string { return k.tagged(unit) + ":__lease__:" + group }

// HaltKey: see the package function.
func (k Keys) HaltKey(stream, group string) string { return k.tagged(stream) + ":__halt__:" + group }

// GenerationKey is the fencing-generation counter for a unit's lease: one per group on a
// single node; in cluster mode one per group and slot tag, in the unit's slot.
func (k Keys) GenerationKey(unit, group string) string {
	if k.cluster {
		return "{" + slotTag(unit) + "}:__gen__:" + group
	}
	return GenerationKey(group)
}

// IndexedMarkKey records, in cluster mode, that a partition stream's key is in the
// category index (string "1"): publish.lua reports its absence so the publisher writes
// the index after the append, and reap.lua deletes it with the stream. Not used on a
// single node, where publish.lua writes the index itself.
func (k Keys) IndexedMarkKey(stream string) string { return k.tagged(stream) + ":__indexed__" }

// KeyspaceChannel is the keyspace notification channel of a key in database db
// (pub/sub channel, not a key): "__keyspace@{db}__:{key}". With notify-keyspace-events
// holding K and t, Redis publishes each stream command's name on it ("xadd" for an
// append), whoever sent the command. On Redis Cluster it is published on the node that
// serves the key only, and its name hashes like the key (a cluster stream has the
// partition key as its hash tag).
func (k Keys) KeyspaceChannel(db int, key string) string {
	return keyspacePrefix + strconv.Itoa(db) + "__:" + key
}

const keyspacePrefix = "__keyspace@"

// KeyspaceProbeKey is a stream of one entry that an instance appends to and deletes at
// once, to learn whether Redis sends keyspace notifications when it may not read the
// setting (see sweep.go): "__seqctl__:probe:{instance}". On Redis Cluster tag is a hash
// tag that puts it on the master probed: "__seqctl__:probe:{instance}:{tag}", the last
// braces literal.
func (k Keys) KeyspaceProbeKey(instance, tag string) string {
	if k.cluster {
		return "__seqctl__:probe:" + instance + ":{" + tag + "}"
	}
	return "__seqctl__:probe:" + instance
}

// cutKeyspacePrefix returns the key of a keyspace channel, and whether channel is one.
func cutKeyspacePrefix(channel string) (string, bool) {
	rest, ok := strings.CutPrefix(channel, keyspacePrefix)
	if !ok {
		return "", false
	}
	i := strings.Index(rest, "__:")
	if i < 0 {
		return "", false
	}
	return rest[i+3:], true
}

// InstancesKey: see the package function.
func (k Keys) InstancesKey() string { return k.global("instances") }

// AuditStream: see the package function.
func (k Keys) AuditStream() string { return k.global("audit") }

// WakeStream: see the package function.
func (k Keys) WakeStream(instance string) string { return k.global("wake:" + instance) }

// BellChannel: see the package function.
func (k Keys) BellChannel(stream string) string { return k.tagged(stream) + ":__bell__" }

// PMUnit: see the package function; the correlation value is the hash tag in cluster
// mode, so the unit shares the slot of its partitions.
func (k Keys) PMUnit(pm, value string) string {
	if k.cluster {
		return "__pm__:" + pm + ":{" + value + "}"
	}
	return PMUnit(pm, value)
}

// SessionKey: see the package function. In cluster mode the scripts never read it (the
// lease is its own liveness); the heartbeat and operators still use it to see which
// instances are alive.
func (k Keys) SessionKey(owner string) string { return k.SessionPrefix() + owner }

// SessionPrefix is the prefix of every session key.
func (k Keys) SessionPrefix() string { return k.global("session:") }

// ControlStream: see the package function.
func (k Keys) ControlStream() string { return k.global("control") }

// OutboxMarkKey: see the package function.
func (k Keys) OutboxMarkKey(stream string) string { return k.tagged(stream) + ":__outbox__" }

// EventMarkKey: see the package function.
func (k Keys) EventMarkKey(stream, eventID string) string {
	return k.tagged(stream) + ":__event__:" + eventID
}

// ReplicaBarrierKey: see the package function.
func (k Keys) ReplicaBarrierKey() string { return k.global("replicas") }
