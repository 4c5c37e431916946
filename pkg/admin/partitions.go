package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path"
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
// Its JSON form (see MarshalJSON) carries every field, with null for a value that is
// absent (no owner, not halted, caught up) or unknown.
type Partition struct {
	Category string
	Key      string
	// Stream is the primary stream, {category}:{key}.
	Stream string
	// Handler is the consumer group (handler or process manager name).
	Handler string
	// Owner is the live lease owner "{instance}.{incarnation}", "" when unowned.
	Owner string
	// Generation is the fencing generation of the live lease, 0 when unowned.
	Generation int64
	// LeaseRemainingMS is how long the owner's session (and so the lease) lives without
	// another heartbeat, in milliseconds; 0 when unowned.
	LeaseRemainingMS int64
	// Backlog is the number of entries the handler has not handled yet: those not
	// delivered (Lag) plus those delivered and not acknowledged (Pending: the entry in
	// the handler, and the entries read ahead with it, or the halted head and everything
	// read behind it). -1 when Lag is unknown.
	Backlog int64
	// Lag is the number of entries not yet delivered to the handler, over every lane;
	// -1 when Redis cannot tell (entries were deleted inside the undelivered range).
	Lag int64
	// Pending is the number of entries delivered but not acknowledged.
	Pending int64
	// DLQ is the length of the partition's dead-letter stream {category}:{key}:dlq
	// (shared by every handler of the partition).
	DLQ int64
	// HeadAgeMS is the age of the head entry (the halted entry, else the oldest pending,
	// else the next undelivered) by Redis TIME, in milliseconds; 0 when caught up.
	HeadAgeMS int64
	// State is halted, unowned, running or idle (see State).
	State State
	// HaltedEntryID is the entry the partition halted on, "" when not halted.
	HaltedEntryID string

	// ProcessManager is set when Handler is a sequential process manager; its lease
	// and halt record belong to the correlation value Key across its categories.
	ProcessManager bool
	// Halt is the halt record, nil when not halted.
	Halt *engine.HaltRecord
	// HeadID is the head entry id, "" when caught up.
	HeadID string
	// Handled is how many entries the group has read and acknowledged on the current
	// lanes (entries-read minus pending): a counter for rates, reset when the partition is
	// reaped and re-created.
	Handled int64
}

// partitionJSON is the JSON form of a Partition. docs/json-output.md documents every
// field; keep the two in step.
type partitionJSON struct {
	Category         string             `json:"category"`
	Key              string             `json:"key"`
	Stream           string             `json:"stream"`
	Handler          string             `json:"handler"`
	ProcessManager   bool               `json:"process_manager"`
	State            State              `json:"state"`
	Owner            *string            `json:"owner"`
	Generation       *int64             `json:"generation"`
	LeaseRemainingMS *int64             `json:"lease_remaining_ms"`
	Backlog          *int64             `json:"backlog"`
	Lag              *int64             `json:"lag"`
	Pending          int64              `json:"pending"`
	DLQ              int64              `json:"dlq"`
	HeadID           *string            `json:"head_id"`
	HeadAgeMS        *int64             `json:"head_age_ms"`
	HaltedEntryID    *string            `json:"halted_entry_id"`
	Halt             *engine.HaltRecord `json:"halt"`
	Handled          int64              `json:"handled"`
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func knownOrNil(n int64) *int64 {
	if n < 0 {
		return nil
	}
	return &n
}

// MarshalJSON writes the partition with null for absent values: owner, generation and
// lease_remaining_ms when unowned; backlog and lag when unknown; head_id and head_age_ms
// when caught up; halted_entry_id and halt when not halted.
func (p Partition) MarshalJSON() ([]byte, error) {
	j := partitionJSON{
		Category: p.Category, Key: p.Key, Stream: p.Stream, Handler: p.Handler, ProcessManager: p.ProcessManager,
		State: p.State, Owner: strOrNil(p.Owner), Backlog: knownOrNil(p.Backlog), Lag: knownOrNil(p.Lag),
		Pending: p.Pending, DLQ: p.DLQ, HeadID: strOrNil(p.HeadID), HaltedEntryID: strOrNil(p.HaltedEntryID),
		Halt: p.Halt, Handled: p.Handled,
	}
	if p.Owner != "" {
		j.Generation, j.LeaseRemainingMS = &p.Generation, &p.LeaseRemainingMS
	}
	if p.HeadID != "" {
		j.HeadAgeMS = &p.HeadAgeMS
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes (null becomes the zero value, an unknown
// backlog or lag -1).
func (p *Partition) UnmarshalJSON(b []byte) error {
	var j partitionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	num := func(n *int64, none int64) int64 {
		if n == nil {
			return none
		}
		return *n
	}
	*p = Partition{
		Category: j.Category, Key: j.Key, Stream: j.Stream, Handler: j.Handler, ProcessManager: j.ProcessManager,
		State: j.State, Owner: deref(j.Owner), Generation: num(j.Generation, 0), LeaseRemainingMS: num(j.LeaseRemainingMS, 0),
		Backlog: num(j.Backlog, -1), Lag: num(j.Lag, -1), Pending: j.Pending, DLQ: j.DLQ, HeadID: deref(j.HeadID),
		HeadAgeMS: num(j.HeadAgeMS, 0), HaltedEntryID: deref(j.HaltedEntryID), Halt: j.Halt, Handled: j.Handled,
	}
	return nil
}

// Filter selects partitions. The zero value selects every partition of every handler.
type Filter struct {
	Category string // only this category
	Handler  string // only this handler (consumer group)
	Halted   bool   // only halted partitions
	// States keeps partitions in one of these states; empty keeps every state.
	States []State
	// KeyGlob keeps partitions whose key matches this path.Match pattern ("client-1*",
	// "eu-?-*"); "" keeps every key. Checked before anything else is read.
	KeyGlob string
	// Owner keeps partitions whose live owner is this session owner
	// ("{instance}.{incarnation}") or belongs to this instance id.
	Owner string
}

// ParseState parses a state name.
func ParseState(s string) (State, error) {
	switch st := State(s); st {
	case StateHalted, StateUnowned, StateRunning, StateIdle:
		return st, nil
	}
	return "", fmt.Errorf("unknown state %q: want running, idle, halted or unowned", s)
}

// CheckKeyGlob reports a malformed --key pattern.
func CheckKeyGlob(glob string) error {
	if _, err := path.Match(glob, ""); err != nil {
		return fmt.Errorf("invalid key pattern %q: %v (use * for any run of characters, ? for one, [a-z] for a class)", glob, err)
	}
	return nil
}

// SortBy orders partitions.
type SortBy string

// The orders of SortPartitions.
const (
	SortName    SortBy = "name"    // category, key, handler (keys in natural order)
	SortLag     SortBy = "lag"     // largest lag first, then name
	SortAge     SortBy = "age"     // oldest head first, then name
	SortBacklog SortBy = "backlog" // largest backlog first, then name
	SortDLQ     SortBy = "dlq"     // longest DLQ first, then name
)

// SortPartitions sorts ps in place. Names compare in natural order: the digit runs of
// a key compare as numbers, so client-2 comes before client-10.
func SortPartitions(ps []Partition, by SortBy) {
	name := func(a, b Partition) int {
		return cmp.Or(NaturalCompare(a.Category, b.Category), NaturalCompare(a.Key, b.Key), NaturalCompare(a.Handler, b.Handler))
	}
	slices.SortStableFunc(ps, func(a, b Partition) int {
		switch by {
		case SortLag:
			return cmp.Or(cmp.Compare(b.Lag, a.Lag), name(a, b))
		case SortAge:
			return cmp.Or(cmp.Compare(b.HeadAgeMS, a.HeadAgeMS), name(a, b))
		case SortBacklog:
			return cmp.Or(cmp.Compare(b.Backlog, a.Backlog), name(a, b))
		case SortDLQ:
			return cmp.Or(cmp.Compare(b.DLQ, a.DLQ), name(a, b))
		}
		return name(a, b)
	})
}

// NaturalCompare compares two strings as people read them: runs of ASCII digits compare
// by their numeric value (client-9 < client-10), everything else byte by byte. Equal
// numbers with different leading zeros order the shorter first, so the order is total.
func NaturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb), cmp.Compare(da, db)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitRun(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
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

	lease, pmLease *redis.StringCmd
	halt, pmHalt   *redis.MapStringStringCmd

	states []laneState
	owner  string
	gen    int64

	headPending  *redis.XPendingCmd
	headNext     *redis.XMessageSliceCmd
	headNextLane *laneState // the lane headNext reads
}

// partitionListing is one ListPartitions call on its way through its round trips: the
// rows it lists, and the replies rows share (a lane, a lease, a halt record, a DLQ or a
// session is read once however many rows need it).
type partitionListing struct {
	a *Admin
	f Filter

	rows   []*row
	now    *redis.TimeCmd                       // Redis TIME, for head ages
	lanes  map[string]*laneCmds                 // by lane stream
	leases map[string]*redis.StringCmd          // by lease key
	halts  map[string]*redis.MapStringStringCmd // by halt key
	dlqs   map[string]*redis.IntCmd             // DLQ lengths, by primary stream
	ttls   map[string]*redis.DurationCmd        // session TTLs, by owner
}

// ListPartitions lists every (handler, partition) pair the filter selects, sorted by
// category, key and handler. It costs a bounded number of pipelined round trips however
// many partitions there are: the index SCAN (none with a config or a category filter),
// one for the indexes and registries, one for every primary lane's groups and every
// lease and halt record, at most one more for backfill lanes and process-manager units
// when there are any, and one for session TTLs and head entries.
func (a *Admin) ListPartitions(ctx context.Context, f Filter) ([]Partition, error) {
	if err := CheckKeyGlob(f.KeyGlob); err != nil {
		return nil, err
	}
	cats, err := a.categories(ctx, f.Category)
	if err != nil {
		return nil, err
	}
	out := []Partition{}
	if len(cats) == 0 {
		return out, nil
	}
	l := &partitionListing{
		a: a, f: f,
		lanes: map[string]*laneCmds{}, leases: map[string]*redis.StringCmd{}, halts: map[string]*redis.MapStringStringCmd{},
		dlqs: map[string]*redis.IntCmd{}, ttls: map[string]*redis.DurationCmd{},
	}
	if err := l.readIndexes(ctx, cats); err != nil {
		return nil, err
	}
	if len(l.rows) == 0 {
		return out, nil
	}
	if err := l.readLanesAndUnits(ctx); err != nil {
		return nil, err
	}
	if err := l.readBackfillAndPMUnits(ctx); err != nil {
		return nil, err
	}
	l.resolve()
	if len(l.rows) == 0 {
		return out, nil
	}
	if err := l.readSessionsAndHeads(ctx); err != nil {
		return nil, err
	}
	return l.partitions(out), nil
}

// readIndexes is round trip 1: the indexes, the group registries (without a config) and
// the server time. It makes the rows: one per indexed key and group the filter keeps.
func (l *partitionListing) readIndexes(ctx context.Context, cats []string) error {
	a := l.a
	pipe := a.rdb.Pipeline()
	members := make([]*redis.StringSliceCmd, len(cats))
	registries := make([]*redis.StringSliceCmd, len(cats))
	for i, c := range cats {
		members[i] = a.keys.IndexMembers(ctx, pipe, c)
		if a.opts.Topology == nil {
			registries[i] = pipe.SMembers(ctx, a.keys.GroupRegistry(c))
		}
	}
	l.now = pipe.Time(ctx)
	if err := execTolerant(ctx, pipe); err != nil {
		return err
	}
	for i, c := range cats {
		l.addRows(c, l.groupsOf(ctx, c, registries[i]), members[i].Val())
	}
	return nil
}

// groupsOf returns the consumer groups of a category: the config's, else those of its
// registry (read in round trip 1), sorted by name.
func (l *partitionListing) groupsOf(ctx context.Context, category string, registry *redis.StringSliceCmd) []GroupTopology {
	if l.a.opts.Topology != nil {
		groups, _ := l.a.groupsOf(ctx, category)
		return groups
	}
	names := registry.Val()
	slices.Sort(names)
	var groups []GroupTopology
	for _, n := range names {
		groups = append(groups, GroupTopology{Name: n})
	}
	return groups
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

// readLanesAndUnits is round trip 2: each primary lane's groups (a backfill lane's too
// when lanes are on, its existence when probing), each lease and halt record.
func (l *partitionListing) readLanesAndUnits(ctx context.Context) error {
	pipe := l.a.rdb.Pipeline()
	for _, r := range l.rows {
		for i, stream := range l.a.lanes(r.name) {
			r.lanes = append(r.lanes, l.queueLane(ctx, pipe, stream, i > 0))
		}
		g := r.group.Name
		if r.group.ProcessManager {
			r.pmLease, r.pmHalt = l.queueUnit(ctx, pipe, l.a.keys.PMUnit(g, r.name.Key), g)
		} else {
			r.lease, r.halt = l.queueUnit(ctx, pipe, r.p.Stream, g)
		}
	}
	return execTolerant(ctx, pipe)
}

// queueLane queues the read of a lane stream's groups, once per stream; of a backfill
// lane in probe mode, only whether it exists (its groups follow in round trip 3).
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

// queueUnit queues the reads of a group's lease and halt record on a unit, once per key.
func (l *partitionListing) queueUnit(ctx context.Context, pipe redis.Pipeliner, unit, group string) (*redis.StringCmd, *redis.MapStringStringCmd) {
	leaseKey, haltKey := l.a.keys.LeaseKey(unit, group), l.a.keys.HaltKey(unit, group)
	lease := queueOnce(l.leases, leaseKey, func() *redis.StringCmd { return pipe.Get(ctx, leaseKey) })
	halt := queueOnce(l.halts, haltKey, func() *redis.MapStringStringCmd { return pipe.HGetAll(ctx, haltKey) })
	return lease, halt
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

// readBackfillAndPMUnits is round trip 3, sent only when there is something to read: the
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
			if len(r.halt.Val()) == 0 {
				r.pmLease, r.pmHalt = l.queueUnit(ctx, pipe, l.a.keys.PMUnit(r.group.Name, r.name.Key), r.group.Name)
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

// readSessionsAndHeads is round trip 4: the length of each partition's DLQ, the session
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

// partitions completes every row with the replies of round trip 4 and appends, to out,
// those whose owner and state the filter keeps.
func (l *partitionListing) partitions(out []Partition) []Partition {
	nowMS := l.now.Val().UnixMilli()
	for _, r := range l.rows {
		p := &r.p
		r.settleLag()
		p.DLQ = l.dlqs[p.Stream].Val() // 0 when there is no DLQ
		p.Backlog = -1
		if p.Lag >= 0 {
			p.Backlog = p.Lag + p.Pending
		}
		if c := l.ttls[r.owner]; c != nil && c.Err() == nil {
			if live, remainingMS := sessionLife(c.Val()); live {
				p.Owner, p.Generation, p.LeaseRemainingMS = r.owner, r.gen, remainingMS
			}
		}
		r.settleHead(nowMS)
		p.State = stateOf(p)
		if l.f.keeps(p) {
			out = append(out, *p)
		}
	}
	return out
}

// settleLag corrects the lag with what round trip 4 read.
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
		p.HeadAgeMS = max(nowMS-idMillis(p.HeadID), 0)
	}
}

// stateOf decides a partition's state, in the order the State constants list.
func stateOf(p *Partition) State {
	switch {
	case p.Halt != nil:
		return StateHalted
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
	if f.Owner != "" && p.Owner != f.Owner && instanceOf(p.Owner) != f.Owner {
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
