package engine

// Every Redis key name the product reads or writes is built in this file, and only here.
//
// Public names are fixed by the specification, since operators and other tools rely on
// them. Internal names use the reserved __name__ form in a position no partition key can
// take (partition keys may not contain ':' nor have the __name__ form, and category names
// may not contain ':' nor have the __name__ form), so they never collide with a stream.
// Per-partition internal keys start with the partition stream wrapped in a Redis Cluster
// hash tag, e.g. "{order:client-123}:__lease__:Projector", so they hash to the same slot as
// the primary stream "order:client-123".

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
