package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// indexView is the instance's copy of the discovery index ({category}:__partitions__) of
// every partitioned category it subscribes to. A whole index is a reply of every member
// (10,000 and more in a large deployment), so a discovery pass does not read it; the view
// changes instead:
//
//   - it grows by the control stream's partition notices (op=partition, category, key),
//     which publish.lua and replay.lua append in the same step as they add a key to an
//     index, and which the doorbell hands to controlRead as it reads them;
//   - it shrinks when an acquire finds none of a unit's lanes (acquire.lua returns -4:
//     the partition was reaped), unless a notice re-announced the key meanwhile;
//   - it is replaced by a full read of the indexes, a page at a time over as many passes
//     as it takes (see indexScan), only: on the first pass
//     of each session incarnation (start-up, and after a session loss, when Redis may
//     have restarted without its data); as a backstop every fullReadEvery discovery
//     intervals, spread by jitter; when notices may have been lost (the doorbell's
//     position in the capped control stream fell behind its trimmed head, or a pass
//     failed); and when the instance is short of its fair share with too few candidates,
//     at most once per fullReadMinGap intervals.
//
// How long a new partition waits to be owned: its notice reaches the doorbell's next
// read of the control stream (it blocks at most doorbellBlock, and an entry ends the
// block at once) and kicks a pass, so normally one pass. When the notice is lost, the
// gap check finds it on the doorbell's next read, or else the backstop: the next full
// read comes at most fullReadEvery discovery intervals after the previous one and begins
// on the first pass after that, so within fullReadEvery+1 intervals (32 s at the
// default 2 s interval), plus the passes a large index takes to read (a million keys
// are 200 pages).
type indexView struct {
	mu   sync.Mutex
	keys keyspace.Keys // the key layout, set before use
	// cats: category -> key -> the notice sequence number that last announced the key
	// (0: read by a full read). Guarded by mu.
	cats map[string]map[string]uint64
	// ghosts: category -> keys the index still holds but the view dropped (acquire.lua
	// found none of their lanes); invalid: category -> members of the last full read that
	// are not valid partition keys. With the view's keys, they make up the index's
	// expected size (expectedSize). Guarded by mu.
	ghosts  map[string]map[string]bool
	invalid map[string]int
	seq     uint64 // partition notices applied; guarded by mu
	units   []unit // derived from cats, nil before the first derivation; guarded by mu
	// pendAdd are the keys added to cats since units were derived, pendDrop says a key
	// left: viewUnits applies them to units without deriving every unit again (a
	// million at a million partitions). subCats are the lane categories the units of
	// each subscription share (see compactUnit). Guarded by mu.
	pendAdd  []catKey
	pendDrop bool
	subCats  map[*subscription][]string
	// cursor is the control stream id up to which every notice is accounted for: read by
	// a full read, or handed over by the doorbell ("" before the first full read).
	// Guarded by mu.
	cursor string
	// checkFrom is the cursor before the first notices read since the last gap check;
	// checkGap says a check is pending. Guarded by mu.
	checkFrom string
	checkGap  bool
	batches   uint64 // calls of controlRead with entries; guarded by mu
	// pendCursor and pendBatches are cursor and batches when the pending check was
	// sent. Guarded by mu.
	pendCursor  string
	pendBatches uint64
	due         bool       // a full read is due at the next pass; guarded by mu
	scan        *indexScan // the full read under way, nil when none is; guarded by mu

	// Owned by the discovery goroutine.
	inc      *incarnation // incarnation of the last full read
	lastFull time.Time
	next     time.Time // the backstop full read is due
	// raceKicks counts the passes of this incarnation that re-ran at once after losing
	// units to another instance's overlapping pass.
	raceKicks int
}

// maxRaceKicks bounds raceKicks.
const maxRaceKicks = 3

// fullReadEvery is the backstop period of a full read of the partition indexes, in
// discovery intervals (30 s at the default 2 s). Each period is shortened by up to a
// fifth at random so that instances started together do not read in step.
const fullReadEvery = 15

// fullReadMinGap is the shortest time between two full reads asked for by an instance
// short of its share, in discovery intervals: one that stays short (its peers keep one
// unit above the share, within the slack) must not read the indexes every pass.
const fullReadMinGap = 5

func newIndexView(categories []string) *indexView {
	v := &indexView{cats: map[string]map[string]uint64{}, ghosts: map[string]map[string]bool{}, invalid: map[string]int{}}
	for _, c := range categories {
		v.cats[c] = map[string]uint64{}
		v.ghosts[c] = map[string]bool{}
	}
	return v
}

// sizeCheck is a check of the indexes' sizes queued on a pipeline: with tail, the control
// stream's last entry first, then each index's size (SCARD, HLEN on Redis Cluster).
type sizeCheck struct {
	tail  *redis.XMessageSliceCmd // nil: sizes only (see mismatch)
	sizes map[string]*redis.IntCmd
}

// queueSizeCheck queues a size check of every index on pipe; with tail, the control
// stream's tail is read before the sizes, for outdated.
func (v *indexView) queueSizeCheck(ctx context.Context, pipe redis.Pipeliner, tail bool) *sizeCheck {
	sc := &sizeCheck{sizes: map[string]*redis.IntCmd{}}
	if tail {
		sc.tail = v.queueTail(ctx, pipe)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for c := range v.cats {
		sc.sizes[c] = v.keys.IndexSize(ctx, pipe, c)
	}
	return sc
}

// outdated reports whether an index holds another number of members than the view
// accounts for: a key added or removed without a notice (another publisher's SADD or
// HSET, say; a notice that was never written). When the view has not read every notice
// up to the control stream's tail read before the sizes, nothing can be concluded: false.
func (v *indexView) outdated(sc *sizeCheck) (category string, ok bool) {
	if sc.tail == nil || sc.tail.Err() != nil && !errors.Is(sc.tail.Err(), redis.Nil) {
		return "", false
	}
	tail := firstID(sc.tail.Val(), "0-0")
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cursor == "" || idLess(v.cursor, tail) {
		return "", false
	}
	return v.differsLocked(sc)
}

// mismatch reports whether the sizes of a check without the tail differ from the view:
// then a check with the tail tells whether the view is outdated (a notice read after the
// sizes, or not read yet, also makes them differ). v.mu is taken.
func (v *indexView) mismatch(sc *sizeCheck) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, differs := v.differsLocked(sc)
	return differs
}

// differsLocked returns a category whose index size differs from what the view accounts
// for. v.mu is held.
func (v *indexView) differsLocked(sc *sizeCheck) (category string, ok bool) {
	for c, cmd := range sc.sizes {
		if cmd.Err() != nil && !errors.Is(cmd.Err(), redis.Nil) {
			continue
		}
		if cmd.Val() != int64(len(v.cats[c])+len(v.ghosts[c])+v.invalid[c]) {
			return c, true
		}
	}
	return "", false
}

// noticeSeq returns the number of partition notices applied so far.
func (v *indexView) noticeSeq() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.seq
}

// fullDue reports whether this pass of incarnation in must begin a full read of the
// indexes: one was asked for, or none ran in this incarnation, or the backstop is due;
// a full read of this incarnation that is still under way goes on instead.
func (v *indexView) fullDue(in *incarnation, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.due {
		return true
	}
	if v.scan != nil && v.scan.in == in {
		return false
	}
	return v.inc != in || !now.Before(v.next)
}

// markDue asks for a full read at the next pass.
func (v *indexView) markDue() {
	v.mu.Lock()
	v.due = true
	v.mu.Unlock()
}

// wantFull asks for a full read at the next pass unless one ran within minGap.
func (v *indexView) wantFull(now time.Time, minGap time.Duration) {
	if v.scan == nil && now.Sub(v.lastFull) >= minGap {
		v.markDue()
	}
}

// gapPending returns the cursor to check the control stream against, if a check is due.
func (v *indexView) gapPending() (from string, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pendCursor, v.pendBatches = v.cursor, v.batches
	return v.checkFrom, v.checkGap
}

// gapChecked ends the pending check with the control stream's length and first entry id
// ("" when empty), and reports whether notices after from were trimmed before the
// doorbell read them. Scripts trim the stream from its head and keep at least
// controlStreamCap entries, so a stream that was trimmed is at the cap, and when its
// first entry is past from, from and what followed it up to that entry are gone: a gap,
// unless from was the last entry of a trimmed node (then one needless full read).
// XRANGE and XLEN, unlike XINFO STREAM, are in the worker's ACL (docs/security.md).
func (v *indexView) gapChecked(from string, length int64, first string, err error) bool {
	v.mu.Lock()
	if v.batches == v.pendBatches {
		v.checkGap = false
	} else {
		// Notices read after the check was sent may follow a trim the reply predates:
		// check them at the next pass, from what had been read when this one was sent.
		v.checkFrom = v.pendCursor
	}
	v.mu.Unlock()
	if err != nil {
		return false
	}
	return length >= controlStreamCap && first != "" && idLess(from, first)
}

// controlStreamCap is the smallest approximate MAXLEN the scripts that append to the
// control stream trim it to.
const controlStreamCap = 1000

// indexScan is a full read of the indexes a page at a time (SSCAN, HSCAN on Redis
// Cluster; see scanIndexes): each page's keys join the view as soon as they are read, so
// a pass takes leases on them before the rest of a large index is read (a million keys
// are about 200 pages). When the last page is read (finishScan), the keys the scan did not
// find leave the view, unless a notice announced them after it began. SCAN returns every
// key the index holds from the first page to the last at least once; a key indexed
// meanwhile is announced on the control stream after the scan began (a key is indexed
// and announced in one script), and one removed meanwhile is found reaped by acquire.lua.
// Owned by the discovery goroutine; its fields are read and written with the view's mu
// held.
type indexScan struct {
	in     *incarnation
	seq    uint64   // notices applied when it began
	tail   string   // the control stream's last entry id, read before the first page
	cats   []string // the categories, scanned in this order
	cat    int      // the category being scanned
	cursor uint64
	// seen: category -> every key the scan read; bad: those that are not valid
	// partition keys (the view leaves them out).
	seen, bad map[string]map[string]struct{}
}

// scanPage is how many index members one page of a full read asks for (SSCAN COUNT).
const scanPage = 5000

// beginScan begins a full read in incarnation in; tail is the control stream's last
// entry id, read before (see queueTail).
func (v *indexView) beginScan(in *incarnation, tail *redis.XMessageSliceCmd) {
	v.mu.Lock()
	defer v.mu.Unlock()
	sc := &indexScan{in: in, seq: v.seq, tail: firstID(tail.Val(), "0-0"),
		seen: map[string]map[string]struct{}{}, bad: map[string]map[string]struct{}{}}
	for c := range v.cats {
		sc.cats = append(sc.cats, c)
		sc.seen[c], sc.bad[c] = map[string]struct{}{}, map[string]struct{}{}
	}
	slices.Sort(sc.cats)
	v.scan, v.due = sc, false
	if v.inc != in {
		v.raceKicks = 0
	}
}

// queueTail reads the control stream's last entry, or queues the read on a pipeline.
func (v *indexView) queueTail(ctx context.Context, c redis.Cmdable) *redis.XMessageSliceCmd {
	return c.XRevRangeN(ctx, v.keys.ControlStream(), "+", "-", 1)
}

// scanning reports whether a full read is under way.
func (v *indexView) scanning() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.scan != nil
}

// scanIndexes reads pages of the full read under way until it is done or budget has
// passed (one page at least), and reports whether a key left the view (when the last
// page was read: see finishScan).
func (e *Engine) scanIndexes(ctx context.Context, now time.Time, budget time.Duration) (dropped bool, err error) {
	v := e.view
	suffix := e.dom.backfillSuffix()
	deadline := time.Now().Add(budget)
	for {
		v.mu.Lock()
		sc := v.scan
		if sc == nil {
			v.mu.Unlock()
			return false, nil
		}
		if sc.cat == len(sc.cats) {
			dropped = v.finishScanLocked(now, e.cfg.DiscoveryInterval)
			v.mu.Unlock()
			return dropped, nil
		}
		c, cursor := sc.cats[sc.cat], sc.cursor
		v.mu.Unlock()
		keys, next, err := v.keys.IndexScan(ctx, e.rdb, c, cursor, "", scanPage)
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, err
		}
		v.mergePage(sc, c, keys, next, suffix)
		if time.Now().After(deadline) {
			return false, nil
		}
	}
}

// mergePage adds a page of category c's index to the view and moves the scan sc on to
// next (0: the category's last page was read).
func (v *indexView) mergePage(sc *indexScan, c string, keys []string, next uint64, suffix string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.scan != sc {
		return // begun again meanwhile
	}
	view := v.cats[c]
	for _, k := range keys {
		if ValidateStreamKey(k, suffix) != nil { // a value the publisher never writes; never route to it
			sc.bad[c][k] = struct{}{}
			continue
		}
		sc.seen[c][k] = struct{}{}
		delete(v.ghosts[c], k)
		if _, had := view[k]; !had {
			view[k] = 0
			v.pendAdd = append(v.pendAdd, catKey{c, k})
		}
	}
	if sc.cursor = next; next == 0 {
		sc.cat++
	}
}

// finishScanLocked ends the full read under way: the keys it did not find leave the view,
// except those announced after it began (a publish while it ran), and it becomes the
// view's last full read. It reports whether a key left the view. v.mu is held.
func (v *indexView) finishScanLocked(now time.Time, interval time.Duration) (dropped bool) {
	sc := v.scan
	for _, c := range sc.cats {
		for k, s := range v.cats[c] {
			if _, ok := sc.seen[c][k]; !ok && s <= sc.seq {
				delete(v.cats[c], k)
				v.pendDrop, dropped = true, true
			}
		}
		for k := range v.ghosts[c] {
			if _, ok := sc.seen[c][k]; !ok { // not indexed any more
				delete(v.ghosts[c], k)
			}
		}
		v.invalid[c] = len(sc.bad[c])
	}
	if v.cursor == "" || idLess(v.cursor, sc.tail) {
		v.cursor = sc.tail
	}
	if v.checkGap && idLess(v.checkFrom, sc.tail) {
		v.checkFrom = sc.tail
	}
	v.scan = nil
	v.inc, v.lastFull = sc.in, now
	every := fullReadEvery * interval
	v.next = now.Add(every - rand.N(every/5+1))
	return dropped
}

// drop removes a unit's key from the view after acquire.lua found none of its lanes,
// unless a notice announced the key after seq (a publish re-created it since). It
// reports whether the key is gone from the view.
func (v *indexView) drop(u unit, seq uint64) (dropped bool) {
	if u.key == "" {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range u.laneCats {
		if s, ok := v.cats[c][u.key]; ok && s <= seq {
			delete(v.cats[c], u.key)
			v.ghosts[c][u.key] = true // still indexed, as far as the view knows
			v.pendDrop = true
			dropped = true
		}
	}
	return dropped
}

// forgetGoneUnits drops what the engine remembers of units whose keys left the view
// (their cached owner, the sequence of their last release): a partition reaped, or
// never created, costs nothing once it is gone. O(units in the view), run only when the
// view lost a key.
func (e *Engine) forgetGoneUnits() {
	live := map[string]bool{}
	for _, u := range e.viewUnits() {
		live[u.id()] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.knownOwner {
		if !live[id] {
			delete(e.knownOwner, id)
		}
	}
	for id := range e.releasedAt {
		if !live[id] {
			delete(e.releasedAt, id)
		}
	}
}

// sizes returns the number of keys in the view per category.
func (v *indexView) sizes() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(v.cats))
	for c, keys := range v.cats {
		out[c] = len(keys)
	}
	return out
}

// catKey is a partition key of a category.
type catKey struct{ cat, key string }

// viewUnits returns every unit of the subscriptions over the keys in the view. The
// slice is shared until the view changes: callers must not modify it. After the first
// derivation, keys added and removed since are applied to the units there are (see
// pendAdd), unless a key was added to a category of a subscription over several
// categories (a process manager's: a key is one unit whichever categories hold it),
// which derives them all again.
func (e *Engine) viewUnits() []unit {
	v := e.view
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.units != nil && !v.pendDrop && len(v.pendAdd) == 0 {
		return v.units
	}
	if v.units == nil || e.addsToSeveralCategories(v.pendAdd) {
		v.units = e.deriveUnitsLocked()
	} else {
		v.units = e.updateUnitsLocked()
	}
	v.pendAdd, v.pendDrop = nil, false
	return v.units
}

// addsToSeveralCategories reports whether a key of adds is in a category of a
// subscription over several categories.
func (e *Engine) addsToSeveralCategories(adds []catKey) bool {
	for _, s := range e.subs {
		if len(s.categories) < 2 || len(adds) == 0 {
			continue
		}
		for _, a := range adds {
			if slices.Contains(s.categories, a.cat) {
				return true
			}
		}
	}
	return false
}

// updateUnitsLocked applies pendAdd and pendDrop to units: the units whose key left the
// view are left out (in a new slice: the old one may be in use), and a unit is derived
// for each key added and still in the view, once per subscription of its category.
// v.mu is held.
func (e *Engine) updateUnitsLocked() []unit {
	v := e.view
	add := make(map[catKey]bool, len(v.pendAdd))
	for _, a := range v.pendAdd {
		if _, ok := v.cats[a.cat][a.key]; ok {
			add[a] = true
		}
	}
	all := v.units
	if v.pendDrop {
		kept := make([]unit, 0, len(all)+len(add))
		for _, u := range all {
			if u.key != "" && !v.holdsLocked(u) {
				continue
			}
			if len(add) > 0 {
				delete(add, catKey{u.sub.categories[0], u.key}) // already a unit (dropped, then added again)
			}
			kept = append(kept, u)
		}
		all = kept
	}
	for _, a := range v.pendAdd {
		if !add[a] {
			continue
		}
		delete(add, a)
		for _, s := range e.subs {
			if s.partitioned && len(s.categories) == 1 && s.categories[0] == a.cat {
				u := e.unitFor(s, a.key)
				v.subCats[s] = compactUnit(&u, v.subCats[s])
				all = append(all, u)
			}
		}
	}
	return all
}

// holdsLocked reports whether a partitioned unit's key is in the view under one of its
// subscription's categories. v.mu is held.
func (v *indexView) holdsLocked(u unit) bool {
	for _, c := range u.sub.categories {
		if _, ok := v.cats[c][u.key]; ok {
			return true
		}
	}
	return false
}

// deriveUnitsLocked derives every unit of the view. v.mu is held.
func (e *Engine) deriveUnitsLocked() []unit {
	v := e.view
	n := 0 // at least as many as there are units
	for _, s := range e.subs {
		n++
		for _, c := range s.categories {
			n += len(v.cats[c])
		}
	}
	all := make([]unit, 0, n)
	v.subCats = map[*subscription][]string{}
	for _, s := range e.subs {
		if !s.partitioned {
			all = append(all, e.unitFor(s, ""))
			continue
		}
		var seen map[string]bool // a key in several of the subscription's categories is one unit
		if len(s.categories) > 1 {
			seen = map[string]bool{}
		}
		var cats []string
		for _, c := range s.categories {
			for k := range v.cats[c] {
				if seen != nil {
					if seen[k] {
						continue
					}
					seen[k] = true
				}
				u := e.unitFor(s, k)
				cats = compactUnit(&u, cats)
				all = append(all, u)
			}
		}
		v.subCats[s] = cats
	}
	return all
}

// compactUnit makes a unit cheaper to keep, with the same values (the view holds one per
// partition, and each owned partition's worker keeps its own): the lane categories,
// the same for every unit of a subscription, are shared (cats: those of the units
// before, nil for the first; it returns those to give the next), and a lane whose name
// begins another lane's name (a primary lane begins its backfill lane's) is kept as the
// start of that string instead of a string of its own.
func compactUnit(u *unit, cats []string) []string {
	if cats != nil && slices.Equal(u.laneCats, cats) {
		u.laneCats = cats
	} else {
		cats = slices.Clip(u.laneCats) // shared: an append must not write into it
		u.laneCats = cats
	}
	for i, l := range u.lanes {
		for _, m := range u.lanes {
			if len(m) > len(l) && strings.HasPrefix(m, l) {
				u.lanes[i] = m[:len(l)]
				if u.name == l {
					u.name = u.lanes[i]
				}
				break
			}
		}
	}
	return cats
}
