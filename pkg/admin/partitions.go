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

	// Round trip 1: the indexes, the group registries and the server time.
	pipe := a.rdb.Pipeline()
	members := make([]*redis.StringSliceCmd, len(cats))
	registries := make([]*redis.StringSliceCmd, len(cats))
	for i, c := range cats {
		members[i] = a.keys.IndexMembers(ctx, pipe, c)
		if a.opts.Topology == nil {
			registries[i] = pipe.SMembers(ctx, a.keys.GroupRegistry(c))
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
		slices.SortFunc(keys, NaturalCompare)
		for _, k := range keys {
			if engine.ValidateStreamKey(k, a.opts.BackfillSuffix) != nil {
				continue // never written by the publisher; the engine ignores it too
			}
			if f.KeyGlob != "" {
				if ok, _ := path.Match(f.KeyGlob, k); !ok {
					continue
				}
			}
			for _, g := range groups {
				if f.Handler != "" && g.Name != f.Handler {
					continue
				}
				name := a.name(c, k)
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
			unit := a.keys.PMUnit(g, r.name.Key)
			r.pmLease, r.pmHalt = get(pipe, a.keys.LeaseKey(unit, g)), hgetall(pipe, a.keys.HaltKey(unit, g))
		} else {
			r.lease, r.halt = get(pipe, a.keys.LeaseKey(r.p.Stream, g)), hgetall(pipe, a.keys.HaltKey(r.p.Stream, g))
		}
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}

	// Round trip 3, only when needed: the groups of backfill lanes that exist, and,
	// without a config, the process-manager unit of every row that has no halt record of
	// its own (see isPM for the rule). A lease on the stream does not settle it: a
	// sequential process manager holds its streams' leases as guards of the correlation
	// value's lease.
	pipe = a.rdb.Pipeline()
	more := false
	for _, lc := range laneByStream {
		if lc.exists != nil && lc.exists.Val() == 1 {
			lc.groups, more = pipe.XInfoGroups(ctx, lc.stream), true
		}
	}
	if a.opts.Topology == nil {
		for _, r := range rows {
			if len(r.halt.Val()) == 0 {
				unit := a.keys.PMUnit(r.group.Name, r.name.Key)
				r.pmLease, r.pmHalt = get(pipe, a.keys.LeaseKey(unit, r.group.Name)), hgetall(pipe, a.keys.HaltKey(unit, r.group.Name))
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
	dlqs := map[string]*redis.IntCmd{}
	for _, r := range rows {
		if dlqs[r.p.Stream] == nil {
			dlqs[r.p.Stream] = pipe.XLen(ctx, r.name.dlqStream())
		}
		if r.owner != "" && ttls[r.owner] == nil {
			ttls[r.owner] = pipe.PTTL(ctx, a.keys.SessionKey(r.owner))
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
		p.DLQ = dlqs[p.Stream].Val() // 0 when there is no DLQ
		p.Backlog = -1
		if p.Lag >= 0 {
			p.Backlog = p.Lag + p.Pending
		}
		if c := ttls[r.owner]; c != nil {
			switch ttl := c.Val(); {
			case c.Err() == nil && ttl > 0:
				p.Owner, p.Generation, p.LeaseRemainingMS = r.owner, r.gen, ttl.Milliseconds()
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
		if len(f.States) > 0 && !slices.Contains(f.States, p.State) {
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
