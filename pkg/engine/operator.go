package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// HeadRef names a partition (or an unpartitioned category stream) for one consumer group.
type HeadRef struct {
	Group    string // handler (consumer group) name
	Category string
	Key      string // "" for an unpartitioned category stream
	// BackfillSuffix is the lane token when priority lanes are on ("" = no backfill lane
	// known; the halt record still says which lane a halted head is on).
	BackfillSuffix string
	// ProcessManager is set when Group is a sequential process manager: its lease and halt
	// record belong to the correlation value Key across all its categories.
	ProcessManager bool
}

// Unit is the lease unit of the partition: the primary stream, or the process manager's
// correlation unit.
func (r HeadRef) Unit() string {
	if r.ProcessManager {
		return keyspace.SingleNode.PMUnit(r.Group, r.Key)
	}
	return r.Stream()
}

// unitIn and streamIn name the unit and the primary stream in the layout k.
func (r HeadRef) unitIn(k keyspace.Keys) string {
	if r.ProcessManager {
		return k.PMUnit(r.Group, r.Key)
	}
	return r.streamIn(k)
}

func (r HeadRef) streamIn(k keyspace.Keys) string {
	if r.Key == "" {
		return k.CategoryStream(r.Category)
	}
	return k.PartitionStream(r.Category, r.Key)
}

// Stream is the primary stream of the partition (single-node layout; the broker uses
// its own layout).
func (r HeadRef) Stream() string {
	if r.Key == "" {
		return keyspace.SingleNode.CategoryStream(r.Category)
	}
	return keyspace.SingleNode.PartitionStream(r.Category, r.Key)
}

// HaltRecord is the durable record of a halted partition (stored and read by the
// keyspace package, its one codec).
type HaltRecord = keyspace.Halt

// Halt reads the halt record of a partition, or nil when it is not halted.
func (b *RedisBroker) Halt(ctx context.Context, ref HeadRef) (*HaltRecord, error) {
	m, err := b.rdb.HGetAll(ctx, b.keys.HaltKey(ref.unitIn(b.keys), ref.Group)).Result()
	if err != nil {
		return nil, translateRedisErr(err)
	}
	return keyspace.DecodeHalt(m), nil
}

// HeadMovedError is returned by a compare-and-act operator call whose expected entry is
// no longer the head. Nothing was changed.
type HeadMovedError struct {
	Expected string
	Head     string // "" when there is no head
}

func (e *HeadMovedError) Error() string {
	if e.Head == "" {
		return fmt.Sprintf("engine: head moved: expected %s, but the partition has no head now; nothing was changed", e.Expected)
	}
	return fmt.Sprintf("engine: head moved: expected %s, the head is now %s; nothing was changed (inspect it again)", e.Expected, e.Head)
}

func (e *HeadMovedError) Unwrap() error { return ErrHeadMoved }

// Skip acknowledges the head entry without handling it, if it is still expectID. The
// head must be halted unless force. The owner resumes at once.
//
// Skip, MoveToDLQ, Retry and ReplayDLQ of a broker made WithReplicas wait for the
// replicas after the write; a *ReplicaShortfallError then means the action is done on
// the primary but may be lost on failover.
func (b *RedisBroker) Skip(ctx context.Context, ref HeadRef, expectID string, force bool) error {
	return b.resolve(ctx, ref, "skip", expectID, force, nil)
}

// MoveToDLQ copies the head entry with its halt metadata to {category}:{key}:dlq and
// acknowledges it, in one script, if it is still expectID. extra adds field/value pairs
// (who moved it, why).
func (b *RedisBroker) MoveToDLQ(ctx context.Context, ref HeadRef, expectID string, force bool, extra ...string) error {
	return b.resolve(ctx, ref, "dlq", expectID, force, extra)
}

// Retry clears the halt record so the owner tries the head once more now. If that
// attempt fails too, the partition halts again.
func (b *RedisBroker) Retry(ctx context.Context, ref HeadRef, expectID string) error {
	return b.resolve(ctx, ref, "retry", expectID, false, nil)
}

// actionNames name resolve's actions in errors.
var actionNames = map[string]string{"skip": "skip", "dlq": "move to DLQ", "retry": "retry"}

func (b *RedisBroker) resolve(ctx context.Context, ref HeadRef, action, expectID string, force bool, extra []string) error {
	if ref.Key != "" {
		if err := ValidateStreamKey(ref.Key, ref.BackfillSuffix); err != nil {
			return err
		}
	}
	// The lane the head is on: the halt record's; else the lane where the expected entry
	// is pending (primary first, then the backfill lane when one is known).
	k := b.keys
	lane := ref.streamIn(k)
	if h, err := b.Halt(ctx, ref); err != nil {
		return err
	} else if h != nil && h.Stream != "" {
		lane = h.Stream
	} else if ref.Key != "" && ref.BackfillSuffix != "" {
		back := k.LaneStream(ref.Category, ref.Key, ref.BackfillSuffix)
		onPrimary, _ := b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: lane, Group: ref.Group, Start: expectID, End: expectID, Count: 1}).Result()
		if len(onPrimary) == 0 {
			if p, _ := b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: back, Group: ref.Group, Start: expectID, End: expectID, Count: 1}).Result(); len(p) > 0 {
				lane = back
			}
		}
	}
	// The DLQ of the partition the head is on ({category}:{key}:dlq): for a process
	// manager the halted lane may belong to another of its categories.
	dlq := k.CategoryDLQStream(ref.Category)
	if parts := strings.Split(lane, ":"); len(parts) >= 2 {
		dlq = k.DLQStream(parts[0], strings.Trim(parts[1], "{}"))
	}
	unit := ref.unitIn(k)
	c := scripts.Resolve{Halt: k.HaltKey(unit, ref.Group), Lane: lane, DLQ: dlq, Lease: k.LeaseKey(unit, ref.Group),
		Action: action, Group: ref.Group, Expect: expectID, Force: force, WakePrefix: k.WakeStream(""), Extra: extra}
	if k.IsCluster() {
		c.WakePrefix = "" // in another slot: woken below
	}
	if err := loadScripts(ctx, b.rdb); err != nil {
		return err
	}
	res, err := c.Run(ctx, b.rdb)
	if err != nil {
		return translateRedisErr(err)
	}
	switch res.Code {
	case scripts.Resolved:
		if k.IsCluster() && res.Lease != "" {
			b.tellOwner(ctx, res.Lease, ref.Group, lane, keyspace.NoticeResume)
		}
		return b.waitReplicas(ctx, actionNames[action])
	case scripts.ResolveMoved:
		return &HeadMovedError{Expected: expectID, Head: res.Head}
	case scripts.ResolveNotHalt:
		return fmt.Errorf("%w: the head %s of %s is not halted; pass force to act on a running partition", ErrNotHalted, expectID, ref.streamIn(k))
	case scripts.ResolveGone:
		return ErrEntryGone
	}
	return fmt.Errorf("engine: unexpected resolve reply %+v", res)
}

// tellOwner sends the owner of a lease a notice (op on its wake stream) about a lane of
// its unit (or the unit itself): resume after resolve.lua on Redis Cluster, where the
// script cannot write the wake stream itself, and after a resume; pause after a pause.
// Best effort: without it the owner re-checks the halt or pause record on its backstop,
// and a pause at its next read.
func (b *RedisBroker) tellOwner(ctx context.Context, lease, group, lane, op string) {
	owner := ownerOf(lease)
	if owner == "" {
		return
	}
	_ = notify(ctx, b.rdb, b.keys.WakeStream(keyspace.InstanceOfOwner(owner)), keyspace.Notice{Op: op, Group: group, Unit: lane})
}

// Compile-time checks that both brokers satisfy BrokerInfo.
var (
	_ BrokerInfo = (*RedisBroker)(nil)
	_ BrokerInfo = (*InlineBroker)(nil)
)

// ReplayDLQ re-publishes a dead-lettered event at the tail of the lane r names (its event
// id kept, published_at new) and removes it from the DLQ stream, in one script. The
// event's position changes: it comes after everything published before the replay, and
// every consumer group of the category receives it again. ErrEntryGone: the DLQ entry is
// not there (already replayed or deleted); nothing was published. A
// *ReplicaShortfallError comes with the Published of the replay, which is done on the
// primary.
func (b *RedisBroker) ReplayDLQ(ctx context.Context, dlqStream, dlqID string, r Route) (Published, error) {
	if err := loadScripts(ctx, b.rdb); err != nil {
		return Published{}, err
	}
	k := b.keys
	r = r.In(k)
	c := scripts.Replay{DLQ: dlqStream, Lane: r.Stream, Bell: k.BellChannel(r.Stream), ID: dlqID, Key: r.Key, Category: r.Category}
	if r.Key != "" && k.IsCluster() {
		c.IndexedMark = k.IndexedMarkKey(k.PartitionStream(r.Category, r.Key))
	} else if r.Key != "" {
		c.Index, c.Control = r.Index, k.ControlStream()
	}
	res, gone, err := c.Run(ctx, b.rdb)
	if err != nil {
		return Published{}, translateRedisErr(err)
	}
	if gone {
		return Published{}, fmt.Errorf("%w: DLQ entry %s of %s", ErrEntryGone, dlqID, dlqStream)
	}
	id := res.EntryID
	pub := Published{Category: r.Category, Key: r.Key, Stream: r.Stream, EntryID: id}
	if res.IndexNeeded {
		if err := b.indexAfterAppend(ctx, r, id); err != nil {
			return pub, err
		}
	}
	return pub, b.waitReplicas(ctx, "DLQ replay")
}

// PauseRecord is an operator's pause of a partition for one group (stored and read by
// the keyspace package, its one codec).
type PauseRecord = keyspace.Pause

// ErrNotPaused: a resume found no pause record.
var ErrNotPaused = errors.New("engine: partition is not paused")

// Pause pauses a partition (or a process manager's correlation value) for one group: its
// owner finishes the event in flight and starts no other until Resume, or until d passes
// when d > 0 (the record expires by itself, with nothing running). No lease is needed;
// the owner is told at once. p's Reason and By are stored, Since and Until are set from
// Redis TIME and returned. A halted partition is refused (ErrHalted): resolve its head
// first. Pausing a paused partition replaces its record (replaced is then true).
func (b *RedisBroker) Pause(ctx context.Context, ref HeadRef, p PauseRecord, d time.Duration) (rec PauseRecord, replaced bool, err error) {
	res, err := b.pause(ctx, ref, scripts.Pause{For: d, Fields: p.Fields()})
	if err != nil {
		return PauseRecord{}, false, err
	}
	if res.Code == scripts.PauseHalted {
		return PauseRecord{}, false, fmt.Errorf("%w: %s is halted for %s; resolve its head first ('seqctl head show')", ErrHalted, ref.streamIn(b.keys), ref.Group)
	}
	p.Since, p.Until = res.Since, res.Until
	return p, res.Code == scripts.PauseReplaced, b.waitReplicas(ctx, "pause")
}

// Resume ends a partition's pause for one group; its owner starts again at once.
// ErrNotPaused when it was not paused.
func (b *RedisBroker) Resume(ctx context.Context, ref HeadRef) error {
	res, err := b.pause(ctx, ref, scripts.Pause{Resume: true})
	if err != nil {
		return err
	}
	if res.Code == scripts.PauseNotPaused {
		return fmt.Errorf("%w: %s for %s", ErrNotPaused, ref.streamIn(b.keys), ref.Group)
	}
	return b.waitReplicas(ctx, "resume")
}

// Paused reads a partition's pause record for one group, nil when it is not paused.
func (b *RedisBroker) Paused(ctx context.Context, ref HeadRef) (*PauseRecord, error) {
	m, err := b.rdb.HGetAll(ctx, b.keys.PauseKey(ref.unitIn(b.keys), ref.Group)).Result()
	if err != nil {
		return nil, translateRedisErr(err)
	}
	return keyspace.DecodePause(m), nil
}

// pause runs pause.lua for ref and tells the unit's owner, if any.
func (b *RedisBroker) pause(ctx context.Context, ref HeadRef, c scripts.Pause) (scripts.PauseReply, error) {
	if ref.Key != "" {
		if err := ValidateStreamKey(ref.Key, ref.BackfillSuffix); err != nil {
			return scripts.PauseReply{}, err
		}
	}
	k := b.keys
	unit := ref.unitIn(k)
	c.Record, c.Halt, c.Lease = k.PauseKey(unit, ref.Group), k.HaltKey(unit, ref.Group), k.LeaseKey(unit, ref.Group)
	if err := loadScripts(ctx, b.rdb); err != nil {
		return scripts.PauseReply{}, err
	}
	if !c.Resume {
		if err := indexState(ctx, b.rdb, k, keyspace.IndexPaused, []string{ref.Category}, ref.Key, ref.Group, ref.ProcessManager); err != nil {
			return scripts.PauseReply{}, translateRedisErr(err)
		}
	}
	res, err := c.Run(ctx, b.rdb)
	if err != nil {
		return scripts.PauseReply{}, translateRedisErr(err)
	}
	if res.Code == scripts.PauseDone || res.Code == scripts.PauseReplaced {
		op := keyspace.NoticePause
		if c.Resume {
			op = keyspace.NoticeResume
		}
		b.tellOwner(ctx, res.Lease, ref.Group, unit, op)
	}
	return res, nil
}

// indexState adds a unit (partition key or correlation value key, for group) to the
// state index (keyspace.StateIndex) of each of its categories. Callers run it before they
// write the halt or pause record, so that no record exists that the index does not name;
// a resolve or a resume leaves the member, which readers verify and prune. An
// unpartitioned category stream is not indexed: 'partitions list' does not list it.
func indexState(ctx context.Context, rdb redis.Scripter, k keyspace.Keys, state string, categories []string, key, group string, pm bool) error {
	if key == "" {
		return nil
	}
	member := keyspace.StateMember(key, group, pm)
	var done []string
	for _, c := range categories {
		if slices.Contains(done, c) {
			continue
		}
		done = append(done, c)
		if err := (scripts.StateIndex{Index: k.StateIndex(c, state), Member: member}).Run(ctx, rdb); err != nil {
			return err
		}
	}
	return nil
}
