package engine

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/redis/go-redis/v9"
)

// The owner cache: the holder of each unit's lease as discovery last read it, so that a
// pass tries only the units that may be free, and reads the lease of the others only
// when their owner may have died.

// staleRecheckBatch bounds how many cached owners one discovery pass forgets when the
// instance is short of its share.
const staleRecheckBatch = 512

// candidatesLocked returns the indexes in all of the units this instance may try: own,
// those whose cached lease self holds without a worker here (acquire.lua re-adopts
// them), and other, those not held by an owner it knows to be alive. Its own units and
// those of live others are left out. It runs over every unit of the view at each pass (a
// million at a million partitions), so it copies no unit and allocates nothing per unit.
// e.mu is held.
func (e *Engine) candidatesLocked(all []unit, alive map[string]bool, self string) (own, other []int32) {
	var buf []byte
	for i := range all {
		buf = appendUnitID(buf[:0], &all[i])
		if _, mine := e.workers[string(buf)]; mine {
			continue
		}
		lv, ok := e.knownOwner[string(buf)]
		switch o := ownerOf(lv); {
		case !ok:
			other = append(other, int32(i))
		case o == self:
			own = append(own, int32(i))
		case !alive[o]:
			other = append(other, int32(i))
		}
	}
	return own, other
}

// splitSelfHeld separates the units whose cached lease is held by self (without a worker
// here) from the others, keeping the order of each.
func (e *Engine) splitSelfHeld(units []unit, self string) (own, other []unit) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var buf []byte
	for i := range units {
		buf = appendUnitID(buf[:0], &units[i])
		if lv, ok := e.knownOwner[string(buf)]; ok && ownerOf(lv) == self {
			own = append(own, units[i])
		} else {
			other = append(other, units[i])
		}
	}
	return own, other
}

// forgetCachedLocked drops up to n cached owners among units, starting at a random
// place so that successive passes cover different units. e.mu is held.
func (e *Engine) forgetCachedLocked(units []unit, n int) {
	if len(units) == 0 {
		return
	}
	start := rand.IntN(len(units))
	for i := 0; i < len(units) && n > 0; i++ {
		id := units[(start+i)%len(units)].id()
		if _, ok := e.knownOwner[id]; ok {
			delete(e.knownOwner, id)
			n--
		}
	}
}

// dropLiveOwned reads the lease of each unit whose owner is not known yet, caches what
// it finds, and returns the units that are free or held by an owner whose session is gone.
// alive gains the liveness of the owners it had to check.
func (e *Engine) dropLiveOwned(ctx context.Context, units []unit, alive map[string]bool, passStart uint64, self string) ([]unit, error) {
	pipe := e.rdb.Pipeline()
	gets := map[string]*redis.StringCmd{}
	e.mu.Lock()
	for _, u := range units {
		if _, known := e.knownOwner[u.id()]; !known {
			gets[u.id()] = pipe.Get(ctx, e.keys.LeaseKey(u.name, u.sub.group))
		}
	}
	e.mu.Unlock()
	if len(gets) == 0 {
		return units, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, translateRedisErr(err)
	}
	fresh := map[string]bool{}
	e.mu.Lock()
	for id, g := range gets {
		if lv := g.Val(); lv != "" && e.releasedAt[id] <= passStart {
			e.knownOwner[id] = lv
			if o := ownerOf(lv); o != "" {
				if _, seen := alive[o]; !seen {
					fresh[o] = true
				}
			}
		}
	}
	e.mu.Unlock()
	if err := e.sessionsAlive(ctx, fresh, alive); err != nil {
		return nil, err
	}
	out := units[:0]
	e.mu.Lock()
	for _, u := range units {
		if lv, ok := e.knownOwner[u.id()]; ok && ownerOf(lv) != self && alive[ownerOf(lv)] {
			continue
		}
		out = append(out, u)
	}
	e.mu.Unlock()
	return out, nil
}

// forgetOwner drops the cached owner of a released unit, so the next pass tries it.
func (e *Engine) forgetOwner(group, unitName string) {
	e.mu.Lock()
	id := group + "\x00" + unitName
	delete(e.knownOwner, id)
	e.releaseSeq++
	e.releasedAt[id] = e.releaseSeq
	e.mu.Unlock()
}

// cacheOwner remembers a unit's lease value read during a pass that started at passStart,
// unless a release of the unit was noticed since: the value read may predate the release,
// and caching it would make every instance skip a free unit while its old owner lives.
func (e *Engine) cacheOwner(id, lease string, passStart uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.releasedAt[id] > passStart {
		return
	}
	e.knownOwner[id] = lease
}
