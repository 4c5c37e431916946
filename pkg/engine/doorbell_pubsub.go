package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/ctxwait"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The doorbell's pub/sub connections: one shard per master (one on a single node), the
// listener of each, and sync, which sends the subscriptions the lanes need and ends those
// nobody holds, moving them when a Redis Cluster slot moves.

// bellPing is how long the pub/sub connection may stay silent before the doorbell pings
// it. A ping left unanswered for another bellPing means the link is dead: the client
// drops the connection, dials again and subscribes every channel again.
const bellPing = 5 * time.Second

// bellBatch is the most channels one SSUBSCRIBE or SUNSUBSCRIBE names.
const bellBatch = 128

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
