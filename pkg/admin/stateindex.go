package admin

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// indexedStateNames are the states kept in a state index, with their index names.
var indexedStateNames = map[State]string{StateHalted: keyspace.IndexHalted, StatePaused: keyspace.IndexPaused}

// eachIndexedPage lists the partitions of a category in the given states (halted,
// paused, throttled) from their candidates: the members of the category's state indexes
// (and a process manager's members of the other listed categories' indexes, since its
// halt and pause show on every category of its value), and the throttled units of the
// instance registry. Each candidate is read in full and kept only in a state the filter
// keeps, so an index that over-reports costs a read, never a wrong row; the members of
// the category's own indexes found without their record are pruned (stateprune.lua, past
// a grace period), as far as the user may write.
func (a *Admin) eachIndexedPage(ctx context.Context, category string, cats []string, groups []GroupTopology, states []State, f Filter, fn func([]Partition) error) error {
	if len(states) == 0 {
		return nil
	}
	keys, own, err := a.stateCandidates(ctx, category, cats, states)
	if err != nil {
		return err
	}
	if keys, err = a.indexedKeys(ctx, category, keys); err != nil {
		return err
	}
	// The rows are read without the state and owner filters, which apply below, so that
	// the rows of stale members are seen and pruned.
	pf := f
	pf.States, pf.Halted, pf.Owner = nil, false, ""
	held := map[string]bool{} // StateIndex name \x00 member, for the rows in that state
	for page := range slices.Chunk(keys, ListPageSize) {
		ps, err := a.listPage(ctx, pf, category, groups, page)
		if err != nil {
			return err
		}
		var kept []Partition
		for _, p := range ps {
			if p.Halt != nil {
				held[keyspace.IndexHalted+"\x00"+keyspace.StateMember(p.Key, p.Handler, p.ProcessManager)] = true
			}
			if p.Pause != nil {
				held[keyspace.IndexPaused+"\x00"+keyspace.StateMember(p.Key, p.Handler, p.ProcessManager)] = true
			}
			if (!f.Halted || p.Halt != nil) && f.keeps(&p) {
				kept = append(kept, p)
			}
		}
		if len(kept) > 0 {
			if err := fn(kept); err != nil {
				return err
			}
		}
	}
	a.pruneStateIndexes(ctx, category, own, held, f)
	return nil
}

// stateCandidates returns the sorted keys the state indexes and the registry name for a
// category in the given states, and the members of the category's own indexes by index
// name (what a prune may remove).
func (a *Admin) stateCandidates(ctx context.Context, category string, cats []string, states []State) ([]string, map[string][]string, error) {
	type read struct {
		cat, index string
		members    *redis.StringSliceCmd
	}
	var reads []read
	var registry *redis.MapStringStringCmd
	pipe := a.rdb.Pipeline()
	for _, st := range states {
		name, ok := indexedStateNames[st]
		if !ok {
			registry = pipe.HGetAll(ctx, a.keys.InstancesKey())
			continue
		}
		for _, c := range cats {
			reads = append(reads, read{c, name, pipe.ZRange(ctx, a.keys.StateIndex(c, name), 0, -1)})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, nil, translate(err)
	}
	seen := map[string]bool{}
	own := map[string][]string{}
	for _, r := range reads {
		for _, m := range r.members.Val() {
			key, _, pm, ok := keyspace.ParseStateMember(m)
			if !ok || (r.cat != category && !pm) {
				continue
			}
			if r.cat == category {
				own[r.index] = append(own[r.index], m)
			}
			seen[key] = true
		}
	}
	if registry != nil {
		for _, raw := range registry.Val() {
			info, err := keyspace.DecodeInstance(raw)
			if err != nil {
				continue
			}
			for _, t := range info.Throttled {
				if key := a.keyOfUnit(category, t.Group, t.Unit); key != "" {
					seen[key] = true
				}
			}
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, NaturalCompare)
	return keys, own, nil
}

// keyOfUnit returns the partition key of a lease unit of group in category: the key of
// the partition stream {category}:{key}, or a process manager's correlation value; ""
// for a unit of another category.
func (a *Admin) keyOfUnit(category, group, unit string) string {
	k := a.keys
	if rest, ok := strings.CutPrefix(unit, category+":"); ok {
		if key := strings.Trim(rest, "{}"); k.PartitionStream(category, key) == unit {
			return key
		}
	}
	if rest, ok := strings.CutPrefix(unit, strings.TrimSuffix(k.PMUnit(group, ""), "{}")); ok {
		if key := strings.Trim(rest, "{}"); k.PMUnit(group, key) == unit {
			return key
		}
	}
	return ""
}

// indexedKeys keeps the keys the category's discovery index holds (one pipelined round
// trip): a process manager's value may have no partition in this category.
func (a *Admin) indexedKeys(ctx context.Context, category string, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := a.rdb.Pipeline()
	has := make([]*redis.BoolCmd, len(keys))
	for i, k := range keys {
		has[i] = a.keys.IndexHas(ctx, pipe, category, k)
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	out := keys[:0]
	for i, k := range keys {
		if has[i].Val() {
			out = append(out, k)
		}
	}
	return out, nil
}

// pruneStateIndexes removes, from the category's own state indexes, the members whose
// record the listing did not find. Only a listing of every key and handler of the
// category may judge a member (a filtered one did not read them all). Best effort: a
// read-only user cannot write, and a stale member only costs the next reader a read.
func (a *Admin) pruneStateIndexes(ctx context.Context, category string, own map[string][]string, held map[string]bool, f Filter) {
	if f.KeyGlob != "" || f.Handler != "" {
		return
	}
	for name, members := range own {
		var stale []string
		for _, m := range members {
			if !held[name+"\x00"+m] {
				stale = append(stale, m)
			}
		}
		_, _ = scripts.StatePrune{Index: a.keys.StateIndex(category, name), Members: stale}.Run(ctx, a.rdb)
	}
}

// indexState adds a listed partition to a state index (keyspace.IndexHalted or
// IndexPaused), as the engine does before it writes the record.
func (a *Admin) indexState(ctx context.Context, p Partition, state string) error {
	c := scripts.StateIndex{Index: a.keys.StateIndex(p.Category, state), Member: keyspace.StateMember(p.Key, p.Handler, p.ProcessManager)}
	return translate(c.Run(ctx, a.rdb))
}
