package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

type drainResult struct {
	code    scripts.DrainCode
	lastIDs []keyspace.StreamID // drainEmpty: the last entry id of each lane ("0-0" for none)
	entries []entry
	// all: the entries are everything the unit held to read (see drain.lua).
	all bool
	// pauseTTL is, for DrainPaused, how long the pause lasts; -1 until resumed.
	pauseTTL time.Duration
}

// drain calls drain.lua: ack w.unacked, then read (expect: "" or "{lane}|{id}").
//
// While a partition is busy (its last read filled a batch of new entries of the first
// lane), the read of the first lane's new entries is a plain XREADGROUP, followed by the
// script in one MULTI/EXEC transaction: atomic with the fence check, and without the
// conversion of every entry into Lua and back, which costs Redis more than the rest of
// the call. The script then tells whether that read may be used: only when the fence
// holds, no halt record exists and the lane's pending entries are exactly what the read
// took, so its entries are the ones after everything already handled. When it may not
// (fenced, halted, an older entry pending), the script gives the read's entries their
// delivery count back; they stay pending and later calls claim them in order.
func (w *worker) drain(expect *entry) (drainResult, error) {
	// What the acker confirmed since (settle) is not acknowledged again; a fence it met is
	// this worker's.
	if w.applyAcks() {
		return drainResult{}, ErrFenced
	}
	// A dormant lease without guards gets its expiry back in the read itself; one with
	// guards is re-armed by rearm before an event starts.
	rearm := w.dormant.Load() && len(w.u.guards) == 0
	c := scripts.Drain{
		Lease: w.leaseKey, Live: w.liveKey, Halt: w.haltKey, Pause: w.pauseKey, Lanes: w.lanes,
		Token: w.token, Group: w.sub.group, Consumer: w.consumer, Batch: w.readCount(),
		Owed: w.owed, Acks: w.unackedByLane(),
	}
	if expect != nil {
		c.ExpectLane, c.ExpectID = expect.lane, expect.msg.ID
	}
	if rearm {
		c.RearmPX = w.e.cfg.Timing.LeaseTTL.Milliseconds()
	}
	w.readMark = nil // this read decides anew whether the unit may settle
	native := w.busyAfter != "" && expect == nil && !rearm && !w.e.noTx.Load()
	if native {
		c.NativeAfter = w.busyAfter
	}
	w.busyAfter = ""
	if w.takeover {
		// An owner starts a run only while at most max_unacked-1 handled events lack an
		// acknowledgement, and a run carries up to batch_max events.
		c.TakeoverKeep = max(w.e.cfg.MaxUnacked, 1) - 1 + w.sub.batchMax
	}
	w.pauseNoted.Store(false) // the script reads the pause record; a notice from now on is new
	ctx, cancel := context.WithTimeout(w.ctx, w.e.cfg.Timing.LeaseTTL)
	defer cancel()
	var res scripts.DrainReply
	var read *redis.XStreamSliceCmd
	var err error
	if native {
		res, read, err = w.drainNative(ctx, c)
	} else {
		res, err = c.Run(ctx, w.e.rdb)
	}
	if err != nil {
		w.e.calls.failed(ctx, err)
		return drainResult{}, translateRedisErr(err)
	}
	w.e.calls.answered()
	w.unacked, w.sent = w.unacked[:0], 0 // the script acknowledged them all, fenced
	w.owed = ""                          // and gave back what a lost read took, fenced or not
	w.takeover = false                   // and corrected a previous owner's read-ahead
	if res.Fresh {
		w.trimmed = true // no previous owner's consumers to drop, nothing acknowledged to trim
	}
	if rearm && res.Code == scripts.DrainEntries {
		w.dormant.Store(false)
	}
	return w.drained(res, read)
}

// drained turns drain.lua's reply into the worker's result: the entries to handle (those
// of the transaction's own read when the script let it stand), or each lane's last entry
// id when there were none. It notes a full batch of new entries of the first lane, for
// the next read to be native.
func (w *worker) drained(res scripts.DrainReply, read *redis.XStreamSliceCmd) (drainResult, error) {
	r := drainResult{code: res.Code, pauseTTL: res.PauseTTL}
	switch res.Code {
	case scripts.DrainFenced:
		return drainResult{}, ErrFenced
	case scripts.DrainEmpty:
		r.lastIDs = make([]keyspace.StreamID, 0, len(res.LastIDs))
		for _, s := range res.LastIDs {
			r.lastIDs = append(r.lastIDs, keyspace.ParseStreamID(s))
		}
	case scripts.DrainNative:
		streams, err := read.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return drainResult{}, translateRedisErr(err)
		}
		if len(streams) == 0 || len(streams[0].Messages) == 0 {
			return drainResult{}, errors.New("engine: the drain script accepted an empty native read")
		}
		msgs := streams[0].Messages
		r.code, r.entries = scripts.DrainEntries, make([]entry, 0, len(msgs))
		for _, m := range msgs {
			r.entries = append(r.entries, entry{lane: 0, msg: m, deliveries: 1})
		}
		if len(msgs) >= w.readCount() {
			w.busyAfter = msgs[len(msgs)-1].ID
		}
	case scripts.DrainEntries:
		msgs := res.Entries
		r.all = res.All && len(msgs) > 0
		r.entries = make([]entry, 0, len(msgs))
		for i, m := range msgs {
			d := 1
			if i == 0 {
				d = int(res.Deliveries)
			}
			r.entries = append(r.entries, entry{lane: res.Lane, msg: m, deliveries: d})
		}
		if res.Lane == 0 && res.Deliveries == 1 && len(msgs) >= w.readCount() {
			w.busyAfter = msgs[len(msgs)-1].ID
		}
	}
	return r, nil
}

// readCount is how many new entries one read may return: the engine's BatchSize, or the
// handler's batch_max when it is larger (so that a read can fill a run).
func (w *worker) readCount() int { return max(w.e.cfg.BatchSize, w.sub.batchMax) }

// drainNative runs the first lane's XREADGROUP and then drain.lua (c.NativeAfter: the
// last id the worker read before) in one transaction. The read runs first, whatever the
// script then finds; its reply may be used only when the script answers DrainNative, and
// with any other answer the script has given the read's entries their delivery count
// back. When the script did not run (NOSCRIPT after the script cache was emptied, MULTI
// refused) or the transaction's reply was lost (a connection error), the script is sent
// again alone, without the read, and gives back what the read may have taken (c.Owed).
func (w *worker) drainNative(ctx context.Context, c scripts.Drain) (scripts.DrainReply, *redis.XStreamSliceCmd, error) {
	pipe := w.e.rdb.TxPipeline()
	read := pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: w.sub.group, Consumer: w.consumer, Streams: []string{w.lanes[0], ">"},
		Count: int64(w.readCount()), Block: -1,
	})
	script := c.EvalSha(ctx, pipe)
	_, err := pipe.Exec(ctx)
	if missing, _ := MissingPermission(err); missing != "" {
		w.e.transactionsRefused(err) // nothing ran
	} else if connErr(err) != nil || isNoScript(script.Err()) {
		w.owed = c.NativeAfter // the read may have run without the script
		c.Owed = c.NativeAfter
	} else {
		res, err := scripts.ParseDrain(script)
		return res, read, err
	}
	// Sent again alone, with the acknowledgements again, which is harmless; after
	// NOSCRIPT, Run sends its source with EVAL, which caches it again. What the read
	// took is given back first, and claimed in order.
	c.NativeAfter = ""
	res, err := c.Run(ctx, w.e.rdb)
	return res, nil, err
}

// probeTransactions runs an empty-handed transaction at start: a Redis user that may not
// run MULTI or EXEC turns the native read off (transactionsRefused) before any partition
// is read.
func (e *Engine) probeTransactions(ctx context.Context) {
	_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Exists(ctx, e.keys.InstancesKey())
		return nil
	})
	if missing, _ := MissingPermission(err); missing != "" {
		e.transactionsRefused(err)
	}
}

// transactionsRefused turns the native read of busy partitions off for good: the Redis
// user may not run MULTI/EXEC, so every read goes through the drain script alone.
func (e *Engine) transactionsRefused(err error) {
	if e.noTx.CompareAndSwap(false, true) {
		e.log.Warn("the Redis user may not run MULTI/EXEC: busy partitions are read by the drain script alone, which costs Redis about twice as much per event; grant +multi +exec as "+SecurityDoc+" shows",
			"err", translateRedisErr(err))
	}
}
