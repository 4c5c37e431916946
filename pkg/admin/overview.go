package admin

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Overview is a bounded reading of every category for a dashboard: the partitions that
// need an operator in full, and the rest counted in Redis and sampled.
type Overview struct {
	// Partitions are every halted, paused and throttled partition, then, when Sampled, a
	// sample of the others (the first page of each category's index scan), else every
	// other partition.
	Partitions []Partition
	// Streams is the number of indexed partition keys over the categories, and Rows the
	// (handler, partition) pairs: each category's keys times its handlers. Both are
	// counted in Redis (SCARD of the indexes), never from Partitions.
	Streams, Rows int64
	// Sampled is set when Partitions holds only a sample of the partitions that are not
	// halted, paused or throttled: their states and backlogs are the sample's.
	Sampled bool
	// Unindexed lists the sampled categories whose state indexes are not built yet
	// (RebuildStateIndex): their halted and paused partitions are those the index knows,
	// which may miss a halt older than the index.
	Unindexed []string
}

// Overview reads the deployment for a dashboard at a bounded cost: when the categories
// hold at most limit rows (handler, partition) it lists them all, as ListPartitions
// does; above that it lists the halted, paused and throttled partitions from the state
// indexes and the instance registry, and samples the rest with the first page of each
// category's index scan, until about limit rows.
func (a *Admin) Overview(ctx context.Context, limit int) (*Overview, error) {
	cats, err := a.categories(ctx, "")
	if err != nil {
		return nil, err
	}
	ov := &Overview{}
	cs := make([]overviewCategory, len(cats))
	pipe := a.rdb.Pipeline()
	for i, c := range cats {
		cs[i] = overviewCategory{name: c, size: a.keys.IndexSize(ctx, pipe, c)}
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	for i := range cs {
		if cs[i].groups, err = a.groupsOf(ctx, cs[i].name); err != nil {
			return nil, err
		}
		ov.Streams += cs[i].size.Val()
		ov.Rows += cs[i].size.Val() * int64(len(cs[i].groups))
	}
	if ov.Rows <= int64(limit) {
		if err := a.EachPartition(ctx, Filter{}, ov.collect); err != nil {
			return nil, err
		}
		SortPartitions(ov.Partitions, SortName)
		return ov, nil
	}
	ov.Sampled = true
	listed, err := a.overviewOperatorStates(ctx, ov, cs, cats)
	if err != nil {
		return nil, err
	}
	if err := a.overviewSample(ctx, ov, cs, listed, limit); err != nil {
		return nil, err
	}
	return ov, nil
}

// overviewCategory is one category of an Overview: its groups and its index's size.
type overviewCategory struct {
	name   string
	groups []GroupTopology
	size   *redis.IntCmd
}

// collect adds a page of partitions to the overview.
func (ov *Overview) collect(ps []Partition) error {
	ov.Partitions = append(ov.Partitions, ps...)
	return nil
}

// overviewOperatorStates adds every halted, paused and throttled partition, from the state
// indexes (noting the categories whose index is not built), and returns them as
// "category\x00key".
func (a *Admin) overviewOperatorStates(ctx context.Context, ov *Overview, cs []overviewCategory, cats []string) (map[string]bool, error) {
	operator := []State{StateHalted, StatePaused, StateThrottled}
	listed := map[string]bool{}
	for _, c := range cs {
		if len(c.groups) == 0 {
			continue
		}
		built, err := a.StateIndexBuilt(ctx, c.name)
		if err != nil {
			return nil, err
		}
		if !built {
			ov.Unindexed = append(ov.Unindexed, c.name)
		}
		err = a.eachIndexedPage(ctx, c.name, cats, c.groups, operator, Filter{States: operator}, func(ps []Partition) error {
			for _, p := range ps {
				listed[p.Category+"\x00"+p.Key] = true
			}
			return ov.collect(ps)
		})
		if err != nil {
			return nil, err
		}
	}
	return listed, nil
}

// overviewSample adds a sample of the other partitions, a page of each category's index
// at most, until the overview holds limit rows.
func (a *Admin) overviewSample(ctx context.Context, ov *Overview, cs []overviewCategory, listed map[string]bool, limit int) error {
	for _, c := range cs {
		if len(ov.Partitions) >= limit || len(c.groups) == 0 {
			continue
		}
		keys, _, err := a.keys.IndexScan(ctx, a.rdb, c.name, 0, "", int64(min(ListPageSize, limit)))
		if err != nil {
			return translate(err)
		}
		var rest []string
		for _, k := range keys {
			if !listed[c.name+"\x00"+k] {
				rest = append(rest, k)
			}
		}
		ps, err := a.listPage(ctx, Filter{}, c.name, c.groups, rest)
		if err != nil {
			return err
		}
		ov.Partitions = append(ov.Partitions, ps...) // a halt the index missed shows here too
	}
	return nil
}

// Ping reports whether Redis answers a PING: a dashboard tells a slow refresh from an
// unreachable Redis with it.
func (a *Admin) Ping(ctx context.Context) error {
	return translate(a.rdb.Ping(ctx).Err())
}
