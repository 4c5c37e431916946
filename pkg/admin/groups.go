package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
)

// Group is one consumer group of one category, as the group registry and the streams
// show it: one row of 'seqctl groups list'. Trim and reap wait for every registered
// group, so a registered group that nothing runs holds every entry it has not read.
type Group struct {
	Category string `json:"category"`
	// Name is the consumer group (handler or process manager name).
	Name string `json:"name"`
	// Registered says the group is in the category's registry ({category}:__groups__).
	Registered bool `json:"registered"`
	// Declared says whether the domain of --config declares the group on the category;
	// nil without a config.
	Declared *bool `json:"declared"`
	// Partitions is the number of partitions in the category's index.
	Partitions int `json:"partitions"`
	// Behind counts the partitions (and the category stream) holding entries the group
	// has not read or not acknowledged.
	Behind int `json:"behind"`
	// Unread is the number of entries not yet delivered to the group over the category's
	// streams; -1 when Redis cannot tell.
	Unread int64 `json:"unread"`
	// Pending is the number of entries delivered to the group and not acknowledged.
	Pending int64 `json:"pending"`
	// Read is the number of entries delivered to the group over the category's streams
	// (XINFO GROUPS entries-read, summed): the figure 'groups remove --expect-read'
	// compares.
	Read int64 `json:"read"`
	// LiveLeases counts the group's leases in the category held by a live owner
	// (keyspace.Keys.LeaseLife, the engine's rule): the handler is running.
	LiveLeases int `json:"live_leases"`
	// Halted counts the group's halted partitions in the category.
	Halted int `json:"halted"`
}

// groupLanes is one category's streams and the replies about them.
type groupLanes struct {
	category string
	keys     []string // valid partition keys, sorted
	registry []string
	declared []string
	// units[i] are the lanes of unit i: the category stream first, then each partition's
	// primary and backfill lanes.
	units  [][]string
	infos  map[string]*redis.XInfoGroupsCmd
	xlens  map[string]*redis.IntCmd
	groups []*groupRow
}

type groupRow struct {
	g      Group
	leases []leaseCmds
	halts  []*redis.IntCmd
}

// Groups lists the consumer groups of one category ("" for all): every group registered
// for it and every group the config declares on it, sorted by category and name, with
// how far each has read. Categories come from the registries (SCAN of
// *:__groups__) and the config. It costs the SCAN (none with a category) and three
// pipelined round trips however many partitions there are.
func (a *Admin) Groups(ctx context.Context, category string) ([]Group, error) {
	cats, err := a.groupCategories(ctx, category)
	if err != nil {
		return nil, err
	}
	out := []Group{}
	if len(cats) == 0 {
		return out, nil
	}
	regs, idxs, err := a.readRegistriesAndIndexes(ctx, cats)
	if err != nil {
		return nil, err
	}
	all, err := a.readGroupStreams(ctx, cats, regs, idxs)
	if err != nil {
		return nil, err
	}
	sessions, err := a.readLeaseSessions(ctx, all)
	if err != nil {
		return nil, err
	}
	for _, gl := range all {
		for _, r := range gl.groups {
			r.tally(a, gl, sessions)
			out = append(out, r.g)
		}
	}
	return out, nil
}

// readRegistriesAndIndexes is round trip 1: the group registry and the index of every
// category.
func (a *Admin) readRegistriesAndIndexes(ctx context.Context, cats []string) (regs, idxs []*redis.StringSliceCmd, err error) {
	pipe := a.rdb.Pipeline()
	regs = make([]*redis.StringSliceCmd, len(cats))
	idxs = make([]*redis.StringSliceCmd, len(cats))
	for i, c := range cats {
		regs[i] = pipe.SMembers(ctx, a.keys.GroupRegistry(c))
		idxs[i] = a.keys.IndexMembers(ctx, pipe, c)
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, nil, err
	}
	return regs, idxs, nil
}

// readGroupStreams is round trip 2: for every category, the groups and length of each of
// its streams, and every group's lease and halt record on each unit.
func (a *Admin) readGroupStreams(ctx context.Context, cats []string, regs, idxs []*redis.StringSliceCmd) ([]*groupLanes, error) {
	pipe := a.rdb.Pipeline()
	var all []*groupLanes
	for i, c := range cats {
		gl := a.newGroupLanes(c, regs[i].Val(), idxs[i].Val())
		for _, lanes := range gl.units {
			for _, l := range lanes {
				gl.infos[l] = pipe.XInfoGroups(ctx, l)
				gl.xlens[l] = pipe.XLen(ctx, l)
			}
		}
		a.queueGroupRows(ctx, pipe, gl)
		all = append(all, gl)
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	return all, nil
}

// newGroupLanes lays out a category's streams: the category stream, then the primary and
// backfill lanes of every valid key of its index, in key order.
func (a *Admin) newGroupLanes(category string, registry, index []string) *groupLanes {
	gl := &groupLanes{category: category, registry: registry, declared: a.opts.Declared[category],
		infos: map[string]*redis.XInfoGroupsCmd{}, xlens: map[string]*redis.IntCmd{}}
	for _, k := range index {
		if engine.ValidateStreamKey(k, a.opts.BackfillSuffix) == nil {
			gl.keys = append(gl.keys, k)
		}
	}
	slices.Sort(gl.keys)
	gl.units = append(gl.units, []string{a.keys.CategoryStream(category)})
	for _, k := range gl.keys {
		gl.units = append(gl.units, []string{a.keys.PartitionStream(category, k), a.keys.LaneStream(category, k, a.opts.BackfillSuffix)})
	}
	return gl
}

// queueGroupRows makes a row for every group registered or declared on the category, and
// queues the reads of its lease and halt record on every unit it may hold: the category
// stream, each partition stream and each process-manager unit of a key.
func (a *Admin) queueGroupRows(ctx context.Context, pipe redis.Pipeliner, gl *groupLanes) {
	c := gl.category
	names := append(slices.Clone(gl.registry), gl.declared...)
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		r := &groupRow{g: Group{Category: c, Name: n, Registered: slices.Contains(gl.registry, n), Partitions: len(gl.keys)}}
		if a.opts.Declared != nil {
			d := slices.Contains(gl.declared, n)
			r.g.Declared = &d
		}
		units := []string{a.keys.CategoryStream(c)}
		for _, k := range gl.keys {
			units = append(units, a.keys.PartitionStream(c, k), a.keys.PMUnit(n, k))
		}
		for _, u := range units {
			r.leases = append(r.leases, a.queueLease(ctx, pipe, a.keys.LeaseKey(u, n)))
			r.halts = append(r.halts, pipe.Exists(ctx, a.keys.HaltKey(u, n)))
		}
		gl.groups = append(gl.groups, r)
	}
}

// readLeaseSessions is round trip 3, sent only when a lease exists: the PTTL of each
// lease owner's session key.
func (a *Admin) readLeaseSessions(ctx context.Context, all []*groupLanes) (map[string]*redis.DurationCmd, error) {
	pipe := a.rdb.Pipeline()
	sessions := map[string]*redis.DurationCmd{}
	for _, gl := range all {
		for _, r := range gl.groups {
			for _, l := range r.leases {
				if owner := l.owner(); owner != "" {
					queueOnce(sessions, owner, func() *redis.DurationCmd { return pipe.PTTL(ctx, a.keys.SessionKey(owner)) })
				}
			}
		}
	}
	if len(sessions) > 0 {
		if err := execTolerant(ctx, pipe); err != nil {
			return nil, err
		}
	}
	return sessions, nil
}

// tally counts the group's live leases and halted units, and adds up, over the streams of
// every unit, what it has read, what is pending and what it has not read.
func (r *groupRow) tally(a *Admin, gl *groupLanes, sessions map[string]*redis.DurationCmd) {
	g := &r.g
	for _, l := range r.leases {
		if a.leaseLife(l, sessions[l.owner()]).Live {
			g.LiveLeases++
		}
	}
	for _, h := range r.halts {
		g.Halted += int(h.Val())
	}
	for _, lanes := range gl.units {
		behind := false
		for _, l := range lanes {
			behind = g.addLane(gl.infos[l], gl.xlens[l]) || behind
		}
		if behind {
			g.Behind++
		}
	}
}

// addLane adds what one stream's replies say of the group (entries read, pending, not
// read) and reports whether the group is behind on it. A stream that does not exist says
// nothing.
func (g *Group) addLane(info *redis.XInfoGroupsCmd, xlen *redis.IntCmd) (behind bool) {
	if info.Err() != nil {
		return false // no such stream
	}
	var grp *redis.XInfoGroup
	for i := range info.Val() {
		if info.Val()[i].Name == g.Name {
			grp = &info.Val()[i]
		}
	}
	unread := xlen.Val() // the group is created lazily: nothing was delivered
	if grp != nil {
		unread = grp.Lag
		g.Read += grp.EntriesRead
		g.Pending += grp.Pending
		behind = grp.Pending > 0
	}
	g.Unread = addCount(g.Unread, unread)
	return behind || unread != 0
}

// groupCategories returns the categories to list: the one asked for, or every category
// with a group registry, plus the config's.
func (a *Admin) groupCategories(ctx context.Context, only string) ([]string, error) {
	if only != "" {
		if err := engine.ValidateCategory(only); err != nil {
			return nil, err
		}
		return []string{only}, nil
	}
	declared := make([]string, 0, len(a.opts.Declared))
	for c := range a.opts.Declared {
		declared = append(declared, c)
	}
	return a.scanCategories(ctx, a.keys.GroupRegistry(""), declared)
}

// ErrGroupDeclared: the config still declares the group on the category. Remove the
// handler from the domain (and deploy that) before retiring its group, or an instance
// registers it again when its session opens.
var ErrGroupDeclared = errors.New("admin: the domain still declares the consumer group")

// Outcomes of 'groups remove' in the audit log, beside OutcomeOK, OutcomeRefused,
// OutcomeDeclined and OutcomeFailed.
const (
	OutcomeNotRegistered = "not_registered" // the group is not in the category's registry
	OutcomeLiveLease     = "live_lease"     // the group holds a live lease: it is running
	OutcomeReadMoved     = "read_moved"     // the group read entries since the operator looked
	OutcomeDeclared      = "declared"       // the config still declares the group
)

// groupOutcomes are the outcomes GroupOutcomeOf names beside those of OutcomeOf.
var groupOutcomes = []errOutcome{
	{engine.ErrGroupNotRegistered, OutcomeNotRegistered},
	{engine.ErrGroupLive, OutcomeLiveLease},
	{engine.ErrGroupRead, OutcomeReadMoved},
	{ErrGroupDeclared, OutcomeDeclared},
}

// GroupOutcomeOf names the audit outcome of a 'groups remove' error.
func GroupOutcomeOf(err error) string {
	if o, ok := outcomeIn(groupOutcomes, err); ok {
		return o
	}
	return OutcomeOf(err)
}

// GroupRemoval retires a consumer group from a category.
type GroupRemoval struct {
	Category string
	Group    string
	// ExpectRead is the Read figure the operator inspected (Group.Read); nothing changes
	// when the group has read a different number since. nil skips the comparison.
	ExpectRead *int64
	// DryRun checks everything, in Redis, and changes nothing (nor records anything).
	DryRun bool
	Reason string
	Actor  Actor
}

// GroupRemoved says what RemoveGroup did.
type GroupRemoved struct {
	Category string `json:"category"`
	Group    string `json:"group"`
	engine.GroupRetired
	DryRun bool `json:"dry_run,omitempty"`
	Done
}

// RemoveGroup retires a consumer group from a category so that trim and reap stop
// waiting for it: one compare-and-act script (engine.RedisBroker.RetireGroup) takes it out
// of the registry and destroys its consumer group on every stream of the category, and
// the attempt is appended to the audit log with its outcome, done or not.
//
// Errors, with nothing changed: ErrGroupDeclared when the config still declares it;
// engine.ErrGroupNotRegistered; engine.ErrGroupLive (a *engine.GroupLiveError) while a
// lease of the group in the category is held by a live session; engine.ErrGroupRead (a
// *engine.GroupReadError) when ExpectRead differs.
func (a *Admin) RemoveGroup(ctx context.Context, r GroupRemoval) (*GroupRemoved, error) {
	res := &GroupRemoved{Category: r.Category, Group: r.Group, DryRun: r.DryRun}
	err := a.removeGroup(ctx, r, res)
	res.Outcome = GroupOutcomeOf(err)
	if r.DryRun {
		if err != nil {
			return nil, err
		}
		return res, nil
	}
	rec := r.Actor.Entry()
	rec.Stream, rec.Handler = a.keys.CategoryStream(r.Category), r.Group
	rec.Outcome, rec.Reason = res.Outcome, r.Reason
	if r.ExpectRead != nil {
		rec.Detail = fmt.Sprintf("expected read %d", *r.ExpectRead)
	}
	if err == nil {
		rec.Detail = joinDetail(rec.Detail, fmt.Sprintf("read %d; consumer group destroyed on %d streams; %d halt records deleted; %d partitions",
			res.Read, res.Destroyed, res.Halts, res.Partitions))
	}
	return audited(ctx, a, rec, res, err)
}

func (r *GroupRemoved) done(auditErr error) {
	r.Done.warnUnaudited("the group was removed", auditErr)
}

func (a *Admin) removeGroup(ctx context.Context, r GroupRemoval, res *GroupRemoved) error {
	if err := engine.ValidateCategory(r.Category); err != nil {
		return err
	}
	if slices.Contains(a.opts.Declared[r.Category], r.Group) {
		return fmt.Errorf("%w: %s on %s; remove the handler from the domain (on every instance) first, or an instance registers it again when its session opens; nothing was changed",
			ErrGroupDeclared, r.Group, r.Category)
	}
	done, err := a.broker.RetireGroup(ctx, engine.GroupRetirement{
		Category: r.Category, Group: r.Group, BackfillSuffix: a.opts.BackfillSuffix,
		ExpectRead: r.ExpectRead, DryRun: r.DryRun,
	})
	if err != nil {
		return translate(err)
	}
	res.GroupRetired = done
	return nil
}
