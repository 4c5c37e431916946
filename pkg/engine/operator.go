package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
		return PMUnit(r.Group, r.Key)
	}
	return r.Stream()
}

// unitIn and streamIn name the unit and the primary stream in the layout k.
func (r HeadRef) unitIn(k Keys) string {
	if r.ProcessManager {
		return k.PMUnit(r.Group, r.Key)
	}
	return r.streamIn(k)
}

func (r HeadRef) streamIn(k Keys) string {
	if r.Key == "" {
		return k.CategoryStream(r.Category)
	}
	return k.PartitionStream(r.Category, r.Key)
}

// Stream is the primary stream of the partition (single-node layout; the broker uses
// its own layout).
func (r HeadRef) Stream() string {
	if r.Key == "" {
		return CategoryStream(r.Category)
	}
	return PartitionStream(r.Category, r.Key)
}

// HaltRecord is the durable record of a halted partition.
type HaltRecord struct {
	EntryID    string    `json:"entry_id"`
	Stream     string    `json:"stream"` // the lane the head is on
	Lane       int       `json:"lane"`   // 0 primary, 1 backfill
	Attempts   int       `json:"attempts"`
	Error      string    `json:"error"`
	Since      time.Time `json:"since"`
	Owner      string    `json:"owner"`
	Generation int64     `json:"generation"`
}

// Halt reads the halt record of a partition, or nil when it is not halted.
func (b *RedisBroker) Halt(ctx context.Context, ref HeadRef) (*HaltRecord, error) {
	m, err := b.rdb.HGetAll(ctx, b.keys.HaltKey(ref.unitIn(b.keys), ref.Group)).Result()
	if err != nil {
		return nil, translateRedisErr(err)
	}
	return haltFromHash(m), nil
}

func haltFromHash(m map[string]string) *HaltRecord {
	if len(m) == 0 || m["entry"] == "" {
		return nil
	}
	h := &HaltRecord{EntryID: m["entry"], Stream: m["stream"], Error: m["error"], Owner: m["owner"]}
	h.Lane, _ = strconv.Atoi(m["lane"])
	h.Attempts, _ = strconv.Atoi(m["attempts"])
	h.Generation, _ = strconv.ParseInt(m["generation"], 10, 64)
	if ms, err := strconv.ParseInt(m["since_ms"], 10, 64); err == nil {
		h.Since = time.UnixMilli(ms)
	}
	return h
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
	keys := []string{k.HaltKey(unit, ref.Group), lane, dlq, k.LeaseKey(unit, ref.Group)}
	f := ""
	if force {
		f = "force"
	}
	wake := k.WakeStream("")
	if k.cluster {
		wake = "" // in another slot: woken below
	}
	args := []any{action, ref.Group, expectID, f, wake}
	for _, x := range extra {
		args = append(args, x)
	}
	if len(extra)%2 == 1 {
		args = append(args, "")
	}
	if err := loadScripts(ctx, b.rdb); err != nil {
		return err
	}
	res, err := scriptResolve.Run(ctx, b.rdb, keys, args...).Slice()
	if err != nil {
		return translateRedisErr(err)
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		if lease, _ := res[2].(string); k.cluster && lease != "" {
			b.wakeOwner(ctx, lease, ref.Group, lane)
		}
		return b.waitReplicas(ctx, actionNames[action])
	case -4:
		head, _ := res[1].(string)
		return &HeadMovedError{Expected: expectID, Head: head}
	case -5:
		return fmt.Errorf("%w: the head %s of %s is not halted; pass force to act on a running partition", ErrNotHalted, expectID, ref.streamIn(k))
	}
	if err := codeErr(code); err != nil {
		return err
	}
	return fmt.Errorf("engine: unexpected resolve reply %v", res)
}

// wakeOwner asks the owner of a lease to resume at once (op=resume on its wake stream),
// on Redis Cluster where resolve.lua cannot write the wake stream itself. Best effort:
// without it the owner re-checks the halt record on its backstop.
func (b *RedisBroker) wakeOwner(ctx context.Context, lease, group, lane string) {
	owner := ownerOf(lease)
	dot := strings.LastIndexByte(owner, '.')
	if dot <= 0 {
		return
	}
	_ = b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.keys.WakeStream(owner[:dot]), MaxLen: 100, Approx: true,
		Values: []any{"op", "resume", "group", group, "unit", lane}}).Err()
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
	r = k.Place(r)
	keys := []string{dlqStream, r.Stream, r.Stream, r.Stream, k.BellChannel(r.Stream), r.Stream}
	flags := ""
	if r.Key != "" && k.cluster {
		flags, keys[5] = "c", k.IndexedMarkKey(k.PartitionStream(r.Category, r.Key))
	} else if r.Key != "" {
		flags, keys[2], keys[3] = "i", r.Index, k.ControlStream()
	}
	res, err := scriptReplay.Run(ctx, b.rdb, keys, dlqID, r.Key, r.Category, flags).Slice()
	if err != nil {
		return Published{}, translateRedisErr(err)
	}
	if code, _ := res[0].(int64); code != 1 {
		return Published{}, fmt.Errorf("%w: DLQ entry %s of %s", ErrEntryGone, dlqID, dlqStream)
	}
	id, _ := res[1].(string)
	pub := Published{Category: r.Category, Key: r.Key, Stream: r.Stream, EntryID: id}
	if x, _ := res[2].(int64); x == 1 {
		if err := b.indexAfterAppend(ctx, r, id); err != nil {
			return pub, err
		}
	}
	return pub, b.waitReplicas(ctx, "DLQ replay")
}
