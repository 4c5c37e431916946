package admin

import (
	"context"
	"path"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

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
	return a.scanCategories(ctx, a.keys.PartitionIndex(""), nil)
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

	unit, pmUnit unitCmds // pmUnit: the process-manager unit's, when it may be one

	states []laneState
	lease  leaseCmds // the unit's
	owner  string    // the owner the lease names, "" for none

	headPending  *redis.XPendingCmd
	headNext     *redis.XMessageSliceCmd
	headNextLane *laneState // the lane headNext reads
}

// partitionListing is one page of a listing on its way through its round trips: the
// rows it lists, and the replies rows share (a lane, a lease, a halt record, a DLQ or a
// session is read once however many rows need it).
type partitionListing struct {
	a *Admin
	f Filter

	rows   []*row
	now    *redis.TimeCmd                       // Redis TIME, for head ages
	lanes  map[string]*laneCmds                 // by lane stream
	leases map[string]leaseCmds                 // by lease key
	halts  map[string]*redis.MapStringStringCmd // by halt key, and pause records by pause key
	dlqs   map[string]*redis.IntCmd             // DLQ lengths, by primary stream
	ttls   map[string]*redis.DurationCmd        // session TTLs, by owner

	registry *redis.MapStringStringCmd // the instance registry, for the throttled partitions
}

// ListPartitions lists every (handler, partition) pair the filter selects, sorted by
// category, key and handler. It holds the whole list: at scale, EachPartition streams it
// in pages instead.
func (a *Admin) ListPartitions(ctx context.Context, f Filter) ([]Partition, error) {
	out := []Partition{}
	err := a.EachPartition(ctx, f, func(ps []Partition) error {
		out = append(out, ps...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	SortPartitions(out, SortName)
	return out, nil
}

// listPage lists the partitions of one page of a category's keys for the given groups:
// a bounded number of pipelined round trips however many keys the page has: one for
// every primary lane's groups, every lease and halt record, the server time and the
// instance registry; at most one more for backfill lanes and process-manager units when
// there are any; and one for session TTLs and head entries.
func (a *Admin) listPage(ctx context.Context, f Filter, category string, groups []GroupTopology, keys []string) ([]Partition, error) {
	l := &partitionListing{
		a: a, f: f,
		lanes: map[string]*laneCmds{}, leases: map[string]leaseCmds{}, halts: map[string]*redis.MapStringStringCmd{},
		dlqs: map[string]*redis.IntCmd{}, ttls: map[string]*redis.DurationCmd{},
	}
	l.addRows(category, groups, keys)
	if len(l.rows) == 0 {
		return nil, nil
	}
	if err := l.readLanesAndUnits(ctx); err != nil {
		return nil, err
	}
	if err := l.readBackfillAndPMUnits(ctx); err != nil {
		return nil, err
	}
	l.resolve()
	if len(l.rows) == 0 {
		return nil, nil
	}
	if err := l.readSessionsAndHeads(ctx); err != nil {
		return nil, err
	}
	return l.partitions(nil), nil
}

// addRows adds a row for every key of a category's index, in natural order, and every
// group, as far as the filter's key pattern and handler keep them.
func (l *partitionListing) addRows(category string, groups []GroupTopology, keys []string) {
	slices.SortFunc(keys, NaturalCompare)
	for _, k := range keys {
		if !l.keepsKey(k) {
			continue
		}
		for _, g := range groups {
			if l.f.Handler != "" && g.Name != l.f.Handler {
				continue
			}
			name := l.a.name(category, k)
			l.rows = append(l.rows, &row{
				name: name, group: g,
				p: Partition{Category: category, Key: k, Stream: name.Stream(), Handler: g.Name, ProcessManager: g.ProcessManager},
			})
		}
	}
}

// keepsKey reports whether an indexed key is listed: a valid partition key that the
// filter's key pattern matches.
func (l *partitionListing) keepsKey(k string) bool {
	if engine.ValidateStreamKey(k, l.a.opts.BackfillSuffix) != nil {
		return false // never written by the publisher; the engine ignores it too
	}
	if l.f.KeyGlob != "" {
		if ok, _ := path.Match(l.f.KeyGlob, k); !ok {
			return false
		}
	}
	return true
}

// readLanesAndUnits is the first round trip: each primary lane's groups (a backfill
// lane's too when lanes are on, its existence when probing), each lease and halt record,
// the server time and the instance registry.
func (l *partitionListing) readLanesAndUnits(ctx context.Context) error {
	pipe := l.a.rdb.Pipeline()
	l.now = pipe.Time(ctx)
	l.registry = pipe.HGetAll(ctx, l.a.keys.InstancesKey())
	for _, r := range l.rows {
		for i, stream := range l.a.lanes(r.name) {
			r.lanes = append(r.lanes, l.queueLane(ctx, pipe, stream, i > 0))
		}
		g := r.group.Name
		if r.group.ProcessManager {
			r.pmUnit = l.queueUnit(ctx, pipe, l.a.keys.PMUnit(g, r.name.Key), g)
		} else {
			r.unit = l.queueUnit(ctx, pipe, r.p.Stream, g)
		}
	}
	return execTolerant(ctx, pipe)
}

// queueLane queues the read of a lane stream's groups, once per stream; of a backfill
// lane in probe mode, only whether it exists (its groups follow in the next round trip).
func (l *partitionListing) queueLane(ctx context.Context, pipe redis.Pipeliner, stream string, backfill bool) *laneCmds {
	return queueOnce(l.lanes, stream, func() *laneCmds {
		lc := &laneCmds{stream: stream}
		if backfill && l.a.opts.Lanes == LanesProbe {
			lc.exists = pipe.Exists(ctx, stream)
		} else {
			lc.groups = pipe.XInfoGroups(ctx, stream)
		}
		return lc
	})
}

// unitCmds are the replies about one group's unit: its lease, halt and pause records.
type unitCmds struct {
	lease       leaseCmds
	halt, pause *redis.MapStringStringCmd
}

// queueUnit queues the reads of a group's lease, halt and pause records on a unit, once
// per key.
func (l *partitionListing) queueUnit(ctx context.Context, pipe redis.Pipeliner, unit, group string) unitCmds {
	k := l.a.keys
	leaseKey, haltKey, pauseKey := k.LeaseKey(unit, group), k.HaltKey(unit, group), k.PauseKey(unit, group)
	hgetall := func(key string) *redis.MapStringStringCmd {
		return queueOnce(l.halts, key, func() *redis.MapStringStringCmd { return pipe.HGetAll(ctx, key) })
	}
	return unitCmds{
		lease: queueOnce(l.leases, leaseKey, func() leaseCmds { return l.a.queueLease(ctx, pipe, leaseKey) }),
		halt:  hgetall(haltKey), pause: hgetall(pauseKey),
	}
}

// queueOnce returns the command queued for key, queueing it the first time it is asked
// for, so that rows sharing a key share its reply.
func queueOnce[C any](queued map[string]C, key string, queue func() C) C {
	if c, ok := queued[key]; ok {
		return c
	}
	c := queue()
	queued[key] = c
	return c
}

// readBackfillAndPMUnits is the second round trip, sent only when there is something to read: the
// groups of the backfill lanes that exist, and, without a config, the process-manager unit
// of every row that has no halt record of its own (see isPM for the rule). A lease on the
// stream does not settle it: a sequential process manager holds its streams' leases as
// guards of the correlation value's lease.
func (l *partitionListing) readBackfillAndPMUnits(ctx context.Context) error {
	pipe := l.a.rdb.Pipeline()
	more := false
	for _, lc := range l.lanes {
		if lc.exists != nil && lc.exists.Val() == 1 {
			lc.groups, more = pipe.XInfoGroups(ctx, lc.stream), true
		}
	}
	if l.a.opts.Topology == nil {
		for _, r := range l.rows {
			if len(r.unit.halt.Val()) == 0 {
				r.pmUnit = l.queueUnit(ctx, pipe, l.a.keys.PMUnit(r.group.Name, r.name.Key), r.group.Name)
				more = true
			}
		}
	}
	if !more {
		return nil
	}
	return execTolerant(ctx, pipe)
}

// resolve settles every row's unit, lease, halt record and lanes from the replies so far,
// and keeps only the halted rows when the filter asks for those.
func (l *partitionListing) resolve() {
	var kept []*row
	for _, r := range l.rows {
		r.resolveUnit()
		r.resolveLanes()
		if l.f.Halted && r.p.Halt == nil {
			continue
		}
		kept = append(kept, r)
	}
	l.rows = kept
}

// resolveUnit decides the unit (plain partition or process-manager correlation value)
// and reads its lease and halt record.
func (r *row) resolveUnit() {
	u := r.unit
	if r.pmUnit.lease.value != nil {
		pm := r.group.ProcessManager
		if !pm { // no config: a lease, halt or pause record under the PM unit says it is one
			pm = r.pmUnit.lease.exists() || len(r.pmUnit.halt.Val()) > 0 || len(r.pmUnit.pause.Val()) > 0
		}
		if pm {
			u = r.pmUnit
			r.p.ProcessManager = true
		}
	}
	r.lease, r.owner = u.lease, u.lease.owner()
	if u.halt != nil {
		r.p.Halt = keyspace.DecodeHalt(u.halt.Val())
		r.p.Pause = keyspace.DecodePause(u.pause.Val())
	}
	if r.p.Halt != nil {
		r.p.HaltedEntryID = r.p.Halt.EntryID
	}
}

// resolveLanes reads the group's position in each lane and sums the lanes it knows so
// far: pending, lag and handled.
func (r *row) resolveLanes() {
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
		r.p.Lag = addCount(r.p.Lag, ls.lag)
	}
}

// addCount adds n to sum, two counts in which -1 means unknown: an unknown sum stays
// unknown, and an unknown n makes it unknown.
func addCount(sum, n int64) int64 {
	switch {
	case sum < 0:
		return sum
	case n < 0:
		return -1
	}
	return sum + n
}

// readSessionsAndHeads is the last round trip: the length of each partition's DLQ, the session
// TTL of each lease owner, the length of the lanes a group has not been created on yet,
// and the head entry of each row that is not halted (a halt record names its head).
func (l *partitionListing) readSessionsAndHeads(ctx context.Context) error {
	pipe := l.a.rdb.Pipeline()
	for _, r := range l.rows {
		queueOnce(l.dlqs, r.p.Stream, func() *redis.IntCmd { return pipe.XLen(ctx, r.name.dlqStream()) })
		if r.owner != "" {
			queueOnce(l.ttls, r.owner, func() *redis.DurationCmd { return pipe.PTTL(ctx, l.a.keys.SessionKey(r.owner)) })
		}
		for _, ls := range r.states {
			if ls.exists && !ls.hasGroup && ls.lane.xlen == nil {
				ls.lane.xlen = pipe.XLen(ctx, ls.lane.stream)
			}
		}
		if r.p.Halt == nil {
			r.queueHead(ctx, pipe)
		}
	}
	return execTolerant(ctx, pipe)
}

// queueHead queues the read of the row's head, lane by lane: the oldest pending entry of
// a lane with entries pending, or the next entry of a lane with entries not delivered.
func (r *row) queueHead(ctx context.Context, pipe redis.Pipeliner) {
	for i := range r.states {
		ls := &r.states[i]
		if ls.pending > 0 {
			r.headPending = pipe.XPending(ctx, ls.lane.stream, r.group.Name)
			return
		}
		if ls.exists && (ls.lag != 0 || !ls.hasGroup) {
			start := "-"
			if ls.hasGroup {
				start = "(" + ls.lastDelivered
			}
			r.headNext, r.headNextLane = pipe.XRangeN(ctx, ls.lane.stream, start, "+", 1), ls
			return
		}
	}
}

// partitions completes every row with the replies of the last round trip and appends, to out,
// those whose owner and state the filter keeps.
func (l *partitionListing) partitions(out []Partition) []Partition {
	nowMS := l.now.Val().UnixMilli()
	throttled := l.throttled()
	for _, r := range l.rows {
		p := &r.p
		r.settleLag()
		p.DLQ = l.dlqs[p.Stream].Val() // 0 when there is no DLQ
		p.Backlog = -1
		if p.Lag >= 0 {
			p.Backlog = p.Lag + p.Pending
		}
		if life := l.a.leaseLife(r.lease, l.ttls[r.owner]); life.Live {
			p.Owner, p.Generation, p.LeaseRemainingMS = life.Lease.Owner, life.Lease.Generation, life.Remaining.Milliseconds()
		}
		r.settleHead(nowMS)
		if p.Owner != "" && p.Halt == nil && p.Pause == nil {
			p.LimitValue = throttled[p.Owner][l.unitOf(r)]
		}
		p.State = stateOf(p)
		if l.f.keeps(p) {
			out = append(out, *p)
		}
	}
	return out
}

// settleLag corrects the lag with what the last round trip read.
func (r *row) settleLag() {
	p := &r.p
	// Nothing after the group's last-delivered id: the lane has no lag, whatever the
	// server's XINFO lag says (some servers, such as the embedded one of seqctl dev,
	// report the stream length there).
	if ls := r.headNextLane; ls != nil && ls.hasGroup && ls.lag > 0 && p.Lag >= ls.lag &&
		r.headNext.Err() == nil && len(r.headNext.Val()) == 0 {
		p.Lag -= ls.lag
	}
	for _, ls := range r.states {
		if ls.exists && !ls.hasGroup {
			p.Lag = addCount(p.Lag, ls.lane.xlen.Val()) // the group is created lazily: nothing was delivered
		}
	}
}

// settleHead names the head entry (the halted entry, else the oldest pending, else the
// next undelivered) and its age by Redis TIME.
func (r *row) settleHead(nowMS int64) {
	p := &r.p
	switch {
	case p.Halt != nil:
		p.HeadID = p.Halt.EntryID
	case r.headPending != nil && r.headPending.Err() == nil:
		p.HeadID = r.headPending.Val().Lower
	case r.headNext != nil && len(r.headNext.Val()) > 0:
		p.HeadID = r.headNext.Val()[0].ID
	}
	if p.HeadID != "" {
		p.HeadAgeMS = max(nowMS-int64(keyspace.ParseStreamID(p.HeadID).MS), 0)
	}
}

// throttledUnits are the partitions the instances' registry entries list as waiting for a
// permit: by session owner, then by group and unit (throttledKey), the limit value.
type throttledUnits map[string]map[string]string

func throttledKey(group, unit string) string { return group + "\x00" + unit }

// throttled reads the throttled partitions of every registry entry read in the first round trip.
// An entry that does not decode lists none; whose session is live is the row's business:
// a partition is throttled only when its live lease names the entry's owner.
func (l *partitionListing) throttled() throttledUnits {
	out := throttledUnits{}
	for _, raw := range l.registry.Val() {
		info, err := keyspace.DecodeInstance(raw)
		if err != nil || info.Owner == "" || len(info.Throttled) == 0 {
			continue
		}
		units := make(map[string]string, len(info.Throttled))
		for _, t := range info.Throttled {
			units[throttledKey(t.Group, t.Unit)] = t.Value
		}
		out[info.Owner] = units
	}
	return out
}

// unitOf is the key of a row's lease unit among the throttled units.
func (l *partitionListing) unitOf(r *row) string {
	unit := r.p.Stream
	if r.p.ProcessManager {
		unit = l.a.keys.PMUnit(r.group.Name, r.name.Key)
	}
	return throttledKey(r.group.Name, unit)
}

// stateOf decides a partition's state, in the order the State constants list.
func stateOf(p *Partition) State {
	switch {
	case p.Halt != nil:
		return StateHalted
	case p.Pause != nil:
		return StatePaused
	case p.LimitValue != "":
		return StateThrottled
	case p.Owner == "":
		return StateUnowned
	case p.Lag != 0 || p.Pending > 0:
		return StateRunning
	}
	return StateIdle
}

// keeps reports whether the filter keeps a listed partition by its live owner and state
// (the rest of the filter applies earlier, before those are known).
func (f Filter) keeps(p *Partition) bool {
	if f.Owner != "" && p.Owner != f.Owner && keyspace.InstanceOfOwner(p.Owner) != f.Owner {
		return false
	}
	return len(f.States) == 0 || slices.Contains(f.States, p.State)
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
		members[i] = a.keys.IndexMembers(ctx, pipe, c)
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	var out []string
	for i, c := range cats {
		for _, k := range members[i].Val() {
			if engine.ValidateStreamKey(k, a.opts.BackfillSuffix) == nil {
				out = append(out, a.keys.PartitionStream(c, k))
			}
		}
	}
	slices.SortFunc(out, NaturalCompare)
	return out, nil
}
