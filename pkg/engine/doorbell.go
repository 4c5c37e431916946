package engine

import (
	"context"
	"errors"
	"strconv"
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

	mu sync.Mutex
	// watches: lane stream -> the workers waiting on it, each from its last-seen id.
	// Several consumer groups of one instance may wait on the same stream. Guarded by mu.
	watches     map[string]map[*worker]string
	wakeLast    string // guarded by mu
	ctrlLast    string // guarded by mu
	blocking    bool   // an XREAD is in flight; guarded by mu
	interrupted bool   // an interrupt was sent for this XREAD; guarded by mu
}

func newDoorbell(e *Engine) *doorbell {
	return &doorbell{e: e, wake: WakeStream(e.cfg.InstanceID), ctrl: ControlStream(), watches: map[string]map[*worker]string{}}
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
	if d.watches[lane] == nil {
		d.watches[lane] = map[*worker]string{}
	}
	d.watches[lane][w] = lastID
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
		if ws, ok := d.watches[l]; ok {
			delete(ws, w)
			if len(ws) == 0 {
				delete(d.watches, l)
			}
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
		for lane, ws := range d.watches {
			streams = append(streams, lane)
			ids = append(ids, lowestID(ws)) // wakes when any watcher has something new
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
			d.e.logs.warn("doorbell", "doorbell read failed; waking every idle worker", "err", translateRedisErr(err))
			d.wakeAll()
			sleepCtx(d.e.hardCtx, backoff)
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
				d.e.controlRead(s.Messages)
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
				ws := d.watches[s.Stream]
				delete(d.watches, s.Stream)
				d.mu.Unlock()
				for w := range ws {
					w.poke()
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
	var all []*worker
	for l, ws := range d.watches {
		for w := range ws {
			all = append(all, w)
		}
		delete(d.watches, l)
	}
	d.mu.Unlock()
	for _, w := range all {
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

// lowestID returns the smallest stream id among the watchers' last-seen ids.
func lowestID(ws map[*worker]string) string {
	low := ""
	for _, id := range ws {
		if low == "" || idLess(id, low) {
			low = id
		}
	}
	return low
}

// idLess compares two stream ids "ms-seq".
func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || (am == bm && as < bs)
}

func splitID(id string) (ms, seq uint64) {
	i := strings.IndexByte(id, '-')
	if i < 0 {
		ms, _ = strconv.ParseUint(id, 10, 64)
		return ms, 0
	}
	ms, _ = strconv.ParseUint(id[:i], 10, 64)
	seq, _ = strconv.ParseUint(id[i+1:], 10, 64)
	return ms, seq
}
