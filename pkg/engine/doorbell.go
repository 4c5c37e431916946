package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/ctxwait"
)

// doorbell wakes idle workers when data arrives, without polling, at a cost that does
// not grow with the partitions an instance owns.
//
// Lanes ring through Redis sharded pub/sub: every script that appends to a lane stream
// SPUBLISHes the new entry id on the lane's BellChannel in the same step. The instance
// holds one pub/sub connection; a lane's channel is subscribed when its worker first
// goes idle and stays subscribed until the worker exits, so a busy partition costs no
// SSUBSCRIBE per event and an idle one costs nothing at all. Operator notices (the
// instance's wake stream) and partition notices (the shared control stream) come through
// one blocking XREAD of those two streams.
//
// No wake-up is lost. Each lane has a ring count, bumped when its channel rings, when a
// subscription to it is confirmed and when the pub/sub connection fails; a worker notes
// the counts before its read (mark) and reads again instead of waiting when one moved
// before it was registered as waiting (watch). So an entry published between an empty
// read and the subscription that covers it (once the subscription is confirmed, the
// doorbell reads the lane's last entry id and wakes the waiting worker that has not seen
// it) or during a reconnection (the failure wakes every waiting worker, and the client's
// resubscription confirms every channel again) is always read. Without a working subscription (a reply error such as NOPERM
// on SSUBSCRIBE) idle workers fall back to reading every poll interval.
//
// On Redis Cluster a sharded channel is served by the master of its slot, and keyspace
// notifications are sent only by the master that holds the key, so there is one pub/sub
// connection per master (a shard), bound to that master's address and opened when a lane
// it holds is first watched; every subscription of a lane goes to the master of the lane
// stream's slot (not of the channel's: a keyspace channel of a stream without a hash tag
// hashes elsewhere). A shard whose connection fails (a reply error such as MOVED, a
// master that went away) is closed, its lanes are subscribed again through a fresh view
// of the slots, and every waiting worker reads once meanwhile. In keyspace mode a lane
// keeps its bell subscribed beside its keyspace channel: Redis drops the sharded bell
// when the slot moves to another master (it never drops a plain subscription), which
// tells the doorbell to move the keyspace subscription to the new master too.
type doorbell struct {
	e    *Engine
	wake string // this instance's wake stream
	ctrl string // the shared control stream

	kick chan struct{} // capacity 1: subscriptions to send or end (dirty lanes)

	// shards are the pub/sub connections: one ("") on a single node, one per master
	// address on Redis Cluster. Opened by manage, closed by loop; guarded by shardMu.
	shardMu sync.Mutex
	shards  map[string]*redis.PubSub
	lwg     sync.WaitGroup // the listeners of the shards

	// polling is set while subscriptions fail with a reply error: idle workers then
	// re-read every poll interval instead of waiting for a ring.
	polling atomic.Bool
	// resetPause is the wait before the lanes of the next reset shard are subscribed again
	// (see resetShard), in nanoseconds; reloading is set while a slot map reload after a
	// moved slot is under way (see slotMoved).
	resetPause atomic.Int64
	reloading  atomic.Bool
	// keyspace is set while every master sends keyspace notifications for streams: idle
	// lanes are subscribed on their keyspace channel (any publisher's append rings it)
	// instead of their bell (beside it on Redis Cluster; see sweep.go). ksLost (capacity
	// 1) asks watchKeyspace to read the setting again after the connection failed. db is
	// the database number of the keyspace channels.
	keyspace atomic.Bool
	ksWarned atomic.Bool // the warning that they are off was logged
	ksLost   chan struct{}
	db       int
	// onIdle, when set (tests), runs after a worker's empty read, before it is
	// registered as waiting.
	onIdle atomic.Pointer[func(w *worker)]

	// runs bounds the worker goroutines started or woken at once (see runGate).
	runs runGate

	mu sync.Mutex
	// lanes: lane stream -> state. The key is the worker's own lane string, and a ring
	// or a confirmation finds its lane from the channel's name (bellLanes), so an idle
	// lane costs one small struct and no string of its own. Guarded by mu.
	lanes    map[string]*bellLane
	dirty    map[*bellLane]struct{} // lanes whose subscription may have to change; guarded by mu
	checks   map[*bellLane]struct{} // lanes confirmed with workers waiting, to check; guarded by mu
	seq      uint64                 // source of ring counts; guarded by mu
	wakeLast string                 // owned by loop
	ctrlLast string                 // owned by loop
}

func newDoorbell(e *Engine) *doorbell {
	db := 0
	if c, ok := e.rdb.(*redis.Client); ok {
		db = c.Options().DB
	}
	return &doorbell{
		e: e, wake: e.keys.WakeStream(e.cfg.InstanceID), ctrl: e.keys.ControlStream(),
		kick: make(chan struct{}, 1), ksLost: make(chan struct{}, 1), db: db,
		runs:  runGate{free: wakeBurst},
		lanes: map[string]*bellLane{},
		dirty: map[*bellLane]struct{}{}, checks: map[*bellLane]struct{}{},
	}
}

// fallback returns how long an idle worker may wait before it reads again although no
// ring came: the poll interval while subscriptions fail, else 0 (no limit).
func (d *doorbell) fallback() time.Duration {
	if d.polling.Load() {
		return d.e.cfg.Timing.PollInterval
	}
	return 0
}

func (d *doorbell) kickSync() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// loop runs the doorbell: the pub/sub listener and the subscription manager on their own
// goroutines, the blocking read of the wake and control streams on this one. It returns
// at the hard stop, once the other two have ended.
func (d *doorbell) loop() {
	defer d.e.bg.Done()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.manage() }()
	d.readNotices()
	wg.Wait()
	d.shardMu.Lock()
	for _, ps := range d.shards {
		_ = ps.Close() // ends the listener's receive
	}
	d.shardMu.Unlock()
	d.lwg.Wait()
}

// kickAfter asks for a sync once d has passed.
func (d *doorbell) kickAfter(wait time.Duration) {
	go func() {
		if ctxwait.Sleep(d.e.hardCtx, wait) {
			d.kickSync()
		}
	}()
}
