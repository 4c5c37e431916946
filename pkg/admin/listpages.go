package admin

import (
	"context"
	"slices"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// ListPageSize is how many partition keys one page of a listing reads: the COUNT of each
// SSCAN of a category's index, and so the bound of what a page holds in memory (its
// rows, and the replies of its round trips), whatever the number of partitions.
const ListPageSize = 1000

// globScanCount is the COUNT of each index scan step of a listing with a key pattern.
const globScanCount = 10 * ListPageSize

// EachPartition calls fn with the partitions the filter selects, one page at a time
// (about ListPageSize keys), and returns fn's first error. Memory is bounded by the page,
// not by the number of partitions: rows come category by category, each page sorted by
// key and handler, in the order the index scan returns the keys (not a total order; use
// ListPartitions and SortPartitions for one). A key can be listed twice when its index is
// resized during the scan (SCAN's guarantee).
//
// A filter that keeps only halted, paused or throttled partitions reads the candidates
// from the state indexes (keyspace.StateIndex) and the instance registry, not from the
// category's index: its cost follows the partitions in those states, not every
// partition. A category whose state indexes are not built yet (StateIndexBuilt) is read
// in full, so that no halt older than the index is missed.
func (a *Admin) EachPartition(ctx context.Context, f Filter, fn func([]Partition) error) error {
	if err := CheckKeyGlob(f.KeyGlob); err != nil {
		return err
	}
	cats, err := a.categories(ctx, f.Category)
	if err != nil {
		return err
	}
	for _, c := range cats {
		groups, err := a.groupsOf(ctx, c)
		if err != nil {
			return err
		}
		groups = slices.DeleteFunc(groups, func(g GroupTopology) bool { return f.Handler != "" && g.Name != f.Handler })
		if len(groups) == 0 {
			continue
		}
		if states := f.indexedStates(); states != nil {
			built, err := a.StateIndexBuilt(ctx, c)
			if err != nil {
				return err
			}
			if !built && f.OnUnindexed != nil {
				f.OnUnindexed(c)
			}
			if built {
				if err := a.eachIndexedPage(ctx, c, cats, groups, states, f, fn); err != nil {
					return err
				}
				continue
			}
		}
		if err := a.eachListedPage(ctx, c, groups, f, fn); err != nil {
			return err
		}
	}
	return nil
}

// eachListedPage lists every page of a category's index and calls fn with each page's
// partitions, in order. The next page is read while fn handles the last one (one page
// ahead, so memory stays two pages): the Redis round trips and the caller's work (JSON,
// aggregation) overlap instead of adding up.
func (a *Admin) eachListedPage(ctx context.Context, category string, groups []GroupTopology, f Filter, fn func([]Partition) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type page struct {
		ps  []Partition
		err error
	}
	pages := make(chan page, 1)
	go func() {
		defer close(pages)
		err := a.eachScanPage(ctx, category, f.KeyGlob, func(keys []string) error {
			ps, err := a.listPage(ctx, f, category, groups, keys)
			if err != nil || len(ps) == 0 {
				return err
			}
			select {
			case pages <- page{ps: ps}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if err != nil {
			pages <- page{err: err} // buffered: the reader drains it or has stopped reading
		}
	}()
	for p := range pages {
		if p.err != nil {
			return p.err
		}
		if err := fn(p.ps); err != nil {
			cancel()
			for range pages { // let the reader end
			}
			return err
		}
	}
	return nil
}

// eachScanPage calls fn with every page of a category's indexed keys (SSCAN, or HSCAN on
// Redis Cluster, of ListPageSize), those matching glob when it is not "" (Redis MATCH
// narrows the pages; the listing checks the pattern again). With a glob each SCAN step
// looks at globScanCount keys, since few of them match: the scan then takes a tenth of
// the round trips.
func (a *Admin) eachScanPage(ctx context.Context, category, glob string, fn func(keys []string) error) error {
	count := int64(ListPageSize)
	if glob != "" {
		count = globScanCount
	}
	var cursor uint64
	for {
		keys, next, err := a.keys.IndexScan(ctx, a.rdb, category, cursor, glob, count)
		if err != nil {
			return translate(err)
		}
		if len(keys) > 0 {
			if err := fn(keys); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// indexedStates returns the states the filter keeps when every one of them can be read
// from the state indexes and the instance registry (halted, paused, throttled), else nil.
func (f Filter) indexedStates() []State {
	states := f.States
	if f.Halted {
		if len(states) > 0 && !slices.Contains(states, StateHalted) {
			return []State{} // contradictory: nothing to read
		}
		states = []State{StateHalted}
	}
	if len(states) == 0 {
		return nil
	}
	for _, s := range states {
		if s != StateHalted && s != StatePaused && s != StateThrottled {
			return nil
		}
	}
	return states
}

// StateIndexBuilt reports whether a category's state indexes are complete: a rebuild
// (RebuildStateIndex) indexed the halts and pauses written before the engine kept them.
func (a *Admin) StateIndexBuilt(ctx context.Context, category string) (bool, error) {
	n, err := a.rdb.Exists(ctx, a.keys.StateIndexBuilt(category)).Result()
	if err != nil {
		return false, translate(err)
	}
	return n == 1, nil
}

// StateIndexRebuild is what RebuildStateIndex did to one category.
type StateIndexRebuild struct {
	Category string `json:"category"`
	Halted   int    `json:"halted"` // halted partitions indexed
	Paused   int    `json:"paused"` // paused partitions indexed
}

// RebuildStateIndex reads every partition of a category ("" for every category) in
// full, page by page, adds each halted and paused one to its state index, and then marks
// the category's index built, so that state filters read it from then on. Run it once
// after every engine instance runs a version that keeps the index: a halt written by an
// older instance afterwards would not be indexed.
func (a *Admin) RebuildStateIndex(ctx context.Context, category string) ([]StateIndexRebuild, error) {
	cats, err := a.categories(ctx, category)
	if err != nil {
		return nil, err
	}
	out := make([]StateIndexRebuild, 0, len(cats))
	for _, c := range cats {
		r := StateIndexRebuild{Category: c}
		err := a.EachPartition(ctx, Filter{Category: c}, func(ps []Partition) error {
			for _, p := range ps {
				if p.Halt != nil {
					if err := a.indexState(ctx, p, keyspace.IndexHalted); err != nil {
						return err
					}
					r.Halted++
				}
				if p.Pause != nil {
					if err := a.indexState(ctx, p, keyspace.IndexPaused); err != nil {
						return err
					}
					r.Paused++
				}
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		t, err := a.rdb.Time(ctx).Result()
		if err != nil {
			return out, translate(err)
		}
		if err := a.rdb.Set(ctx, a.keys.StateIndexBuilt(c), t.UnixMilli(), 0).Err(); err != nil {
			return out, translate(err)
		}
		out = append(out, r)
	}
	return out, nil
}
