package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/ctxwait"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The doorbell's notice reader: one blocking XREAD of the instance's wake stream
// (operator notices: a resolved head, a pause or resume) and of the shared control
// stream (partition notices: a released lease, an instance that started).

// doorbellBlock is how long one blocking XREAD of the wake and control streams blocks.
// An instance costs about one Redis call per doorbellBlock for them, however many
// partitions it owns. An entry ends the block at once, and so does the instance's own
// notice at shutdown: the block bounds nothing but the cost of an idle instance (a
// connection that fails ends the read with the failure; a frozen one is found by the
// pub/sub connection's ping, see bellPing).
const doorbellBlock = 5 * time.Second

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

// interrupt ends the blocking XREAD at once (at shutdown) by appending to the wake stream.
func (d *doorbell) interrupt() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = notify(ctx, d.e.rdb, d.wake, keyspace.Notice{Op: keyspace.NoticeInterrupt})
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
