package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/hashslot"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// unit is one leasable piece of work for one consumer group: a partition of a category,
// an unpartitioned category stream, or a process manager's correlation value (spanning a
// partition of each of its categories).
type unit struct {
	sub      *subscription
	key      string   // partition key or correlation value, "" when unpartitioned
	name     string   // lease unit: the primary stream, or PMUnit for a process manager
	lanes    []string // every primary lane first, then backfill lanes
	laneCats []string // the category of each lane
	guards   []string // per-stream lease keys also held (a process manager's value), see acquire.lua
}

func (u unit) id() string { return unitID(u.sub.group, u.name) }

// unitID is the key of a group's lease unit in Engine.workers.
func unitID(group, name string) string { return group + "\x00" + name }

// appendUnitID appends u's id to buf. What runs over every unit of the view at each pass
// (a million at a million partitions) looks the units up by string(appendUnitID(buf[:0],
// u)), which allocates nothing.
func appendUnitID(buf []byte, u *unit) []byte {
	return append(append(append(buf, u.sub.group...), 0), u.name...)
}

func (e *Engine) unitFor(s *subscription, key string) unit {
	u := unit{sub: s, key: key}
	if !s.partitioned {
		u.name = keyspace.SingleNode.CategoryStream(s.categories[0])
		u.lanes, u.laneCats = []string{u.name}, []string{s.categories[0]}
		return u
	}
	for _, c := range s.categories {
		u.lanes = append(u.lanes, e.keys.PartitionStream(c, key))
		u.laneCats = append(u.laneCats, c)
	}
	// The backfill lanes belong to the unit whether or not this instance publishes to
	// them: units and lanes depend only on the domain, so an instance with priority lanes
	// off still drains (and never reaps around) a lane another publisher wrote. A lane
	// that does not exist costs nothing until the primary lanes are empty.
	for _, c := range s.categories {
		u.lanes = append(u.lanes, e.keys.LaneStream(c, key, e.dom.backfillSuffix()))
		u.laneCats = append(u.laneCats, c)
	}
	u.name = u.lanes[0]
	if s.pm {
		u.name = e.keys.PMUnit(s.group, key)
		for _, c := range s.categories {
			u.guards = append(u.guards, e.keys.LeaseKey(e.keys.PartitionStream(c, key), s.group))
		}
	}
	return u
}

// discoveryLoop runs a discovery pass every DiscoveryInterval, and at once when the
// control stream announces a new partition or a released lease. The first pass waits
// for the start-up settle (see startSettle).
func (e *Engine) discoveryLoop() {
	defer e.bg.Done()
	if !e.settleStart() {
		return
	}
	t := time.NewTicker(e.cfg.DiscoveryInterval)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-e.stopped:
				return
			case <-e.hardCtx.Done():
				return
			case <-t.C:
			case <-e.discoverNow:
			}
		}
		switch err := e.discover(); {
		case err == nil:
			e.health.clear(healthDiscovery)
		case e.hardCtx.Err() == nil && !e.stopping():
			e.health.set(healthDiscovery, "discovery failing: "+err.Error())
			e.logs.warn("discovery:"+errorCause(err), "discovery pass failed", "err", err)
		}
	}
}

// startSettle bounds the wait before an instance's first discovery pass: an eighth of
// the discovery interval, at most maxStartSettle, spread down to half of that at random.
//
// Instances started together (a deployment, a restart of every replica) register in the
// instance registry as they open their sessions, before their loops run. Without the
// wait, the first of them to run a pass finds itself alone in the registry, takes every
// partition and hands half of them over a discovery interval later; with it, each first
// pass counts the instances that registered meanwhile and takes its share only. A lone
// instance owns everything at most startSettle later than without the wait (250 ms at
// the default interval; 12.5 ms at a 100 ms interval).
func startSettle(interval time.Duration) time.Duration {
	d := min(interval/8, maxStartSettle)
	return d/2 + rand.N(d/2+1)
}

// maxStartSettle caps startSettle.
const maxStartSettle = 250 * time.Millisecond

// settleStart waits for the start-up settle; false when the engine stopped meanwhile.
// Notices that arrive meanwhile are left for the first pass.
func (e *Engine) settleStart() bool {
	t := time.NewTimer(startSettle(e.cfg.DiscoveryInterval))
	defer t.Stop()
	select {
	case <-e.stopped:
		return false
	case <-e.hardCtx.Done():
		return false
	case <-t.C:
	}
	select {
	case <-e.discoverNow: // the first pass covers it
	default:
	}
	return true
}

// discover runs one discovery pass: it takes the units of the instance's view of the
// partition indexes (see indexView; the whole indexes are read only when due), checks
// the liveness of the registered instances and of the known foreign owners (liveness.go:
// read only when it may have changed), and tries to acquire the units that are not owned
// here and whose last known owner is not alive, up to the instance's fair share, a page
// at a time within a bounded time (takeShare). Acquire attempts are pipelined; a live
// owner's units cost nothing but the liveness of that owner.
func (e *Engine) discover() (err error) {
	in := e.sess.live()
	if in == nil {
		return nil // no session: the heartbeat loop opens the next one
	}
	defer func() {
		if err != nil {
			// Notices read while Redis failed may be lost with a failover; read the
			// indexes, the registry and the sessions again at the next pass.
			e.view.markDue()
			e.lives.forget()
		}
	}()
	owner := in.owner
	e.mu.Lock()
	passStart := e.releaseSeq // releases noticed after this may postdate what the pass reads
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(e.hardCtx, e.cfg.Timing.LeaseTTL)
	defer cancel()

	all, instances, err := e.readPass(ctx, in)
	if err != nil {
		e.calls.failed(ctx, err)
		return err
	}
	e.calls.answered()
	e.checkCardinality(ctx, e.view.sizes())
	alive, fl, err := e.liveness(ctx, instances, owner)
	if err != nil {
		return err
	}

	own, other, room := e.fairShare(all, alive, fl.n, owner)
	if len(own)+len(other) == 0 || e.stopping() {
		e.setBehind(0)
		return nil
	}
	var dead []string
	if e.keys.IsCluster() {
		dead = deadOwners(alive)
	}
	return e.takeShare(ctx, in, all, own, other, room, alive, fl, passStart, dead)
}

// fairShare aims at ceil(units / live instances): it hands over what is clearly above the
// share, and returns the units to try (see candidatesLocked) and the room below the share.
func (e *Engine) fairShare(all []unit, alive map[string]bool, instancesAlive int, owner string) (own, other []int32, room int) {
	target := (len(all) + instancesAlive - 1) / instancesAlive
	e.mu.Lock()
	owned := len(e.workers)
	own, other = e.candidatesLocked(all, alive, owner)
	short := false
	if floor := len(all) / instancesAlive; owned+len(own)+len(other) < floor {
		// Below even the rounded-down share with too few candidates: some cached owners
		// must be stale (their release notices were trimmed from the capped control
		// stream before this instance read them, in a mass hand-over say). Forget a
		// bounded batch of them so this pass reads their leases again, and read the
		// indexes again soon in case partition notices were lost too. In balance this
		// never runs, so it costs an idle deployment nothing.
		e.forgetCachedLocked(all, staleRecheckBatch)
		own, other = e.candidatesLocked(all, alive, owner)
		short = true
	}
	if owned > target+fairShareSlack {
		e.handOverLocked(owned - target)
	}
	e.mu.Unlock()
	if short {
		e.view.wantFull(time.Now(), fullReadMinGap*e.cfg.DiscoveryInterval)
	}
	return own, other, target - owned
}

// acquirePage is how many units one acquire call of a pass tries (one pipeline): the
// workers of a page start as soon as its replies are read, so the first partitions run
// while the pass is still taking the rest.
const acquirePage = 500

// takeShare tries the candidates of a pass a page at a time, in the order of
// orderCandidates, and starts a worker for each lease taken as its page returns. Work is
// bounded per pass: once a discovery interval has gone by since the first page, the
// pass ends and, when it had room left, the next one starts at once (the instance is
// behind: see setBehind). So a pass never fails for the size of the index, and the first
// partitions run while a large share is still being taken.
//
// With more candidates than room, each page first reads the owners of the units whose
// owner is not cached (one GET each, see dropLiveOwned), so the room is not spent on
// attempts that would fail against a live owner; only free units use the room, and a
// lease this session still holds without a worker (its worker exited and could not give
// it back: a release that timed out under load) is re-adopted whatever the room: no
// other instance can take it while this one lives, so leaving it would strand the
// partition. Fair share hands it over later if this instance is above its share.
func (e *Engine) takeShare(ctx context.Context, in *incarnation, all []unit, own, other []int32, room int, alive map[string]bool, fl fleet, passStart uint64, dead []string) error {
	check := len(own)+len(other) > room
	order := orderCandidates(all, own, other, fl)
	deadline := time.Now().Add(e.cfg.DiscoveryInterval)
	var t acquireTally
	defer e.acquired(&t, room)
	page := make([]unit, 0, acquirePage)
	for len(order) > 0 && !e.stopping() && ctx.Err() == nil {
		if time.Now().After(deadline) {
			break
		}
		page = page[:0]
		for _, i := range order[:min(acquirePage, len(order))] {
			page = append(page, all[i])
		}
		order = order[len(page):]
		batch := page
		if check {
			var err error
			if batch, err = e.dropLiveOwned(ctx, batch, alive, passStart, in.owner); err != nil {
				return err
			}
			own, free := e.splitSelfHeld(batch, in.owner)
			batch = append(own, free[:min(len(free), max(room-t.taken, 0))]...)
		}
		if len(batch) == 0 {
			continue
		}
		if ok, err := e.acquire(ctx, in, batch, passStart, dead, &t); !ok || err != nil {
			return err
		}
	}
	behind := 0
	if t.taken < room {
		behind = min(len(order), room-t.taken)
	}
	e.setBehind(behind)
	if behind > 0 && !e.stopping() {
		e.logs.warn("discovery-behind", "discovery is behind: partitions free for this instance wait for the next pass (run at once)",
			"waiting", behind, "taken_this_pass", t.taken, "pass_budget", e.cfg.DiscoveryInterval)
		e.kickDiscovery()
	}
	return nil
}

// orderCandidates returns the order in which a pass tries its candidates (indexes in
// all): first own, the units whose cached lease this session holds (re-adopted whatever
// the room), then this instance's slice of the others (see prefers), then the rest; each
// part at random. So instances started together over many fresh partitions mostly try
// different ones, and instances whose passes overlap mostly try different units of the
// others.
func orderCandidates(all []unit, own, other []int32, fl fleet) []int32 {
	mine, rest := make([]int32, 0, len(other)/max(fl.n, 1)+1), []int32{}
	for _, i := range other {
		if fl.prefers(&all[i]) {
			mine = append(mine, i)
		} else {
			rest = append(rest, i)
		}
	}
	rand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return append(append(own, mine...), rest...)
}

// prefers reports whether u is in this instance's slice of the units: the hash slot of
// the unit's name (the same in every instance) modulo the live instances is its rank. An
// instance that does not know its rank prefers every unit.
func (f fleet) prefers(u *unit) bool {
	if f.rank < 0 || f.n <= 1 {
		return true
	}
	return hashslot.Of(u.name)%f.n == f.rank
}

// setBehind records how many free partitions the last pass left for lack of time
// (Stats.DiscoveryBehind).
func (e *Engine) setBehind(n int) {
	e.mu.Lock()
	e.discoveryBehind = n
	e.mu.Unlock()
}

// readPass reads what a pass needs besides liveness: the instance registry (registry
// field -> JSON entry) and, when due, the partition indexes, a page at a time (see
// indexScan: a full read begun in one pass goes on in the next ones, scanBudget per
// pass); with a pending gap check, the control stream's state, and a full read begun at
// once when notices were trimmed before the doorbell read them. It returns the units of
// the view.
func (e *Engine) readPass(ctx context.Context, in *incarnation) ([]unit, map[string]string, error) {
	v := e.view
	now := time.Now()
	full := v.fullDue(in, now)
	from, check := v.gapPending()
	check = check && !full
	pipe := e.rdb.Pipeline()
	registry := e.lives.cachedRegistry()
	var instances *redis.MapStringStringCmd
	if registry == nil {
		instances = pipe.HGetAll(ctx, e.keys.InstancesKey())
	}
	var ctrlLen *redis.IntCmd
	var ctrlFirst *redis.XMessageSliceCmd
	if check {
		ctrlLen = pipe.XLen(ctx, e.keys.ControlStream())
		ctrlFirst = pipe.XRangeN(ctx, e.keys.ControlStream(), "-", "+", 1)
	}
	var tail *redis.XMessageSliceCmd
	var sizes *sizeCheck
	if full {
		tail = v.queueTail(ctx, pipe)
	} else if !v.scanning() { // the view's size is known only once a full read is done
		sizes = v.queueSizeCheck(ctx, pipe, false)
	}
	_, _ = pipe.Exec(ctx) // each reply is checked below
	if instances != nil {
		if err := instances.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, translateRedisErr(err)
		}
		registry = instances.Val()
		e.lives.keepRegistry(registry)
	}
	again := false // begin a full read now
	if check && v.gapChecked(from, ctrlLen.Val(), firstID(ctrlFirst.Val(), ""), errors.Join(ctrlLen.Err(), ctrlFirst.Err())) {
		e.logs.warn("control-gap", "partition notices were trimmed from the control stream before this instance read them: reading the partition indexes again")
		again = true
	} else if sizes != nil && v.mismatch(sizes) {
		// The sizes differ from the view: read them again after the control stream's
		// tail, which tells whether the view had every notice (a settled pass reads the
		// sizes alone).
		pipe = e.rdb.Pipeline()
		sizes = v.queueSizeCheck(ctx, pipe, true)
		_, _ = pipe.Exec(ctx)
		if c, changed := v.outdated(sizes); changed {
			// A partition key indexed (or removed) with no notice: another publisher's
			// SADD (HSET on Redis Cluster), say. Read the indexes now rather than at the
			// backstop.
			e.log.Debug("a partition index changed without a notice: reading the indexes again", "category", c)
			again = true
		}
	}
	if again {
		tail = v.queueTail(ctx, e.rdb)
	}
	if tail != nil {
		if err := tail.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, translateRedisErr(err)
		}
		v.beginScan(in, tail)
	}
	dropped, err := e.scanIndexes(ctx, now, e.scanBudget())
	if err != nil {
		return nil, nil, translateRedisErr(err)
	}
	if dropped {
		e.forgetGoneUnits()
	}
	return e.viewUnits(), registry, nil
}

// scanBudget is how long one pass reads pages of a full read of the indexes: a quarter
// of the discovery interval (500 ms at the default); the rest of the pass takes leases.
func (e *Engine) scanBudget() time.Duration {
	return e.cfg.DiscoveryInterval / 4
}

// firstID returns the id of the first of msgs, or none when there is none (a one-entry
// XRANGE or XREVRANGE: the head or the tail of a stream).
func firstID(msgs []redis.XMessage, none string) string {
	if len(msgs) == 0 {
		return none
	}
	return msgs[0].ID
}

// controlRead takes the control-stream entries the doorbell read, in stream order: each
// partition notice of a subscribed category adds its key to the view. The next pass
// checks that no notice was trimmed from the stream before the doorbell read it.
func (e *Engine) controlRead(msgs []redis.XMessage) {
	if len(msgs) == 0 || e.view == nil {
		return
	}
	suffix := e.dom.backfillSuffix()
	v := e.view
	dropped := false
	defer func() {
		if dropped {
			e.forgetGoneUnits()
		}
	}()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.batches++
	if !v.checkGap && v.cursor != "" {
		v.checkGap, v.checkFrom = true, v.cursor
	}
	for _, m := range msgs {
		n := keyspace.DecodeNotice(m)
		if n.Op != keyspace.NoticePartition && n.Op != keyspace.NoticeReaped {
			continue
		}
		c, k := n.Category, n.Key
		keys, ok := v.cats[c]
		if !ok || ValidateStreamKey(k, suffix) != nil {
			continue
		}
		v.seq++
		delete(v.ghosts[c], k)
		if n.Op == keyspace.NoticeReaped {
			if _, had := keys[k]; had {
				delete(keys, k)
				v.pendDrop = true
				dropped = true
			}
			continue
		}
		if _, had := keys[k]; !had {
			v.pendAdd = append(v.pendAdd, catKey{c, k})
		}
		keys[k] = v.seq // a re-announced key must survive a -4 seen before the notice
	}
	if last := msgs[len(msgs)-1].ID; v.cursor == "" || idLess(v.cursor, last) {
		v.cursor = last
	}
}

// errorCause names the kind of a Redis error for rate-limited logging: the error code of
// a Redis reply (OOM, NOPERM, ...) or "unreachable".
func errorCause(err error) string {
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		if i := strings.IndexByte(msg, ' '); i > 0 {
			return msg[:i]
		}
		return msg
	}
	return "unreachable"
}

// fairShareSlack is how far above its share an instance may stay before it hands
// partitions over, so that shares do not flap at the boundary.
const fairShareSlack = 1

// handOverLocked asks n workers to finish their in-flight event and release their lease,
// idle ones first. e.mu is held.
func (e *Engine) handOverLocked(n int) {
	var idle, busy []*worker
	for _, w := range e.workers {
		if w.handoff.Load() {
			n--
			continue
		}
		if w.idle.Load() {
			idle = append(idle, w)
		} else {
			busy = append(busy, w)
		}
	}
	for _, w := range append(idle, busy...) {
		if n <= 0 {
			return
		}
		w.handoff.Store(true)
		w.poke()
		n--
	}
}

// checkCardinality logs once per crossing when a category's live partitions exceed the
// configured threshold (partition-per-key is a bounded-cardinality design), and keeps
// the counts for Stats. At the first crossing it also says what the Redis setting
// stream-node-max-bytes costs per partition (adviseStreamNodeBytes).
func (e *Engine) checkCardinality(ctx context.Context, live map[string]int) {
	crossed := false
	e.mu.Lock()
	for c, n := range live {
		e.livePartitions[c] = n
		over := e.cfg.MaxPartitionsWarning > 0 && n > e.cfg.MaxPartitionsWarning
		if over && !e.overThreshold[c] {
			e.log.Warn("live partitions above the threshold: partition-per-key suits a bounded set of keys",
				"category", c, "partitions", n, "threshold", e.cfg.MaxPartitionsWarning)
			crossed = true
		}
		e.overThreshold[c] = over
	}
	e.mu.Unlock()
	if crossed && e.streamNodeAdvised.CompareAndSwap(false, true) {
		e.adviseStreamNodeBytes(ctx)
	}
}

// adviseStreamNodeBytes logs what each partition's stream costs when Redis allocates a
// stream's first node at stream-node-max-bytes (since Redis 6.2) and the setting is 2 KB
// or more (the default is 4 KB): a stream of a few events takes about that much, which
// is most of what a partition costs Redis. A Redis that refuses CONFIG GET (an ACL, a
// managed service) is not asked again, and nothing is logged.
func (e *Engine) adviseStreamNodeBytes(ctx context.Context) {
	v, err := e.rdb.ConfigGet(ctx, "stream-node-max-bytes").Result()
	if err != nil {
		return
	}
	n, err := strconv.Atoi(v["stream-node-max-bytes"])
	if err != nil || n < 2048 {
		return
	}
	e.log.Warn("each partition's stream takes about stream-node-max-bytes of Redis memory however few events it holds: "+
		"with many live partitions, CONFIG SET stream-node-max-bytes 1024 (and in redis.conf) cuts it to about a quarter (docs/configuration.md, \"Many partitions\")",
		"stream_node_max_bytes", n)
}
