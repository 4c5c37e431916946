package admin

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
)

// State is the state of one partition for one handler.
type State string

// The partition states, in the order they are decided:
const (
	// StateHalted: a halt record exists; the partition waits for an operator.
	StateHalted State = "halted"
	// StateUnowned: no live lease (no lease, or its owner's session expired); nothing
	// reads the partition until an instance takes it.
	StateUnowned State = "unowned"
	// StateRunning: owned, with entries pending or not yet delivered.
	StateRunning State = "running"
	// StateIdle: owned and caught up.
	StateIdle State = "idle"
)

func (s State) String() string { return string(s) }

// Partition is one partition as one handler sees it: one row of 'seqctl partitions list'.
type Partition struct {
	Category string `json:"category"`
	Key      string `json:"key"`
	// Stream is the primary stream, {category}:{key}.
	Stream string `json:"stream"`
	// Handler is the consumer group (handler or process manager name).
	Handler string `json:"handler"`
	// Owner is the live lease owner "{instance}.{incarnation}", "" when unowned.
	Owner string `json:"owner"`
	// Generation is the fencing generation of the live lease, 0 when unowned.
	Generation int64 `json:"generation"`
	// LeaseTTLMS is how long the owner's session (and so the lease) lives without another
	// heartbeat, in milliseconds; 0 when unowned.
	LeaseTTLMS int64 `json:"lease_ttl_ms"`
	// Lag is the number of entries not yet delivered to the handler, over every lane;
	// -1 when Redis cannot tell (entries were deleted inside the undelivered range).
	Lag int64 `json:"lag"`
	// Pending is the number of entries delivered but not acknowledged.
	Pending int64 `json:"pending"`
	// HeadAgeMS is the age of the head entry (the halted entry, else the oldest pending,
	// else the next undelivered) by Redis TIME, in milliseconds; 0 when caught up.
	HeadAgeMS int64 `json:"head_age_ms"`
	// State is halted, unowned, running or idle (see State).
	State State `json:"state"`
	// HaltedEntryID is the entry the partition halted on, "" when not halted.
	HaltedEntryID string `json:"halted_entry_id"`

	// ProcessManager is set when Handler is a sequential process manager; its lease
	// and halt record belong to the correlation value Key across its categories.
	ProcessManager bool `json:"-"`
	// Halt is the halt record, nil when not halted.
	Halt *engine.HaltRecord `json:"-"`
	// HeadID is the head entry id, "" when caught up.
	HeadID string `json:"-"`
	// Handled is how many entries the group has read and acknowledged on the current
	// lanes (entries-read minus pending): a counter for rates, reset when the partition is
	// reaped and re-created.
	Handled int64 `json:"-"`
}

// Filter selects partitions. The zero value selects every partition of every handler.
type Filter struct {
	Category string // only this category
	Handler  string // only this handler (consumer group)
	Halted   bool   // only halted partitions
	// Owner keeps partitions whose live owner is this session owner
	// ("{instance}.{incarnation}") or belongs to this instance id.
	Owner string
}

// SortBy orders partitions.
type SortBy string

// The orders of SortPartitions.
const (
	SortName SortBy = "name" // category, key, handler
	SortLag  SortBy = "lag"  // largest lag first, then name
	SortAge  SortBy = "age"  // oldest head first, then name
)

// SortPartitions sorts ps in place.
func SortPartitions(ps []Partition, by SortBy) {
	name := func(a, b Partition) int {
		return cmp.Or(cmp.Compare(a.Category, b.Category), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Handler, b.Handler))
	}
	slices.SortStableFunc(ps, func(a, b Partition) int {
		switch by {
		case SortLag:
			return cmp.Or(cmp.Compare(b.Lag, a.Lag), name(a, b))
		case SortAge:
			return cmp.Or(cmp.Compare(b.HeadAgeMS, a.HeadAgeMS), name(a, b))
		}
		return name(a, b)
	})
}

// scanCount is the COUNT hint of the SCAN for index keys: large, so that a keyspace of
// tens of thousands of keys is covered in a few round trips.
const scanCount = 10000

// categories returns the categories to list: the filter's, the topology's, or the
// categories of every *:__partitions__ index key.
func (a *Admin) categories(ctx context.Context, only string) ([]string, error) {
	if only != "" {
		if err := engine.ValidateCategory(only); err != nil {
			return nil, err
		}
		return []string{only}, nil
	}
	if a.opts.Topology != nil {
		out := make([]string, 0, len(a.opts.Topology.Categories))
		for _, c := range a.opts.Topology.Categories {
			out = append(out, c.Name)
		}
		return out, nil
	}
	suffix := engine.PartitionIndex("")
	seen := map[string]bool{}
	var out []string
	var cursor uint64
	for {
		keys, next, err := a.rdb.Scan(ctx, cursor, "*"+suffix, scanCount).Result()
		if err != nil {
			return nil, translate(err)
		}
		for _, k := range keys {
			c := strings.TrimSuffix(k, suffix)
			if c != k && !seen[c] && engine.ValidateCategory(c) == nil {
				seen[c] = true
				out = append(out, c)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.Sort(out)
	return out, nil
}

// laneCmds are the replies about one lane stream.
type laneCmds struct {
	stream string
	exists *redis.IntCmd         // backfill lanes in probe mode: read only when it exists
	groups *redis.XInfoGroupsCmd // nil for a probed lane that does not exist
	xlen   *redis.IntCmd         // read when a group has not been created on the lane
}

// laneState is one lane as one group sees it.
type laneState struct {
	lane          *laneCmds
	exists        bool
	hasGroup      bool
	lastDelivered string
	pending       int64
	lag           int64 // -1 unknown
}

// row is one (partition, group) being listed.
type row struct {
	p     Partition
	name  PartitionName
	group GroupTopology
	lanes []*laneCmds

	lease, pmLease *redis.StringCmd
	halt, pmHalt   *redis.MapStringStringCmd

	states []laneState
	owner  string
	gen    int64

	headPending  *redis.XPendingCmd
	headNext     *redis.XMessageSliceCmd
	headNextLane *laneState // the lane headNext reads
}

// ListPartitions lists every (handler, partition) pair the filter selects, sorted by
// category, key and handler. It costs a bounded number of pipelined round trips however
// many partitions there are: the index SCAN (none with a config or a category filter),
// one for the indexes and registries, one for every primary lane's groups and every
// lease and halt record, at most one more for backfill lanes and process-manager units
// when there are any, and one for session TTLs and head entries.
func (a *Admin) ListPartitions(ctx context.Context, f Filter) ([]Partition, error) {
	cats, err := a.categories(ctx, f.Category)
	if err != nil {
		return nil, err
	}
	out := []Partition{}
	if len(cats) == 0 {
		return out, nil
	}

	// Round trip 1: the indexes, the group registries and the server time.
	pipe := a.rdb.Pipeline()
	members := make([]*redis.StringSliceCmd, len(cats))
	registries := make([]*redis.StringSliceCmd, len(cats))
	for i, c := range cats {
		members[i] = pipe.SMembers(ctx, engine.PartitionIndex(c))
		if a.opts.Topology == nil {
			registries[i] = pipe.SMembers(ctx, engine.GroupRegistry(c))
		}
	}
	now := pipe.Time(ctx)
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	var rows []*row
	for i, c := range cats {
		var groups []GroupTopology
		if a.opts.Topology != nil {
			groups, _ = a.groupsOf(ctx, c)
		} else {
			names := registries[i].Val()
			slices.Sort(names)
			for _, n := range names {
				groups = append(groups, GroupTopology{Name: n})
			}
		}
		keys := members[i].Val()
		slices.Sort(keys)
		for _, k := range keys {
			if engine.ValidateKey(k, a.opts.BackfillSuffix) != nil {
				continue // never written by the publisher; the engine ignores it too
			}
			for _, g := range groups {
				if f.Handler != "" && g.Name != f.Handler {
					continue
				}
				name := PartitionName{Category: c, Key: k}
				rows = append(rows, &row{
					name: name, group: g,
					p: Partition{Category: c, Key: k, Stream: name.Stream(), Handler: g.Name, ProcessManager: g.ProcessManager},
				})
			}
		}
	}
	if len(rows) == 0 {
		return out, nil
	}

	// Round trip 2: each primary lane's groups (a backfill lane's too when lanes are on,
	// its existence when probing), each lease and halt record.
	pipe = a.rdb.Pipeline()
	laneByStream := map[string]*laneCmds{}
	strCmds := map[string]*redis.StringCmd{}
	hashCmds := map[string]*redis.MapStringStringCmd{}
	get := func(p redis.Pipeliner, key string) *redis.StringCmd {
		if c, ok := strCmds[key]; ok {
			return c
		}
		c := p.Get(ctx, key)
		strCmds[key] = c
		return c
	}
	hgetall := func(p redis.Pipeliner, key string) *redis.MapStringStringCmd {
		if c, ok := hashCmds[key]; ok {
			return c
		}
		c := p.HGetAll(ctx, key)
		hashCmds[key] = c
		return c
	}
	for _, r := range rows {
		for i, l := range a.lanes(r.name) {
			lc, ok := laneByStream[l]
			if !ok {
				lc = &laneCmds{stream: l}
				if i > 0 && a.opts.Lanes == LanesProbe {
					lc.exists = pipe.Exists(ctx, l)
				} else {
					lc.groups = pipe.XInfoGroups(ctx, l)
				}
				laneByStream[l] = lc
			}
			r.lanes = append(r.lanes, lc)
		}
		g := r.group.Name
		if r.group.ProcessManager {
			unit := engine.PMUnit(g, r.name.Key)
			r.pmLease, r.pmHalt = get(pipe, engine.LeaseKey(unit, g)), hgetall(pipe, engine.HaltKey(unit, g))
		} else {
			r.lease, r.halt = get(pipe, engine.LeaseKey(r.p.Stream, g)), hgetall(pipe, engine.HaltKey(r.p.Stream, g))
		}
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}

	// Round trip 3, only when needed: the groups of backfill lanes that exist, and,
	// without a config, the process-manager unit of every row that has neither a lease
	// nor a halt record of its own (see isPM for the rule).
	pipe = a.rdb.Pipeline()
	more := false
	for _, lc := range laneByStream {
		if lc.exists != nil && lc.exists.Val() == 1 {
			lc.groups, more = pipe.XInfoGroups(ctx, lc.stream), true
		}
	}
	if a.opts.Topology == nil {
		for _, r := range rows {
			if r.lease.Err() == redis.Nil && len(r.halt.Val()) == 0 {
				unit := engine.PMUnit(r.group.Name, r.name.Key)
				r.pmLease, r.pmHalt = get(pipe, engine.LeaseKey(unit, r.group.Name)), hgetall(pipe, engine.HaltKey(unit, r.group.Name))
				more = true
			}
		}
	}
	if more {
		if err := execTolerant(ctx, pipe); err != nil {
			return nil, err
		}
	}

	var kept []*row
	for _, r := range rows {
		a.resolveRow(r)
		if f.Halted && r.p.Halt == nil {
			continue
		}
		kept = append(kept, r)
	}
	rows = kept
	if len(rows) == 0 {
		return out, nil
	}

	// Round trip 4: session TTLs of the owners, the head entries and the length of lanes
	// a group has not read yet.
	pipe = a.rdb.Pipeline()
	ttls := map[string]*redis.DurationCmd{}
	for _, r := range rows {
		if r.owner != "" && ttls[r.owner] == nil {
			ttls[r.owner] = pipe.PTTL(ctx, engine.SessionKey(r.owner))
		}
		for _, l := range r.states {
			if l.exists && !l.hasGroup && l.lane.xlen == nil {
				l.lane.xlen = pipe.XLen(ctx, l.lane.stream)
			}
		}
		if r.p.Halt != nil {
			continue
		}
		for i := range r.states {
			l := &r.states[i]
			if l.pending > 0 {
				r.headPending = pipe.XPending(ctx, l.lane.stream, r.group.Name)
				break
			}
			if l.exists && (l.lag != 0 || !l.hasGroup) {
				start := "-"
				if l.hasGroup {
					start = "(" + l.lastDelivered
				}
				r.headNext, r.headNextLane = pipe.XRangeN(ctx, l.lane.stream, start, "+", 1), l
				break
			}
		}
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	nowMS := now.Val().UnixMilli()
	for _, r := range rows {
		p := &r.p
		// Nothing after the group's last-delivered id: the lane has no lag, whatever the
		// server's XINFO lag says (some servers, such as the embedded one of seqctl dev,
		// report the stream length there).
		if l := r.headNextLane; l != nil && l.hasGroup && l.lag > 0 && p.Lag >= l.lag &&
			r.headNext.Err() == nil && len(r.headNext.Val()) == 0 {
			p.Lag -= l.lag
		}
		for _, l := range r.states {
			switch {
			case !l.exists || l.hasGroup:
			case p.Lag < 0:
			default:
				p.Lag += l.lane.xlen.Val() // the group is created lazily: nothing was delivered
			}
		}
		if c := ttls[r.owner]; c != nil {
			switch ttl := c.Val(); {
			case c.Err() == nil && ttl > 0:
				p.Owner, p.Generation, p.LeaseTTLMS = r.owner, r.gen, ttl.Milliseconds()
			case c.Err() == nil && ttl == -1: // no expiry: not written by seqctl, but alive
				p.Owner, p.Generation = r.owner, r.gen
			}
		}
		switch {
		case p.Halt != nil:
			p.HeadID = p.Halt.EntryID
		case r.headPending != nil && r.headPending.Err() == nil:
			p.HeadID = r.headPending.Val().Lower
		case r.headNext != nil && len(r.headNext.Val()) > 0:
			p.HeadID = r.headNext.Val()[0].ID
		}
		if p.HeadID != "" {
			p.HeadAgeMS = max(nowMS-idMillis(p.HeadID), 0)
		}
		switch {
		case p.Halt != nil:
			p.State = StateHalted
		case p.Owner == "":
			p.State = StateUnowned
		case p.Lag != 0 || p.Pending > 0:
			p.State = StateRunning
		default:
			p.State = StateIdle
		}
		if f.Owner != "" && p.Owner != f.Owner && instanceOf(p.Owner) != f.Owner {
			continue
		}
		out = append(out, *p)
	}
	return out, nil
}

// resolveRow decides the unit (plain partition or process-manager correlation value),
// reads the lease and halt record, and sums the lanes it knows so far.
func (a *Admin) resolveRow(r *row) {
	lease, halt := r.lease, r.halt
	if r.pmLease != nil {
		pm := r.group.ProcessManager
		if !pm { // no config: a lease or halt record under the PM unit says it is one
			pm = r.pmLease.Err() == nil || len(r.pmHalt.Val()) > 0
		}
		if pm {
			lease, halt = r.pmLease, r.pmHalt
			r.p.ProcessManager = true
		}
	}
	if lease != nil && lease.Err() == nil {
		r.owner, r.gen = splitLease(lease.Val())
	}
	if halt != nil {
		r.p.Halt = haltFromHash(halt.Val())
	}
	if r.p.Halt != nil {
		r.p.HaltedEntryID = r.p.Halt.EntryID
	}
	for _, lc := range r.lanes {
		ls := laneState{lane: lc}
		if lc.groups != nil && lc.groups.Err() == nil {
			ls.exists = true // XINFO GROUPS answers only for an existing stream
			for _, g := range lc.groups.Val() {
				if g.Name == r.group.Name {
					ls.hasGroup, ls.lastDelivered, ls.pending, ls.lag = true, g.LastDeliveredID, g.Pending, g.Lag
					r.p.Handled += max(g.EntriesRead-g.Pending, 0)
				}
			}
		}
		r.states = append(r.states, ls)
		r.p.Pending += ls.pending
		switch {
		case r.p.Lag < 0:
		case ls.lag < 0:
			r.p.Lag = -1
		default:
			r.p.Lag += ls.lag
		}
	}
}

// Streams lists every indexed partition stream ({category}:{key}), sorted: the names
// the CLI completes. It costs the index SCAN (none with a config) and one round trip.
func (a *Admin) Streams(ctx context.Context) ([]string, error) {
	cats, err := a.categories(ctx, "")
	if err != nil {
		return nil, err
	}
	pipe := a.rdb.Pipeline()
	members := make([]*redis.StringSliceCmd, len(cats))
	for i, c := range cats {
		members[i] = pipe.SMembers(ctx, engine.PartitionIndex(c))
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	var out []string
	for i, c := range cats {
		for _, k := range members[i].Val() {
			if engine.ValidateKey(k, a.opts.BackfillSuffix) == nil {
				out = append(out, engine.PartitionStream(c, k))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
