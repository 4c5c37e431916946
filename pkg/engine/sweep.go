package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/ctxwait"
	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Entries from other publishers.
//
// seqctl's own scripts ring a lane's doorbell (SPUBLISH on its bell channel) in the same
// step as they append to it. An entry that another publisher appends with a plain XADD
// (a service in another language, a connector, redis-cli) rings nothing. Two ways find
// it for the idle owner of the lane:
//
//   - Keyspace notifications. With notify-keyspace-events holding K and t, Redis itself
//     publishes every append to a stream on the stream's keyspace channel
//     (__keyspace@{db}__:{stream}, payload "xadd"), whoever appends. The doorbell then
//     subscribes an idle lane's keyspace channel instead of its bell: any append wakes
//     the owner within a round trip, at the cost of one pub/sub message per append to a
//     subscribed lane, as the bell. At start the engine reads the setting on every
//     master and adds K and t where they are missing (CONFIG SET; the other flags stay);
//     where it cannot (CONFIG refused by the ACL, or by a managed Redis), it logs once
//     which setting would make it faster and uses the bell and the sweep.
//   - The sweep, without them: every SweepInterval the doorbell checks the lanes whose
//     owners wait for an entry, in one sweep.lua call per 512 lanes (per master), and
//     wakes those with an entry after what their owner saw. Its cost is one call per
//     512 idle lanes per interval and one empty XRANGE per lane.
//
// The setting is read again every keyspaceRecheck, and at once after the doorbell lost
// its connection (a restart or a failover to a replica whose configuration lacks it):
// the doorbell then moves its subscriptions to the bell (and the sweep runs) or back,
// and wakes every idle worker to read when the setting had to be turned on again. So an
// operator who turns the setting off at run time delays idle wake-ups by at most
// keyspaceRecheck.
//
// A new partition that another publisher indexes with a plain SADD (HSET on Redis
// Cluster), without a notice on the control stream, is found by the discovery pass,
// which compares each index's size with its view (indexView.outdated).

// The values of EngineConfig.KeyspaceNotifications ([server.partitioning]
// keyspace_notifications).
const (
	KeyspaceAuto = "auto" // use them, adding K and t where missing and allowed
	KeyspaceUse  = "use"  // use them where they are on; never change the setting
	KeyspaceOff  = "off"  // never: the bell and the sweep
)

// keyspaceFlags are the notify-keyspace-events flags the doorbell needs: keyspace
// channels (K) for stream commands (t).
const keyspaceFlags = "Kt"

// keyspaceRecheck is how often the keyspace notification setting is read again.
const keyspaceRecheck = 30 * time.Second

// sweepBatch is the most lanes one sweep.lua call checks.
const sweepBatch = 512

// keyspaceOn reports whether every master sends keyspace notifications for streams,
// after adding the flags where they are missing and allowed; the error says why not. It
// reports turnedOn when it had to add them somewhere: appends made before rang no
// keyspace channel.
//
// It reads notify-keyspace-events (adding K and t with KeyspaceAuto), and checks that the
// user may subscribe to the keyspace channels. Where CONFIG is refused (the
// least-privilege worker ACL of docs/security.md leaves it out: it would reveal the
// server's passwords), it is not tried again in this process, and a probe tells whether
// they are on instead: an append to a key of the master's own (then deleted), whose
// notification must arrive within keyspaceProbeWait on a subscription to its keyspace
// channel.
func (e *Engine) keyspaceOn(ctx context.Context) (on, turnedOn bool, err error) {
	if e.cfg.KeyspaceNotifications == KeyspaceOff {
		return false, false, nil
	}
	var set atomic.Bool
	check := func(ctx context.Context, c redis.UniversalClient, probe string) error {
		if !e.configRefused.Load() {
			cur, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
			if v, reported := cur["notify-keyspace-events"]; err == nil && reported {
				missing := missingKeyspaceFlags(v)
				switch {
				case missing == "":
				case e.cfg.KeyspaceNotifications == KeyspaceUse:
					return fmt.Errorf("notify-keyspace-events is %q, without %s (keyspace_notifications = %q: seqctl does not change it)", v, missing, KeyspaceUse)
				default:
					if err := c.ConfigSet(ctx, "notify-keyspace-events", v+missing).Err(); err != nil {
						e.configRefused.Store(true)
						return fmt.Errorf("notify-keyspace-events is %q, without %s, and CONFIG SET was refused: %w", v, missing, translateRedisErr(err))
					}
					set.Store(true)
					e.log.Info("turned on keyspace notifications for streams, so that entries other publishers append wake their owners",
						"notify-keyspace-events", v+missing, "was", v)
				}
				return e.canSubscribe(ctx, c, probe)
			}
			e.configRefused.Store(true) // refused, or a server that does not know the setting
		}
		return e.probeKeyspace(ctx, c, probe)
	}
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return check(ctx, c, e.probeKeyOn(ctx, cc, c.Options().Addr))
		})
		if err == nil && e.cfg.KeyspaceNotifications == KeyspaceAuto && !e.configRefused.Load() {
			_ = cc.ForEachSlave(ctx, func(ctx context.Context, c *redis.Client) error {
				e.keyspaceOnReplica(ctx, c)
				return nil
			})
		}
	} else {
		err = check(ctx, e.rdb, e.keys.KeyspaceProbeKey(e.cfg.InstanceID, ""))
	}
	return err == nil, set.Load(), err
}

// keyspaceOnReplica adds the flags to a replica's notify-keyspace-events where they are
// missing: CONFIG SET is not replicated, and a replica promoted by a failover would
// otherwise send no keyspace notification until the next recheck (keyspaceRecheck). A
// replica that refuses is left as it is: the recheck after a failover still turns the
// setting on where it is then a master.
func (e *Engine) keyspaceOnReplica(ctx context.Context, c *redis.Client) {
	cur, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	v, reported := cur["notify-keyspace-events"]
	if err != nil || !reported {
		return
	}
	missing := missingKeyspaceFlags(v)
	if missing == "" {
		return
	}
	if err := c.ConfigSet(ctx, "notify-keyspace-events", v+missing).Err(); err == nil {
		e.log.Info("turned on keyspace notifications for streams on a replica, so that they hold after a failover",
			"replica", c.Options().Addr, "notify-keyspace-events", v+missing, "was", v)
	}
}

// missingKeyspaceFlags returns the flags of keyspaceFlags that v lacks ("" for none; A
// stands for t).
func missingKeyspaceFlags(v string) string {
	missing := ""
	for _, f := range keyspaceFlags {
		if !strings.ContainsRune(v, f) && !(f == 't' && strings.ContainsRune(v, 'A')) {
			missing += string(f)
		}
	}
	return missing
}

// canSubscribe checks that the Redis user may subscribe to keyspace channels (the
// channel pattern &__keyspace@* of the worker ACL).
func (e *Engine) canSubscribe(ctx context.Context, c redis.UniversalClient, probe string) error {
	ps := c.Subscribe(ctx, e.keys.KeyspaceChannel(e.bell.db, probe))
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		return fmt.Errorf("keyspace notifications are on, but subscribing to their channels failed: %w", translateRedisErr(err))
	}
	return nil
}

// keyspaceProbeWait is how long a probe waits for its keyspace notification.
const keyspaceProbeWait = 500 * time.Millisecond

// probeKeyspace appends to the probe key (a stream of one entry, deleted at once) while
// subscribed to its keyspace channel: nil when the notification arrives in time.
func (e *Engine) probeKeyspace(ctx context.Context, c redis.UniversalClient, probe string) error {
	ps := c.Subscribe(ctx, e.keys.KeyspaceChannel(e.bell.db, probe))
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		return fmt.Errorf("cannot subscribe to a keyspace channel: %w", translateRedisErr(err))
	}
	defer c.Del(context.WithoutCancel(ctx), probe)
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: probe, MaxLen: 1, Values: []any{"probe", "1"}}).Err(); err != nil {
		return translateRedisErr(err)
	}
	wctx, cancel := context.WithTimeout(ctx, keyspaceProbeWait)
	defer cancel()
	for {
		msg, err := ps.Receive(wctx)
		if err != nil {
			return fmt.Errorf("an append to %s sent no keyspace notification within %v", probe, keyspaceProbeWait)
		}
		if m, ok := msg.(*redis.Message); ok && m.Payload == "xadd" {
			return nil
		}
	}
}

// probeKeyOn returns a probe key served by the master at addr ("" when none was found
// among the first tags tried; the probe then fails).
func (e *Engine) probeKeyOn(ctx context.Context, cc *redis.ClusterClient, addr string) string {
	for i := 0; i < 4096; i++ {
		k := e.keys.KeyspaceProbeKey(e.cfg.InstanceID, strconv.Itoa(i))
		if a, err := masterAddr(ctx, cc, k); err == nil && a == addr {
			return k
		}
	}
	return e.keys.KeyspaceProbeKey(e.cfg.InstanceID, "none")
}

// watchKeyspace keeps the doorbell's mode in step with the keyspace notification
// setting, and sweeps the idle lanes while it is off, until the hard stop.
func (d *doorbell) watchKeyspace() {
	defer d.e.bg.Done()
	sweep := time.NewTicker(d.e.cfg.Timing.SweepInterval)
	defer sweep.Stop()
	next := time.Now().Add(keyspaceRecheck) // when the setting is read again (Start read it)
	for {
		if now := time.Now(); !now.Before(next) {
			d.recheckKeyspace()
			next = now.Add(keyspaceRecheck)
		}
		select {
		case <-d.e.hardCtx.Done():
			return
		case <-d.ksLost:
			next = time.Time{} // the connection failed: read the setting again now
			ctxwait.Sleep(d.e.hardCtx, 100*time.Millisecond)
		case <-sweep.C:
			if !d.keyspace.Load() {
				d.sweep()
			}
		}
	}
}

// recheckKeyspace reads the setting (turning it on where allowed) and moves the
// subscriptions when the answer changed.
func (d *doorbell) recheckKeyspace() {
	ctx, cancel := context.WithTimeout(d.e.hardCtx, 5*time.Second)
	on, turnedOn, err := d.e.keyspaceOn(ctx)
	cancel()
	if d.e.hardCtx.Err() != nil {
		return
	}
	if err == nil {
		d.ksWarned.Store(false)
	} else if !d.ksWarned.Swap(true) { // once, until it changes
		d.e.log.Warn("Redis sends no keyspace notifications for streams and seqctl cannot turn them on: an entry another publisher appends with a plain XADD to an idle partition waits for the sweep (every "+d.e.cfg.Timing.SweepInterval.String()+
			"); set notify-keyspace-events to include K and t (e.g. \"Kt\") on every Redis primary, or allow the worker CONFIG GET and CONFIG SET, for wake-ups within a round trip",
			"err", err)
	}
	d.setKeyspace(on)
	if turnedOn {
		// The setting was off on a master (a restart or a failover to a replica whose
		// configuration lacks it): what was appended meanwhile rang nothing.
		d.wakeAll()
	}
}

// setKeyspace switches the doorbell between keyspace channels (on) and bell channels:
// every held lane is subscribed again on the channel of the mode.
func (d *doorbell) setKeyspace(on bool) {
	if d.keyspace.Swap(on) == on {
		return
	}
	d.mu.Lock()
	for _, b := range d.lanes {
		if b.first.w != nil {
			d.dirty[b] = struct{}{}
		}
	}
	d.mu.Unlock()
	d.kickSync()
}

// sweep checks the lanes whose owners wait for an entry and wakes those that hold one
// after what their owner saw.
func (d *doorbell) sweep() {
	type waiting struct {
		b     *bellLane
		after keyspace.StreamID // the earliest last-seen id of its waiting owners
	}
	d.mu.Lock()
	var lanes []waiting
	for _, b := range d.lanes {
		first, any := keyspace.StreamID{}, false
		for o := range b.owners {
			if o.waiting && (!any || o.after.Less(first)) {
				first, any = o.after, true
			}
		}
		if any {
			lanes = append(lanes, waiting{b, first})
		}
	}
	d.mu.Unlock()
	if len(lanes) == 0 {
		return
	}
	byNode := map[string][]waiting{"": lanes}
	cc, cluster := d.e.rdb.(*redis.ClusterClient)
	if cluster {
		byNode = map[string][]waiting{}
		for _, l := range lanes {
			addr, _ := masterAddr(d.e.hardCtx, cc, l.b.stream)
			byNode[addr] = append(byNode[addr], l)
		}
	}
	chunks := chunkGroups(byNode, sweepBatch)
	ctx, cancel := context.WithTimeout(d.e.hardCtx, 5*time.Second)
	defer cancel()
	cmds, err := runPipelined(ctx, d.e.rdb, len(chunks), func(pipe redis.Pipeliner, i int) *redis.Cmd {
		c := scripts.Sweep{Cluster: cluster, Lanes: make([]scripts.SweepLane, 0, len(chunks[i]))}
		for _, l := range chunks[i] {
			c.Lanes = append(c.Lanes, scripts.SweepLane{Stream: l.b.stream, After: l.after.String()})
		}
		return c.EvalSha(ctx, pipe)
	})
	var wake []*worker
	d.mu.Lock()
	for i, ls := range chunks {
		var found []int
		if err == nil {
			var ferr error
			if found, ferr = scripts.ParseSweep(cmds[i]); ferr != nil {
				err = ferr
			}
		}
		for _, k := range found {
			if k >= 0 && k < len(ls) {
				l := ls[k]
				d.seq++
				l.b.bump(d.seq, keyspace.StreamID{}, false)
				wake = l.b.takeWaiting(wake, func(keyspace.StreamID) bool { return true })
			}
		}
	}
	d.mu.Unlock()
	if err != nil {
		d.e.logs.warn("sweep:"+errorCause(translateRedisErr(err)), "the sweep of idle partitions failed; tried again next interval", "err", translateRedisErr(err))
	}
	for _, w := range wake {
		w.poke()
	}
}
