package engine

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The doorbell's lanes and their waiters: which workers of this instance wait on which
// lane stream, the ring count of each lane (mark and watch), and waking the waiting
// workers when a lane rings, when its subscription is confirmed (check) or when a
// connection fails (wakeAll). The subscriptions themselves are doorbell_pubsub.go's.

// bellCheckBatch is the most lanes whose last entry id one pipeline reads after their
// subscriptions were confirmed.
const bellCheckBatch = 512

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

// laneKey joins a group and a lane stream for the byLane index.
func laneKey(group, lane string) string {
	return strings.Join([]string{group, lane}, "\x00")
}

// idLess compares two stream ids "ms-seq".
func idLess(a, b string) bool { return keyspace.ParseStreamID(a).Less(keyspace.ParseStreamID(b)) }
