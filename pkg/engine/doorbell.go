package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/ctxwait"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// doorbellBlock is how long one blocking XREAD of the wake and control streams blocks.
// An instance costs about one Redis call per doorbellBlock for them, however many
// partitions it owns. An entry ends the block at once, and so does the instance's own
// notice at shutdown: the block bounds nothing but the cost of an idle instance (a
// connection that fails ends the read with the failure; a frozen one is found by the
// pub/sub connection's ping, see bellPing).
const doorbellBlock = 5 * time.Second

// bellPing is how long the pub/sub connection may stay silent before the doorbell pings
// it. A ping left unanswered for another bellPing means the link is dead: the client
// drops the connection, dials again and subscribes every channel again.
const bellPing = 5 * time.Second

// bellBatch is the most channels one SSUBSCRIBE or SUNSUBSCRIBE names.
const bellBatch = 128

// bellCheckBatch is the most lanes whose last entry id one pipeline reads after their
// subscriptions were confirmed.
const bellCheckBatch = 512

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

// bellLane is the doorbell's state of one lane stream. Guarded by doorbell.mu.
type bellLane struct {
	stream string // the lane stream; its channel is Keys.BellChannel(stream)
	// seq is the lane's ring count: bumped (from doorbell.seq, so it never repeats) when
	// the channel rings, when a subscription to it is confirmed and when the connection
	// failed. rung is the highest entry id a bell ring named, and unknown the ring count
	// of the last bump that named none (a keyspace ring, a confirmation, a failure): a
	// worker whose read saw rung already, and no such bump since its mark, has nothing
	// new to read (on Redis Cluster with keyspace notifications, a publish rings the
	// keyspace channel and then the bell, and the bell's ring may come after the read).
	seq     uint64
	rung    keyspace.StreamID
	unknown uint64
	// The owners are the workers holding the lane that went idle on it at least once;
	// the channel is subscribed while there is one. first is unset when there is none;
	// more holds the others (several handlers over the same category: one worker per
	// group), which is rare, so that a lane with one owner costs no further allocation.
	first bellOwner
	more  []bellOwner
	// The lane's two subscriptions: its bell (SSUBSCRIBE) and its keyspace channel
	// (SUBSCRIBE). Which ones a held lane needs depends on the mode (doorbell.wanted).
	bell, ks laneSub
	// moved is set when Redis dropped the bell by itself on Redis Cluster (the slot moved
	// to another master): the keyspace subscription, left on the old master, moves too.
	moved bool
}

// laneSub is the state of one subscription of a lane. Guarded by doorbell.mu.
type laneSub struct {
	// on: the subscription was sent (or is kept by the client for resubscription) and not
	// ended since.
	on     bool
	unsubs int32         // unsubscriptions sent whose reply has not come
	shard  *redis.PubSub // the connection it was sent on
}

// bump moves the lane's ring count to seq, for a ring that named the entry id at (known)
// or for anything else.
func (b *bellLane) bump(seq uint64, at keyspace.StreamID, known bool) {
	b.seq = seq
	if !known {
		b.unknown = seq
	} else if b.rung.Less(at) {
		b.rung = at
	}
}

// news reports whether the lane rang since mark with something a read that saw up to
// last has not seen.
func (b *bellLane) news(mark uint64, last keyspace.StreamID) bool {
	return b.seq != mark && (b.unknown > mark || last.Less(b.rung))
}

// sub returns the lane's keyspace subscription (ks) or its bell's.
func (b *bellLane) sub(ks bool) *laneSub {
	if ks {
		return &b.ks
	}
	return &b.bell
}

// bellOwner is an owner of a lane: a worker, and whether it waits for an entry after
// the id given (the last entry id of the lane its read saw).
type bellOwner struct {
	w       *worker
	waiting bool
	after   keyspace.StreamID
}

// owners iterates over the lane's owners.
func (b *bellLane) owners(yield func(*bellOwner) bool) {
	if b.first.w == nil || !yield(&b.first) {
		return
	}
	for i := range b.more {
		if !yield(&b.more[i]) {
			return
		}
	}
}

// owner returns w's place among the lane's owners, or nil.
func (b *bellLane) owner(w *worker) *bellOwner {
	for o := range b.owners {
		if o.w == w {
			return o
		}
	}
	return nil
}

// addOwner adds w (not an owner yet) to the lane's owners.
func (b *bellLane) addOwner(w *worker) *bellOwner {
	if b.first.w == nil {
		b.first = bellOwner{w: w}
		return &b.first
	}
	b.more = append(b.more, bellOwner{w: w})
	return &b.more[len(b.more)-1]
}

// removeOwner removes w from the lane's owners; it reports whether w was one.
func (b *bellLane) removeOwner(w *worker) bool {
	o := b.owner(w)
	if o == nil {
		return false
	}
	if n := len(b.more); n > 0 {
		*o = b.more[n-1] // the last one takes w's place (first stays set while any is left)
		b.more[n-1] = bellOwner{}
		b.more = b.more[:n-1]
		if len(b.more) == 0 {
			b.more = nil
		}
	} else {
		b.first = bellOwner{}
	}
	return true
}

// hasWaiting reports whether an owner of the lane waits.
func (b *bellLane) hasWaiting() bool {
	for o := range b.owners {
		if o.waiting {
			return true
		}
	}
	return false
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

// channel returns the channel a lane is subscribed on: its keyspace channel (ks) or its
// bell.
func (d *doorbell) channel(stream string, ks bool) string {
	if ks {
		return d.e.keys.KeyspaceChannel(d.db, stream)
	}
	return d.e.keys.BellChannel(stream)
}

// bellLanes calls f for each lane of the doorbell whose channel (Keys.BellChannel, or
// Keys.KeyspaceChannel) is channel: normally one, the layouts give distinct streams
// distinct channels. Called with mu held.
func (d *doorbell) bellLanes(channel string, f func(*bellLane)) {
	if stream, ok := keyspace.KeyOfKeyspaceChannel(channel); ok {
		if b := d.lanes[stream]; b != nil {
			f(b)
		}
		return
	}
	for _, stream := range d.e.keys.BellStreams(channel) {
		if b := d.lanes[stream]; b != nil {
			f(b)
		}
	}
}

// init positions the doorbell at the current tails of the wake and control streams.
func (d *doorbell) init(ctx context.Context) error {
	last := func(stream string) (string, error) {
		m, err := d.e.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
		if err != nil {
			return "", translateRedisErr(err)
		}
		return firstID(m, "0-0"), nil
	}
	var err error
	if d.wakeLast, err = last(d.wake); err != nil {
		return err
	}
	d.ctrlLast, err = last(d.ctrl)
	return err
}

// mark returns the ring counts of w's lanes (0 for a lane the doorbell does not know),
// to be taken before a read and given to watch after it.
func (d *doorbell) mark(w *worker) []uint64 {
	m := make([]uint64, len(w.lanes))
	d.mu.Lock()
	for i, l := range w.lanes {
		if b := d.lanes[l]; b != nil {
			m[i] = b.seq
		}
	}
	d.mu.Unlock()
	return m
}

// watch registers an idle worker as waiting for an entry after lastIDs on its lanes (the
// last ids its read saw; mark was taken before that read). It reports false when a lane
// rang since mark: the worker must read again instead of waiting. A lane the worker
// watches for the first time is subscribed; the confirmation wakes the worker to read
// once more, since an entry published before the subscription took effect rang nobody.
func (d *doorbell) watch(w *worker, mark []uint64, lastIDs []keyspace.StreamID) bool {
	if f := d.onIdle.Load(); f != nil {
		(*f)(w)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, l := range w.lanes {
		if b := d.lanes[l]; b != nil && b.news(mark[i], lastIDs[i]) {
			return false
		}
	}
	kick := false
	for i, l := range w.lanes {
		b := d.lanes[l]
		if b == nil {
			d.seq++
			b = &bellLane{stream: l, seq: d.seq}
			d.lanes[l] = b
		}
		o := b.owner(w)
		if o == nil {
			o = b.addOwner(w)
			if !b.bell.on && !b.ks.on {
				d.dirty[b] = struct{}{}
				kick = true
			}
		}
		o.waiting, o.after = true, lastIDs[i]
	}
	if kick {
		d.kickSync()
	}
	return true
}

// unwatch ends a worker's wait (it was woken, or its timer fired); its lanes stay
// subscribed.
func (d *doorbell) unwatch(w *worker) {
	d.mu.Lock()
	for _, l := range w.lanes {
		if b := d.lanes[l]; b != nil {
			if o := b.owner(w); o != nil {
				o.waiting = false
			}
		}
	}
	d.mu.Unlock()
}

// forget drops an exiting worker; a lane no other worker of the instance holds is
// unsubscribed.
func (d *doorbell) forget(w *worker) {
	d.mu.Lock()
	kick := false
	for _, l := range w.lanes {
		b := d.lanes[l]
		if b == nil {
			continue
		}
		if b.removeOwner(w) && b.first.w == nil {
			d.dirty[b] = struct{}{}
			kick = true
		}
	}
	d.mu.Unlock()
	if kick {
		d.kickSync()
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

// interrupt ends the blocking XREAD at once (at shutdown) by appending to the wake stream.
func (d *doorbell) interrupt() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = notify(ctx, d.e.rdb, d.wake, keyspace.Notice{Op: keyspace.NoticeInterrupt})
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

// shardFor returns the pub/sub connection that serves a lane stream's channels: the only
// one on a single node; on Redis Cluster the one bound to the master of the stream's slot
// (opened on first use, with its listener), nil when the slot map cannot be read now.
func (d *doorbell) shardFor(ctx context.Context, stream string) *redis.PubSub {
	addr, open := "", func() *redis.PubSub { return d.e.rdb.SSubscribe(d.e.hardCtx) } // connects on first use
	if cc, ok := d.e.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, stream)
		if err != nil {
			return nil
		}
		addr, open = node.Options().Addr, func() *redis.PubSub { return node.SSubscribe(d.e.hardCtx) }
	}
	d.shardMu.Lock()
	defer d.shardMu.Unlock()
	if d.shards == nil {
		d.shards = map[string]*redis.PubSub{}
	}
	ps := d.shards[addr]
	if ps == nil {
		ps = open()
		d.shards[addr] = ps
		d.lwg.Add(1)
		go func() { defer d.lwg.Done(); d.listen(ps, addr) }()
	}
	return ps
}

// isShard reports whether ps is still the shard of addr (not closed by resetShard or at
// the stop).
func (d *doorbell) isShard(ps *redis.PubSub, addr string) bool {
	d.shardMu.Lock()
	defer d.shardMu.Unlock()
	return d.shards[addr] == ps
}

// resetShard closes a cluster shard whose connection failed (a slot that moved, a master
// that went away) and marks its lanes to be subscribed again through a fresh slot map,
// after a pause that grows while resets follow each other (up to a second) and shrinks
// back when a subscription is confirmed.
func (d *doorbell) resetShard(ps *redis.PubSub, addr string) {
	cc, ok := d.e.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	d.shardMu.Lock()
	if d.shards[addr] == ps {
		delete(d.shards, addr)
	}
	d.shardMu.Unlock()
	_ = ps.Close()
	cc.ReloadState(d.e.hardCtx)
	d.mu.Lock()
	for _, b := range d.lanes {
		for _, s := range []*laneSub{&b.bell, &b.ks} {
			if s.shard == ps {
				s.on, s.shard, s.unsubs = false, nil, 0
				d.dirty[b] = struct{}{}
			}
		}
	}
	d.mu.Unlock()
	pause := time.Duration(d.resetPause.Load())
	d.resetPause.Store(int64(min(max(2*pause, resetPauseMin), time.Second)))
	d.kickAfter(max(pause, resetPauseMin))
}

// resetPauseMin is the shortest wait before the lanes of a reset shard are subscribed
// again: go-redis reloads its slot map in the background meanwhile.
const resetPauseMin = 200 * time.Millisecond

// kickAfter asks for a sync once d has passed.
func (d *doorbell) kickAfter(wait time.Duration) {
	go func() {
		if ctxwait.Sleep(d.e.hardCtx, wait) {
			d.kickSync()
		}
	}()
}

// slotMoved handles a bell that Redis Cluster dropped by itself: its slot moved to
// another master. The slot map is read again, and the lane's subscriptions are sent
// again shortly, where the slot is served now.
func (d *doorbell) slotMoved() {
	if d.reloading.Swap(true) {
		return // a reload is under way: it syncs every lane dirty by then
	}
	if cc, ok := d.e.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(d.e.hardCtx)
	}
	go func() {
		if ctxwait.Sleep(d.e.hardCtx, resetPauseMin) {
			d.reloading.Store(false)
			d.kickSync()
		}
	}()
}

// readNotices reads the wake and control streams until the hard stop.
func (d *doorbell) readNotices() {
	backoff := 50 * time.Millisecond
	for d.e.hardCtx.Err() == nil {
		res, err := d.e.rdb.XRead(d.e.hardCtx, &redis.XReadArgs{
			Streams: []string{d.wake, d.ctrl, d.wakeLast, d.ctrlLast}, Count: 64, Block: doorbellBlock,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if d.e.hardCtx.Err() != nil {
				return
			}
			d.e.logs.warn("doorbell", "doorbell read failed; waking every idle worker", "err", translateRedisErr(err))
			d.lost()
			ctxwait.Sleep(d.e.hardCtx, backoff)
			backoff = min(backoff*2, time.Second) // Redis may be back soon: notice within a second
			continue
		}
		backoff = 50 * time.Millisecond
		for _, s := range res {
			if len(s.Messages) == 0 {
				continue
			}
			lastID := s.Messages[len(s.Messages)-1].ID
			switch s.Stream {
			case d.wake:
				d.wakeLast = lastID
				for _, m := range s.Messages {
					d.onWake(m)
				}
			case d.ctrl:
				d.ctrlLast = lastID
				d.e.controlRead(s.Messages)
				for _, m := range s.Messages {
					switch n := keyspace.DecodeNotice(m); n.Op {
					case keyspace.NoticeReleased:
						d.e.forgetOwner(n.Group, n.Unit)
						d.e.lives.registryDue() // an instance may be stopping
					case keyspace.NoticeInstance:
						d.e.lives.registryDue()
					}
				}
				d.e.kickDiscovery()
			}
		}
	}
}

// onWake handles a notice on the instance's wake stream.
func (d *doorbell) onWake(m redis.XMessage) {
	n := keyspace.DecodeNotice(m)
	if n.Op != keyspace.NoticeResume && n.Op != keyspace.NoticePause {
		return
	}
	// A notice names a lane (an operator's resolve of the head on it) or the lease unit (a
	// pause or resume): a process manager's unit is no lane.
	d.e.mu.Lock()
	w := d.e.byLane[laneKey(n.Group, n.Unit)]
	if w == nil {
		w = d.e.workers[unitID(n.Group, n.Unit)]
	}
	d.e.mu.Unlock()
	if w == nil {
		return
	}
	if n.Op == keyspace.NoticePause {
		w.pauseNoted.Store(true)
	}
	w.poke()
}

// listen receives from the pub/sub connection until it is closed. Rings and
// subscription confirmations wake waiting workers; any failure wakes all of them.
func (d *doorbell) listen(ps *redis.PubSub, addr string) {
	backoff := 50 * time.Millisecond
	pinged := false
	for d.e.hardCtx.Err() == nil {
		var msg any
		var err error
		if pinged {
			// A timeout here is not allowed: the client then drops the connection and
			// reconnects, subscribing every channel again.
			ctx, cancel := context.WithTimeout(d.e.hardCtx, bellPing)
			msg, err = ps.Receive(ctx)
			cancel()
		} else {
			msg, err = ps.ReceiveTimeout(d.e.hardCtx, bellPing)
		}
		if err != nil {
			if d.e.hardCtx.Err() != nil || !d.isShard(ps, addr) {
				return // closed at the stop, or by resetShard
			}
			var ne interface{ Timeout() bool }
			if !pinged && errors.As(err, &ne) && ne.Timeout() {
				pinged = true
				ctx, cancel := context.WithTimeout(d.e.hardCtx, bellPing)
				err = ps.Ping(ctx)
				cancel()
				if err == nil {
					continue
				}
			}
			pinged = false
			var re redis.Error
			if errors.As(err, &re) {
				// A refused SSUBSCRIBE (NOPERM, an unknown command, a slot that moved):
				// poll until a subscription is confirmed.
				d.polling.Store(true)
			}
			if d.e.keys.IsCluster() {
				// The connection is bound to one master: a slot that moved (MOVED), a
				// master that failed over or left, a client go-redis closed. Subscribe
				// its lanes again where their slots are served now.
				d.e.logs.warn("doorbell-pubsub", "doorbell connection failed; subscribing again through a fresh slot map, waking every idle worker meanwhile", "node", addr, "err", translateRedisErr(err))
				d.lost()
				d.resetShard(ps, addr)
				return
			}
			d.e.logs.warn("doorbell-pubsub", "doorbell subscription failed; waking every idle worker", "err", translateRedisErr(err))
			d.lost()
			ctxwait.Sleep(d.e.hardCtx, backoff)
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff, pinged = 50*time.Millisecond, false
		switch m := msg.(type) {
		case *redis.Message:
			if _, ks := keyspace.KeyOfKeyspaceChannel(m.Channel); ks {
				if m.Payload == "xadd" { // not the other stream events (xtrim, xgroup-...)
					d.rang(m.Channel, "")
				}
				continue
			}
			d.rang(m.Channel, m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe", "subscribe": // the plain kind: an embedded Redis's aliases (seqctl dev)
				d.polling.Store(false)
				d.resetPause.Store(0)
				d.confirmed(m.Channel)
			case "sunsubscribe", "unsubscribe":
				d.unsubscribed(m.Channel)
			}
		}
	}
}

// takeWaiting ends the wait of the lane's waiting workers whose last-seen entry id
// passes behind, and appends them to out, to be woken. doorbell.mu is held.
func (b *bellLane) takeWaiting(out []*worker, behind func(lastSeen keyspace.StreamID) bool) []*worker {
	for o := range b.owners {
		if o.waiting && behind(o.after) {
			out = append(out, o.w)
			o.waiting = false
		}
	}
	return out
}

// rang handles a ring: id was appended to the channel's lane.
func (d *doorbell) rang(channel, id string) {
	at := keyspace.ParseStreamID(id)
	d.mu.Lock()
	var wake []*worker
	d.bellLanes(channel, func(b *bellLane) {
		d.seq++
		b.bump(d.seq, at, id != "")
		wake = b.takeWaiting(wake, func(last keyspace.StreamID) bool { return id == "" || last.Less(at) })
	})
	d.mu.Unlock()
	for _, w := range wake {
		w.poke()
	}
}

// confirmed handles a subscription confirmation. What was appended to the lane before
// the subscription took effect rang nobody, so the lane's last entry id is read once
// (check) and the waiting workers that have not seen it are woken to read it. Checking
// in the doorbell, pipelined, instead of waking every waiting worker to read, keeps the
// confirmation of thousands of new subscriptions (an instance taking its share) from
// becoming as many fenced reads at once.
func (d *doorbell) confirmed(channel string) {
	d.mu.Lock()
	d.bellLanes(channel, func(b *bellLane) {
		d.seq++
		b.bump(d.seq, keyspace.StreamID{}, false)
		if b.hasWaiting() {
			d.checks[b] = struct{}{}
			d.kickSync()
		}
	})
	d.mu.Unlock()
}

// check reads the last entry id of lanes whose subscription was just confirmed (one
// pipeline per bellCheckBatch lanes) and wakes each waiting worker that has not seen it.
// A failed read wakes them all.
func (d *doorbell) check() {
	d.mu.Lock()
	lanes := make([]*bellLane, 0, len(d.checks))
	for b := range d.checks {
		lanes = append(lanes, b)
	}
	if len(d.checks) > 0 {
		d.checks = map[*bellLane]struct{}{} // not cleared: a map keeps the room it grew to
	}
	d.mu.Unlock()
	for len(lanes) > 0 && d.e.hardCtx.Err() == nil {
		batch := lanes[:min(len(lanes), bellCheckBatch)]
		lanes = lanes[len(batch):]
		ctx, cancel := context.WithTimeout(d.e.hardCtx, 5*time.Second)
		pipe := d.e.rdb.Pipeline()
		cmds := make([]*redis.XMessageSliceCmd, len(batch))
		for i, b := range batch {
			cmds[i] = pipe.XRevRangeN(ctx, b.stream, "+", "-", 1)
		}
		_, err := pipe.Exec(ctx)
		cancel()
		var wake []*worker
		d.mu.Lock()
		for i, b := range batch {
			last := keyspace.ParseStreamID(firstID(cmds[i].Val(), "0-0"))
			failed := err != nil && !errors.Is(err, redis.Nil)
			wake = b.takeWaiting(wake, func(seen keyspace.StreamID) bool { return failed || seen.Less(last) })
		}
		d.mu.Unlock()
		for _, w := range wake {
			w.poke()
		}
	}
}

// unsubscribed handles an unsubscription reply, or a bell Redis dropped by itself (a
// Redis Cluster slot that moved): a lane still held is subscribed again, and on Redis
// Cluster its keyspace subscription moves with it to the slot's new master.
func (d *doorbell) unsubscribed(channel string) {
	_, ks := keyspace.KeyOfKeyspaceChannel(channel)
	moved := false
	d.mu.Lock()
	d.bellLanes(channel, func(b *bellLane) {
		s := b.sub(ks)
		if s.unsubs > 0 {
			s.unsubs--
		} else if s.on {
			s.on, s.shard = false, nil
			d.dirty[b] = struct{}{}
			if !ks && d.e.keys.IsCluster() {
				b.moved, moved = true, true
			} else {
				d.kickSync()
			}
		}
		d.drop(b)
	})
	d.mu.Unlock()
	if moved {
		d.slotMoved()
	}
}

// lost handles a failure of the connection (or of Redis): every lane's ring count moves
// and every waiting worker is woken to read again. SUNSUBSCRIBE replies still due will
// not come; the client subscribes its channels again when it reconnects.
func (d *doorbell) lost() {
	select {
	case d.ksLost <- struct{}{}: // a restart or a failover may have changed the setting
	default:
	}
	d.wakeAll()
}

// wakeAll moves every lane's ring count and wakes every waiting worker to read again.
func (d *doorbell) wakeAll() {
	d.mu.Lock()
	var wake []*worker
	for _, b := range d.lanes {
		d.seq++
		b.bump(d.seq, keyspace.StreamID{}, false)
		b.bell.unsubs, b.ks.unsubs = 0, 0
		wake = b.takeWaiting(wake, func(keyspace.StreamID) bool { return true })
		d.drop(b)
	}
	d.mu.Unlock()
	for _, w := range wake {
		w.poke()
	}
}

// drop forgets a lane nobody holds, once its channel is unsubscribed. Called with mu held.
func (d *doorbell) drop(b *bellLane) {
	if b.first.w == nil && !b.bell.on && !b.ks.on && b.bell.unsubs == 0 && b.ks.unsubs == 0 {
		delete(d.lanes, b.stream)
		delete(d.dirty, b)
		delete(d.checks, b)
	}
}

// manage sends the subscriptions the lanes need, and checks the lanes whose
// subscription was confirmed, until the hard stop.
func (d *doorbell) manage() {
	for {
		select {
		case <-d.e.hardCtx.Done():
			return
		case <-d.kick:
		}
		d.sync()
	}
}

// sync subscribes the channels of held lanes and unsubscribes those nobody holds. While
// the engine stops, channels stay subscribed: the connection closes at the end anyway.
func (d *doorbell) sync() {
	changes := d.takeChanges(d.e.stopping(), d.keyspace.Load())
	subs, unsubs := d.placeChanges(changes)
	// Channels go in batches per connection; on Redis Cluster one SSUBSCRIBE may name the
	// channels of one slot only, so each bell goes on its own there.
	batch := func(ks bool) int {
		if d.e.keys.IsCluster() && !ks {
			return 1
		}
		return bellBatch
	}
	// Ends first: a keyspace subscription that moves may end and start again on one
	// connection (a slot map not reloaded yet), and must end up subscribed.
	for c, chs := range unsubs {
		if c.ks {
			d.sendSubscriptions(chs, batch(true), c.ps.Unsubscribe)
		} else {
			d.sendSubscriptions(chs, batch(false), c.ps.SUnsubscribe)
		}
	}
	for c, chs := range subs {
		if c.ks {
			d.sendSubscriptions(chs, batch(true), c.ps.Subscribe)
		} else {
			d.sendSubscriptions(chs, batch(false), c.ps.SSubscribe)
		}
	}
	d.check()
}

// wanted returns the subscriptions a held lane needs in a mode: its bell without
// keyspace notifications; with them its keyspace channel, and on Redis Cluster its bell
// too (see doorbell: the bell's drop tells that the slot moved).
func (d *doorbell) wanted(ksMode bool) (bell, ks bool) {
	return !ksMode || d.e.keys.IsCluster(), ksMode
}

// subChange is a subscription sync sends or ends.
type subChange struct {
	b       *bellLane
	channel string
	ks      bool          // a keyspace channel (SUBSCRIBE), else a bell (SSUBSCRIBE)
	unsub   *redis.PubSub // the connection to unsubscribe on; nil to subscribe
}

// subConn is a pub/sub connection and the kind of channel sent on it.
type subConn struct {
	ps *redis.PubSub
	ks bool
}

// takeChanges takes the dirty lanes and returns the subscriptions to end (a lane given
// up, a channel the mode does not use, a keyspace subscription whose slot moved) and to
// send (what a held lane needs), marking the lanes as they will be.
func (d *doorbell) takeChanges(stopping, ksMode bool) []subChange {
	var changes []subChange
	wantBell, wantKS := d.wanted(ksMode)
	d.mu.Lock()
	defer d.mu.Unlock()
	dirty := d.dirty
	if len(dirty) > 0 {
		d.dirty = map[*bellLane]struct{}{} // not cleared: a map keeps the room it grew to
	}
	for b := range dirty {
		held := b.first.w != nil
		for _, ks := range [2]bool{false, true} {
			s, want := b.sub(ks), held && (ks && wantKS || !ks && wantBell)
			if s.on && ((!held && !stopping) || (held && !want) || (ks && b.moved)) {
				s.on = false
				if s.shard != nil {
					s.unsubs++
					changes = append(changes, subChange{b: b, channel: d.channel(b.stream, ks), ks: ks, unsub: s.shard})
					s.shard = nil
				}
			}
			if want && !s.on {
				s.on = true
				changes = append(changes, subChange{b: b, channel: d.channel(b.stream, ks), ks: ks})
			}
		}
		b.moved = false
	}
	return changes
}

// placeChanges finds the connection of each change: the one it was subscribed on for an
// end, the shard of its lane for a subscription (opened when needed). A lane whose shard
// is unknown now (no slot map) is tried again shortly; idle workers poll meanwhile.
func (d *doorbell) placeChanges(changes []subChange) (subs, unsubs map[subConn][]string) {
	subs, unsubs = map[subConn][]string{}, map[subConn][]string{}
	ctx, cancel := context.WithTimeout(d.e.hardCtx, 5*time.Second)
	defer cancel()
	for _, c := range changes {
		if c.unsub != nil {
			unsubs[subConn{c.unsub, c.ks}] = append(unsubs[subConn{c.unsub, c.ks}], c.channel)
			continue
		}
		ps := d.shardFor(ctx, c.b.stream)
		d.mu.Lock()
		if ps == nil {
			c.b.sub(c.ks).on = false
			d.dirty[c.b] = struct{}{}
			if !d.polling.Swap(true) {
				d.kickAfter(resetPauseMin)
			}
		} else {
			c.b.sub(c.ks).shard = ps
		}
		d.mu.Unlock()
		if ps != nil {
			subs[subConn{ps, c.ks}] = append(subs[subConn{ps, c.ks}], c.channel)
		}
	}
	return subs, unsubs
}

// sendSubscriptions sends channels with f (SUBSCRIBE, SSUBSCRIBE or their ends), batch at
// a time. A failure wakes every idle worker: the client keeps the channels and subscribes
// them again when it reconnects; until then every idle worker reads again.
func (d *doorbell) sendSubscriptions(chs []string, batch int, f func(context.Context, ...string) error) {
	for len(chs) > 0 && d.e.hardCtx.Err() == nil {
		n := min(len(chs), batch)
		ctx, cancel := context.WithTimeout(d.e.hardCtx, 5*time.Second)
		err := f(ctx, chs[:n]...)
		cancel()
		if err != nil && d.e.hardCtx.Err() == nil {
			d.e.logs.warn("doorbell-pubsub", "doorbell subscription failed; waking every idle worker", "err", translateRedisErr(err))
			d.lost()
		}
		chs = chs[n:]
	}
}

// laneKey joins a group and a lane stream for the byLane index.
func laneKey(group, lane string) string {
	return strings.Join([]string{group, lane}, "\x00")
}

// idLess compares two stream ids "ms-seq".
func idLess(a, b string) bool { return keyspace.ParseStreamID(a).Less(keyspace.ParseStreamID(b)) }
