package engine

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Limit keys: a fleet-wide cap per value of a payload field.
//
// A handler with a limit (Handler.Limit: limit_by, limit_concurrency, limit_rate) runs an
// event only with a permit of the event's limit value (its tenant, say), taken in Redis
// (limit.lua) right before the handler slot and given back right after the handler. A
// permit counts against the value's concurrency cap while it is held and against its rate
// when it is taken, across every instance. Events stay in publish order per partition key:
// a limit decides only when a partition's next event may start, never which.
//
//   - A permit carries a slot and a generation, handed to the handler (Delivery.Limit*),
//     which a downstream may check per (value, slot) as it checks a lease generation.
//   - A permit lives a lease TTL and is renewed by the heartbeat with the session. A
//     crashed holder's permit comes back after the TTL; a holder that stalled past it has
//     had its handlers cancelled at its local deadline, as for its leases, and a renewal
//     found lost cancels the worker. So no instance starts a run without a live permit,
//     and a late run of a stalled holder is one its downstream can refuse by generation.
//   - Waiting for a permit is not an attempt, holds no handler slot and keeps the lease.
//     The partitions of one value wait in line in the instance (first come, first served:
//     a partition has one event waiting at most, so its turn comes round), and only the
//     head of each line asks Redis: again when a permit of the value is given back here
//     or where another instance announced it (a plain pub/sub message, sent only when a
//     take was refused lately), when the refusal's wait is over, and at least every
//     limitRetry. Lines of different values never wait for each other.
//   - The handler slots of an instance are handed out round-robin across limit values
//     (slots.go), so a value with many busy partitions cannot take every slot.
//
// An operator's override per value (RedisBroker.SetLimit) replaces the domain's caps for
// that value; instances read the overrides at start, when one is announced and every
// limitOverridesRefresh.

// limitRetry is the longest a line waits before its head asks Redis again, whatever the
// refusal said: a release announced where nobody heard it is found this late.
const limitRetry = time.Second

// limitLinger is how long after a refused take a release is announced to the instances.
const limitLinger = 5 * time.Second

// limitStale is how long an instance keeps its place in a value's line across instances
// (limit.lua) after its last ask: its head asks at least every limitRetry while it waits.
const limitStale = 3 * limitRetry

// limitOverridesRefresh is how often the overrides are read again without a notice.
const limitOverridesRefresh = 30 * time.Second

// ErrLimitLost: a permit's renewal found it taken by another holder (Redis lost it, or
// this instance stalled past its TTL).
var ErrLimitLost = errors.New("engine: limit permit lost")

// limitID is one value of one handler's limit key.
type limitID struct{ group, value string }

// permit is a permit held by a worker.
type permit struct {
	id   limitID
	hold scripts.LimitHold
}

// limiter is the instance's side of the limit keys. Safe for concurrent use.
type limiter struct {
	e *Engine

	mu        sync.Mutex
	lines     map[limitID]*limitLine                       // values with waiting partitions; guarded by mu
	held      map[*worker]*permit                          // permits held (renewed by the heartbeat); guarded by mu
	overrides map[string]map[string]keyspace.LimitOverride // group -> value -> override; guarded by mu
	waited    map[string]time.Duration                     // group -> time partitions waited, for Stats; guarded by mu
}

// limitLine is the partitions of one value waiting for a permit, in arrival order. Its
// goroutine (serve) gives the turn to ask Redis to the head of the line, one at a time.
type limitLine struct {
	id      limitID
	waiters *list.List    // of *limitTicket; guarded by limiter.mu
	kick    chan struct{} // capacity 1: a permit may be free
	running bool          // its goroutine runs; guarded by limiter.mu
}

// limitTicket is one partition's place in a line.
type limitTicket struct {
	w     *worker
	since time.Time
	turn  chan struct{}      // capacity 1: the head may ask Redis now
	asked chan time.Duration // capacity 1: the answer to a turn: refused, and the wait
	left  chan struct{}      // closed when the ticket leaves the line
	elem  *list.Element      // guarded by limiter.mu
}

func newLimiter(e *Engine) *limiter {
	return &limiter{e: e, lines: map[limitID]*limitLine{}, held: map[*worker]*permit{},
		overrides: map[string]map[string]keyspace.LimitOverride{}, waited: map[string]time.Duration{}}
}

// caps returns the caps of one value: the domain's, or the operator's override.
func (l *limiter) caps(lim HandlerLimit, id limitID) (concurrency, rate int, per time.Duration) {
	concurrency, rate, per = lim.Concurrency, lim.Rate, lim.Per
	l.mu.Lock()
	o, ok := l.overrides[id.group][id.value]
	l.mu.Unlock()
	if ok {
		if o.Off {
			return 0, 0, 0
		}
		if o.Concurrency > 0 {
			concurrency = o.Concurrency
		}
		if o.Rate > 0 {
			rate, per = o.Rate, o.Per
		}
	}
	if per <= 0 {
		per = time.Second
	}
	return concurrency, rate, per
}

// take takes a permit of the value for w and a handler slot with it: the partition asks
// Redis only while it holds a slot, so that an instance whose slots are busy never holds
// permits that idle instances could use. It waits in the value's line when the value's
// permits are taken, holding no slot then. It returns the permit (nil when the value is
// capped by nothing: an override turned it off) and the slot's release; ok = false, with
// neither, when the wait ended because the lease was lost, the engine is stopping, fair
// share handed the partition over or an operator paused it.
func (l *limiter) take(w *worker, value string) (p *permit, release func(), ok bool, err error) {
	id := limitID{w.sub.group, value}
	l.mu.Lock()
	line := l.lines[id]
	queued := line != nil && line.waiters.Len() > 0
	l.mu.Unlock()
	if !queued {
		// Nobody of this instance waits for the value: ask at once.
		p, release, wait, err := l.tryTake(w, id)
		if err != nil || release != nil || wait == 0 {
			return p, release, release != nil, err
		}
	}
	t := &limitTicket{w: w, since: time.Now(), turn: make(chan struct{}, 1), asked: make(chan time.Duration, 1), left: make(chan struct{})}
	l.enqueue(id, t)
	defer l.leave(id, t)
	for {
		select {
		case <-t.turn:
		case <-w.ctx.Done():
			return nil, nil, false, nil
		case <-w.e.stopped:
			return nil, nil, false, nil
		case <-w.wake:
			if w.handoff.Load() || w.pauseNoted.Load() {
				return nil, nil, false, nil
			}
			continue // a ring for new entries changes nothing here
		}
		p, release, wait, err := l.tryTake(w, id)
		if err != nil || release != nil || wait == 0 {
			if release != nil {
				l.noteWait(id.group, time.Since(t.since))
			}
			return p, release, release != nil, err
		}
		t.asked <- wait
	}
}

// tryTake waits for a handler slot for w, then asks Redis once for a permit of the
// value. It returns the permit and the slot's release when taken (p nil when the value
// is capped by nothing); else no release, and how long until a permit may be free (0:
// the wait for the slot ended, the partition is not going on now).
func (l *limiter) tryTake(w *worker, id limitID) (p *permit, release func(), wait time.Duration, err error) {
	release, ok := w.waitSlot(id.value)
	if !ok || w.pauseNoted.Load() || !w.inc.valid() || w.ctx.Err() != nil || w.e.stopping() {
		release()
		return nil, nil, 0, nil
	}
	p, wait, err = l.ask(w, id)
	if err != nil || (p == nil && wait > 0) {
		release()
		return nil, nil, wait, err
	}
	return p, release, 0, nil
}

// ask takes a permit for w in Redis. It returns the permit, or nil with how long until one
// may be free; wait < 0 when the value is capped by nothing.
func (l *limiter) ask(w *worker, id limitID) (*permit, time.Duration, error) {
	conc, rate, per := l.caps(w.sub.limit, id)
	if conc == 0 && rate == 0 {
		return nil, -1, nil
	}
	k := l.e.keys
	c := scripts.LimitTake{Permits: k.LimitKey(id.group, id.value), Starts: k.LimitStartsKey(id.group, id.value),
		Holder: w.token, Concurrency: conc, Rate: rate, Window: per, TTL: l.e.cfg.Timing.LeaseTTL,
		Waiter: l.e.regID, Stale: limitStale}
	ctx, cancel := context.WithTimeout(w.ctx, l.e.cfg.Timing.LeaseTTL)
	defer cancel()
	g, err := c.Run(ctx, l.e.rdb)
	if err != nil {
		return nil, 0, translateRedisErr(err)
	}
	if !g.Taken {
		return nil, max(g.Wait, time.Millisecond), nil
	}
	p := &permit{id: id, hold: scripts.LimitHold{Permits: c.Permits, Starts: c.Starts, Holder: c.Holder, Slot: g.Slot, Generation: g.Generation}}
	if g.Slot >= 0 {
		l.mu.Lock()
		l.held[w] = p
		l.mu.Unlock()
	}
	return p, 0, nil
}

// enqueue puts t at the end of its value's line and starts the line's goroutine.
func (l *limiter) enqueue(id limitID, t *limitTicket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.lines[id]
	if line == nil {
		line = &limitLine{id: id, waiters: list.New(), kick: make(chan struct{}, 1)}
		l.lines[id] = line
	}
	t.elem = line.waiters.PushBack(t)
	if !line.running {
		line.running = true
		l.e.bg.Add(1)
		go l.serve(line)
	}
}

// leave takes t out of its line.
func (l *limiter) leave(id limitID, t *limitTicket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.elem == nil {
		return
	}
	if line := l.lines[id]; line != nil {
		line.waiters.Remove(t.elem)
	}
	t.elem = nil
	close(t.left)
}

// serve gives the turn to ask Redis to the head of a line until the line is empty: at
// once when the head before it left the line (with a permit or not), and after a refusal
// when the refusal's wait is over, a permit is announced here or by another instance, or
// limitRetry passed.
func (l *limiter) serve(line *limitLine) {
	defer l.e.bg.Done()
	for {
		l.mu.Lock()
		front := line.waiters.Front()
		if front == nil || l.e.stopping() {
			line.running = false
			if front == nil {
				delete(l.lines, line.id)
			}
			l.mu.Unlock()
			return
		}
		t := front.Value.(*limitTicket)
		l.mu.Unlock()
		t.turn <- struct{}{}
		var wait time.Duration
		select {
		case wait = <-t.asked:
		case <-t.left:
			continue
		case <-l.e.hardCtx.Done():
			return
		}
		timer := time.NewTimer(min(wait, limitRetry))
		select {
		case <-line.kick:
		case <-timer.C:
		case <-t.left:
		case <-l.e.stopped:
		case <-l.e.hardCtx.Done():
		}
		timer.Stop()
	}
}

// give gives a permit back after the handler: in Redis, then to this instance's line of
// the value, and to the other instances when a take was refused lately.
func (l *limiter) give(p *permit) {
	if l.e.killed.Load() {
		return // a killed process sends nothing more (tests): its permit expires
	}
	if p == nil || p.hold.Slot < 0 {
		l.kickLine(p)
		return
	}
	l.mu.Lock()
	for w, h := range l.held {
		if h == p {
			delete(l.held, w)
		}
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(l.e.hardCtx, l.e.cfg.Timing.LeaseTTL)
	defer cancel()
	_, waited, err := p.hold.Give(ctx, l.e.rdb, limitLinger)
	if err != nil {
		// It expires by itself after the TTL.
		l.e.logs.warn("limit:"+errorCause(translateRedisErr(err)), "giving a limit permit back failed; it ends at its expiry", "group", p.id.group, "value", p.id.value, "err", translateRedisErr(err))
		return
	}
	l.kickLine(p)
	if waited {
		_ = l.e.rdb.Publish(ctx, l.e.keys.LimitChannel(), p.id.group+"\x00"+p.id.value).Err()
	}
}

// kickLine wakes the line of p's value, if this instance has one.
func (l *limiter) kickLine(p *permit) {
	if p == nil {
		return
	}
	l.kick(p.id)
}

func (l *limiter) kick(id limitID) {
	l.mu.Lock()
	line := l.lines[id]
	l.mu.Unlock()
	if line != nil {
		select {
		case line.kick <- struct{}{}:
		default:
		}
	}
}

// noteWait adds a partition's wait for a permit to its handler's total.
func (l *limiter) noteWait(group string, d time.Duration) {
	l.mu.Lock()
	l.waited[group] += d
	l.mu.Unlock()
	if o, ok := l.e.cfg.Observer.(LimitObserver); ok {
		o.LimitWait(group, d)
	}
}

// renew renews every permit the instance holds, in one pipeline on the session's own
// client (a busy shared pool must not starve it), with the lease's rule: it reports
// whether Redis answered every renewal, and the caller moves the local deadline only
// then. A reply error (NOSCRIPT is reloaded and sent again; READONLY, CLUSTERDOWN,
// TRYAGAIN, OOM, ...) is no answer: the permit may expire in Redis while the deadline
// stands, and at the deadline the runs under it are cancelled. A permit found taken by
// another holder cancels its worker at once.
func (l *limiter) renew(ctx context.Context, rdb redis.UniversalClient) bool {
	l.mu.Lock()
	ws := make([]*worker, 0, len(l.held))
	ps := make([]*permit, 0, len(l.held))
	for w, p := range l.held {
		ws, ps = append(ws, w), append(ps, p)
	}
	l.mu.Unlock()
	if len(ps) == 0 {
		return true
	}
	ttl := l.e.cfg.Timing.LeaseTTL
	cmds, err := runPipelined(ctx, rdb, len(ps), func(pipe redis.Pipeliner, i int) *redis.Cmd { return ps[i].hold.RenewCmd(ctx, pipe, ttl) })
	if err != nil {
		l.e.logs.warn("limit-renew:"+errorCause(err), "limit permit renewal failed; the runs under them stop at the local deadline unless a renewal is answered", "permits", len(ps), "err", err)
		return false
	}
	answered := true
	for i, cmd := range cmds {
		ok, err := scripts.PermitRenewed(cmd)
		if err != nil {
			answered = false
			err = translateRedisErr(err)
			l.e.logs.warn("limit-renew:"+errorCause(err), "a limit permit renewal was refused; the runs under the permits stop at the local deadline unless a renewal is answered", "group", ps[i].id.group, "value", ps[i].id.value, "err", err)
			continue
		}
		if ok {
			continue
		}
		w := ws[i]
		l.mu.Lock()
		still := l.held[w] == ps[i]
		l.mu.Unlock()
		if still {
			l.e.log.Warn("limit permit lost (Redis lost it, or this instance stalled past its TTL): stopping the partition's run",
				"group", w.sub.group, "unit", w.u.name, "value", ps[i].id.value)
			w.cancel()
		}
	}
	return answered
}

// throttled lists the partitions waiting for a permit (at most max) and their number.
func (l *limiter) throttled(max int) ([]keyspace.ThrottledUnit, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []keyspace.ThrottledUnit
	n := 0
	for id, line := range l.lines {
		for e := line.waiters.Front(); e != nil; e = e.Next() {
			n++
			if len(out) < max {
				out = append(out, keyspace.ThrottledUnit{Group: id.group, Unit: e.Value.(*limitTicket).w.u.name, Value: id.value})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Unit < out[j].Unit })
	return out, n
}

// stats returns, per handler, the partitions waiting for a permit now and the time
// partitions waited for one so far.
func (l *limiter) stats() (waiting map[string]int, waited map[string]time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	waiting, waited = map[string]int{}, map[string]time.Duration{}
	for id, line := range l.lines {
		waiting[id.group] += line.waiters.Len()
	}
	for g, d := range l.waited {
		waited[g] = d
	}
	return waiting, waited
}

// loadOverrides reads the overrides of every limited handler.
func (l *limiter) loadOverrides(ctx context.Context) error {
	groups := l.limitedGroups()
	if len(groups) == 0 {
		return nil
	}
	pipe := l.e.rdb.Pipeline()
	cmds := make(map[string]*redis.MapStringStringCmd, len(groups))
	for _, g := range groups {
		cmds[g] = pipe.HGetAll(ctx, l.e.keys.LimitOverrides(g))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return translateRedisErr(err)
	}
	all := map[string]map[string]keyspace.LimitOverride{}
	for g, cmd := range cmds {
		all[g] = map[string]keyspace.LimitOverride{}
		for v, raw := range cmd.Val() {
			o, err := keyspace.DecodeLimitOverride(raw)
			if err != nil {
				l.e.logs.warn("limit-override", "an override of a limit key cannot be read; the domain's caps apply to that value", "group", g, "value", v, "err", err)
				continue
			}
			all[g][v] = o
		}
	}
	l.mu.Lock()
	l.overrides = all
	lines := make([]limitID, 0, len(l.lines))
	for id := range l.lines {
		lines = append(lines, id)
	}
	l.mu.Unlock()
	for _, id := range lines {
		l.kick(id) // a cap may have grown
	}
	return nil
}

// limitedGroups returns the handlers of the engine that have a limit.
func (l *limiter) limitedGroups() []string {
	var out []string
	for _, s := range l.e.subs {
		if s.limit.Active() {
			out = append(out, s.group)
		}
	}
	return out
}

// loop listens for announced releases and override changes, and reads the overrides every
// limitOverridesRefresh, until the hard stop. It runs only when a handler has a limit.
func (l *limiter) loop() {
	defer l.e.bg.Done()
	ps := l.e.rdb.Subscribe(l.e.hardCtx, l.e.keys.LimitChannel())
	defer ps.Close()
	// An override set between the read at start and the subscription was announced to
	// nobody here: read them again once the subscription is confirmed.
	if _, err := ps.ReceiveTimeout(l.e.hardCtx, l.e.cfg.Timing.LeaseTTL); err == nil {
		l.refreshOverrides()
	}
	refresh := time.NewTicker(limitOverridesRefresh)
	defer refresh.Stop()
	msgs := ps.Channel(redis.WithChannelHealthCheckInterval(bellPing))
	for {
		select {
		case <-l.e.hardCtx.Done():
			return
		case <-refresh.C:
			l.refreshOverrides()
		case m, ok := <-msgs:
			if !ok {
				return
			}
			parts := strings.Split(m.Payload, "\x00")
			if len(parts) < 2 {
				continue
			}
			if len(parts) == 3 && parts[2] == "override" {
				l.refreshOverrides()
				continue
			}
			l.kick(limitID{parts[0], parts[1]})
		}
	}
}

func (l *limiter) refreshOverrides() {
	ctx, cancel := context.WithTimeout(l.e.hardCtx, l.e.cfg.Timing.LeaseTTL)
	defer cancel()
	if err := l.loadOverrides(ctx); err != nil {
		l.e.logs.warn("limit-override", "reading the limit overrides failed; the last read stays", "err", err)
	}
}

// limitValue extracts an event's limit value; an event without a valid one fails its
// attempt with that reason (and halts its partition after the retries, as a poison event
// does: an operator sees why with seqctl head show).
func limitValue(ev Event, lim HandlerLimit, backfillSuffix string) (string, error) {
	v, err := ExtractKey(ev.Data, lim.By, backfillSuffix)
	if err != nil {
		return "", fmt.Errorf("the event's limit_by field: %w", err)
	}
	return v, nil
}

// LimitObserver is an optional extension of Observer: when EngineConfig.Observer also
// implements it, the engine reports how long each partition waited for a permit of its
// handler's limit key before its run.
type LimitObserver interface {
	LimitWait(group string, wait time.Duration)
}
