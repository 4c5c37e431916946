package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// doorbellBlock is how long one multiplexed XREAD blocks. An idle instance costs about
// one Redis call per doorbellBlock, however many partitions it owns.
const doorbellBlock = time.Second

// doorbell wakes idle workers when data arrives, without polling. Each idle lane is
// watched from the last entry id its worker saw; one blocking, non-group XREAD per
// instance covers every watched lane plus the instance's wake stream (operator notices,
// interrupts) and the shared control stream (new partitions, released leases).
//
// A lane registered while the XREAD is blocking interrupts it with an XADD to the wake
// stream, so no wake-up is late. After a Redis error every watcher is woken, so workers
// re-read and nothing waits on a notice that was lost.
type doorbell struct {
	e    *Engine
	wake string // this instance's wake stream
	ctrl string // the shared control stream

	mu          sync.Mutex
	watches     map[string]watch // lane stream -> watch; guarded by mu
	wakeLast    string           // guarded by mu
	ctrlLast    string           // guarded by mu
	blocking    bool             // an XREAD is in flight; guarded by mu
	interrupted bool             // an interrupt was sent for this XREAD; guarded by mu
}

type watch struct {
	lastID string
	w      *worker
}

func newDoorbell(e *Engine) *doorbell {
	return &doorbell{e: e, wake: WakeStream(e.cfg.InstanceID), ctrl: ControlStream(), watches: map[string]watch{}}
}

// init positions the doorbell at the current tails of the wake and control streams.
func (d *doorbell) init(ctx context.Context) error {
	last := func(stream string) (string, error) {
		m, err := d.e.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
		if err != nil {
			return "", translateRedisErr(err)
		}
		if len(m) == 0 {
			return "0-0", nil
		}
		return m[0].ID, nil
	}
	var err error
	if d.wakeLast, err = last(d.wake); err != nil {
		return err
	}
	d.ctrlLast, err = last(d.ctrl)
	return err
}

// watchLane asks to be woken when lane gets an entry after lastID.
func (d *doorbell) watchLane(lane, lastID string, w *worker) {
	d.mu.Lock()
	d.watches[lane] = watch{lastID: lastID, w: w}
	interrupt := d.blocking && !d.interrupted
	if interrupt {
		d.interrupted = true
	}
	d.mu.Unlock()
	if interrupt {
		go d.interrupt()
	}
}

// unwatch removes a worker's lanes (it is exiting or was woken another way).
func (d *doorbell) unwatch(w *worker) {
	d.mu.Lock()
	for _, l := range w.lanes {
		if cur, ok := d.watches[l]; ok && cur.w == w {
			delete(d.watches, l)
		}
	}
	d.mu.Unlock()
}

func (d *doorbell) interrupt() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = d.e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: d.wake, MaxLen: 100, Approx: true, Values: []any{"op", "interrupt"}}).Err()
}

func (d *doorbell) loop() {
	defer d.e.bg.Done()
	backoff := 50 * time.Millisecond
	for d.e.hardCtx.Err() == nil {
		d.mu.Lock()
		streams := make([]string, 0, 2+2*len(d.watches))
		ids := make([]string, 0, cap(streams)/2)
		streams = append(streams, d.wake, d.ctrl)
		ids = append(ids, d.wakeLast, d.ctrlLast)
		for lane, wt := range d.watches {
			streams = append(streams, lane)
			ids = append(ids, wt.lastID)
		}
		d.blocking, d.interrupted = true, false
		d.mu.Unlock()

		res, err := d.e.rdb.XRead(d.e.hardCtx, &redis.XReadArgs{
			Streams: append(streams, ids...), Count: 64, Block: doorbellBlock,
		}).Result()

		d.mu.Lock()
		d.blocking = false
		d.mu.Unlock()
		if err != nil && !errors.Is(err, redis.Nil) {
			if d.e.hardCtx.Err() != nil {
				return
			}
			d.e.log.Warn("doorbell read failed; waking every idle worker", "err", translateRedisErr(err))
			d.wakeAll()
			sleepCtx(d.e.hardCtx, backoff)
			backoff = min(backoff*2, 2*time.Second)
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
				d.mu.Lock()
				d.wakeLast = lastID
				d.mu.Unlock()
				for _, m := range s.Messages {
					d.onWake(m)
				}
			case d.ctrl:
				d.mu.Lock()
				d.ctrlLast = lastID
				d.mu.Unlock()
				for _, m := range s.Messages {
					if op, _ := m.Values["op"].(string); op == "released" {
						g, _ := m.Values["group"].(string)
						u, _ := m.Values["unit"].(string)
						d.e.forgetOwner(g, u)
					}
				}
				d.e.kickDiscovery()
			default:
				d.mu.Lock()
				wt, ok := d.watches[s.Stream]
				if ok {
					delete(d.watches, s.Stream)
				}
				d.mu.Unlock()
				if ok {
					wt.w.poke()
				}
			}
		}
	}
}

// onWake handles a notice on the instance's wake stream.
func (d *doorbell) onWake(m redis.XMessage) {
	op, _ := m.Values["op"].(string)
	if op != "resume" {
		return
	}
	group, _ := m.Values["group"].(string)
	lane, _ := m.Values["unit"].(string)
	d.e.mu.Lock()
	w := d.e.byLane[group+"\x00"+lane]
	d.e.mu.Unlock()
	if w != nil {
		w.poke()
	}
}

func (d *doorbell) wakeAll() {
	d.mu.Lock()
	ws := make([]*worker, 0, len(d.watches))
	for l, wt := range d.watches {
		ws = append(ws, wt.w)
		delete(d.watches, l)
	}
	d.mu.Unlock()
	for _, w := range ws {
		w.poke()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// laneKey joins a group and a lane stream for the byLane index.
func laneKey(group, lane string) string {
	return strings.Join([]string{group, lane}, "\x00")
}
