package admin

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Inspection is everything about one partition: its lanes, each handler's lease, halt
// record, pending entries and head, and its DLQ length.
type Inspection struct {
	Stream   string `json:"stream"`
	Category string `json:"category"`
	Key      string `json:"key"`
	// Indexed says the partition is in its category's discovery index (the engine
	// only reads indexed partitions).
	Indexed   bool           `json:"indexed"`
	Lanes     []Lane         `json:"lanes"`
	DLQStream string         `json:"dlq_stream"`
	DLQLength int64          `json:"dlq_length"`
	Handlers  []HandlerState `json:"handlers"`
}

// Lane is one lane stream of a partition.
type Lane struct {
	Stream string `json:"stream"`
	// Kind is "primary" or "backfill".
	Kind    string      `json:"kind"`
	Exists  bool        `json:"exists"`
	Length  int64       `json:"length"`
	FirstID string      `json:"first_id"`
	LastID  string      `json:"last_id"`
	Groups  []LaneGroup `json:"groups"`
}

// LaneGroup is a consumer group's position in a lane.
type LaneGroup struct {
	Name            string `json:"name"`
	LastDeliveredID string `json:"last_delivered_id"`
	EntriesRead     int64  `json:"entries_read"`
	// Lag is the entries not yet delivered to the group, -1 when Redis cannot tell.
	Lag       int64 `json:"lag"`
	Pending   int64 `json:"pending"`
	Consumers int64 `json:"consumers"`
}

// Lease is an ownership lease.
type Lease struct {
	// Owner is the session owner "{instance}.{incarnation}"; Instance its instance id.
	Owner      string `json:"owner"`
	Instance   string `json:"instance"`
	Generation int64  `json:"generation"`
	// Live says the lease is held by a live owner (keyspace.Keys.LeaseLife, the engine's
	// rule): its owner's session exists, or on Redis Cluster the lease has an expiry of
	// its own that has not passed. A lease that is not live is void and will be taken by
	// the next instance that tries.
	Live bool `json:"live"`
	// RemainingMS is how long the lease stays live without a renewal, in milliseconds:
	// until its own expiry on Redis Cluster, else as long as its owner's session (0 when
	// not live, or when no expiry bounds it).
	RemainingMS int64 `json:"remaining_ms"`
}

// PendingEntry is an entry delivered to a handler and not acknowledged.
type PendingEntry struct {
	ID         string `json:"id"`
	Lane       string `json:"lane"`
	Consumer   string `json:"consumer"`
	Deliveries int64  `json:"deliveries"`
	IdleMS     int64  `json:"idle_ms"`
}

// HandlerState is one handler's view of a partition.
type HandlerState struct {
	Handler        string `json:"handler"`
	ProcessManager bool   `json:"process_manager"`
	// Unit is the lease unit: the partition stream, or the process manager's
	// correlation unit.
	Unit  string `json:"unit"`
	State State  `json:"state"`
	// LimitValue is the value of the handler's limit key whose permit the partition
	// waits for, when its state is throttled; absent otherwise.
	LimitValue string             `json:"limit_value,omitempty"`
	Lease      *Lease             `json:"lease"`
	Halt       *engine.HaltRecord `json:"halt"`
	// Pending lists up to MaxPendingShown pending entries per lane, oldest first;
	// PendingTotal counts them all.
	Pending      []PendingEntry `json:"pending"`
	PendingTotal int64          `json:"pending_total"`
	// Head is nil when the handler is caught up.
	Head *Head `json:"head"`
}

// MaxPendingShown bounds the pending entries listed per lane by Inspect.
const MaxPendingShown = 100

// Inspect describes a partition; handler "" means every handler of its category. It is
// a *NotFoundError when the partition has no lane, no DLQ and is not indexed.
func (a *Admin) Inspect(ctx context.Context, stream, handler string) (*Inspection, error) {
	p, err := a.ParseStream(stream)
	if err != nil {
		return nil, err
	}
	groups, err := a.inspectedGroups(ctx, p, handler)
	if err != nil {
		return nil, err
	}
	in := &Inspection{Stream: p.Stream(), Category: p.Category, Key: p.Key, Lanes: []Lane{}, Handlers: []HandlerState{}}
	if p.Key != "" {
		in.DLQStream = p.dlqStream()
	}
	anyLane, err := a.readLanes(ctx, p, in)
	if err != nil {
		return nil, err
	}
	if !anyLane && !in.Indexed && in.DLQLength == 0 {
		return nil, &NotFoundError{What: "partition", Name: p.Stream(),
			Hint: "no stream, no DLQ and not in " + a.keys.PartitionIndex(p.Category) + " (check the name with 'seqctl partitions list')"}
	}
	listed, err := a.listedRows(ctx, p, handler)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		hs, err := a.handlerState(ctx, p, g.Name, listed[g.Name], in.Lanes)
		if err != nil {
			return nil, err
		}
		in.Handlers = append(in.Handlers, hs)
	}
	return in, nil
}

// inspectedGroups returns the groups Inspect describes: every consumer group of the
// category, or the one handler asked for, once it is known to be one of them.
func (a *Admin) inspectedGroups(ctx context.Context, p PartitionName, handler string) ([]GroupTopology, error) {
	groups, err := a.groupsOf(ctx, p.Category)
	if err != nil {
		return nil, err
	}
	if handler == "" {
		return groups, nil
	}
	if _, err := a.ref(ctx, p, handler); err != nil {
		return nil, err
	}
	return []GroupTopology{{Name: handler}}, nil
}

// inspectedLane is the replies about one lane stream of an inspected partition.
type inspectedLane struct {
	stream, kind string
	exists, xlen *redis.IntCmd
	first, last  *redis.XMessageSliceCmd
	groups       *redis.XInfoGroupsCmd
}

// readLanes reads, in one pipelined round trip, every lane of the partition (whether it
// exists, its length, first and last entries and groups), whether the partition is
// indexed and its DLQ length, into in. It reports whether any lane exists.
func (a *Admin) readLanes(ctx context.Context, p PartitionName, in *Inspection) (anyLane bool, err error) {
	pipe := a.rdb.Pipeline()
	var lanes []inspectedLane
	for i, l := range a.lanes(p) {
		kind := "primary"
		if i > 0 {
			kind = "backfill"
		}
		lanes = append(lanes, inspectedLane{
			stream: l, kind: kind,
			exists: pipe.Exists(ctx, l), xlen: pipe.XLen(ctx, l),
			first: pipe.XRangeN(ctx, l, "-", "+", 1), last: pipe.XRevRangeN(ctx, l, "+", "-", 1),
			groups: pipe.XInfoGroups(ctx, l),
		})
	}
	var indexed *redis.BoolCmd
	var dlqLen *redis.IntCmd
	if p.Key != "" {
		indexed = a.indexed(ctx, pipe, p)
		dlqLen = pipe.XLen(ctx, in.DLQStream)
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return false, err
	}
	for _, lc := range lanes {
		l := lc.lane()
		if !l.Exists && l.Kind == "backfill" {
			continue // a lane that was never written is not worth a row
		}
		anyLane = anyLane || l.Exists
		in.Lanes = append(in.Lanes, l)
	}
	if indexed != nil {
		in.Indexed = indexed.Val()
	}
	if dlqLen != nil {
		in.DLQLength = dlqLen.Val()
	}
	return anyLane, nil
}

// lane is the Lane the replies describe.
func (lc inspectedLane) lane() Lane {
	l := Lane{Stream: lc.stream, Kind: lc.kind, Exists: lc.exists.Val() == 1, Length: lc.xlen.Val(), Groups: []LaneGroup{}}
	if m := lc.first.Val(); len(m) > 0 {
		l.FirstID = m[0].ID
	}
	if m := lc.last.Val(); len(m) > 0 {
		l.LastID = m[0].ID
	}
	for _, g := range lc.groups.Val() {
		l.Groups = append(l.Groups, LaneGroup{
			Name: g.Name, LastDeliveredID: g.LastDeliveredID, EntriesRead: g.EntriesRead,
			Lag: g.Lag, Pending: g.Pending, Consumers: g.Consumers,
		})
	}
	return l
}

// listedRows returns the row of the partition for each handler (for the one asked
// for, when one is), as ListPartitions lists it: the listing code is the one place that
// reads leases, halt records, lag and the throttled partitions together.
func (a *Admin) listedRows(ctx context.Context, p PartitionName, handler string) (map[string]Partition, error) {
	rows, err := a.ListPartitions(ctx, Filter{Category: p.Category, Handler: handler})
	if err != nil {
		return nil, err
	}
	states := map[string]Partition{}
	for _, r := range rows {
		if r.Key == p.Key {
			states[r.Handler] = r
		}
	}
	return states, nil
}

// handlerState describes one handler's view of the partition: the state listed (the
// zero row when the listing has none for it: unowned), and its lease, halt record,
// pending entries and head, read one after the other. lanes are the partition's lanes as
// read, for the pending total.
func (a *Admin) handlerState(ctx context.Context, p PartitionName, group string, listed Partition, lanes []Lane) (HandlerState, error) {
	ref, err := a.ref(ctx, p, group)
	if err != nil {
		return HandlerState{}, err
	}
	hs := HandlerState{Handler: group, ProcessManager: ref.ProcessManager, Unit: a.unit(ref), State: listed.State,
		LimitValue: listed.LimitValue, PendingTotal: pendingTotal(lanes, group)}
	if hs.State == "" {
		hs.State = StateUnowned
	}
	if hs.Lease, err = a.lease(ctx, ref); err != nil {
		return HandlerState{}, err
	}
	if hs.Halt, err = a.halt(ctx, ref); err != nil {
		return HandlerState{}, err
	}
	if hs.Halt != nil {
		hs.State, hs.LimitValue = StateHalted, ""
	}
	if hs.Pending, err = a.pendingEntries(ctx, p, group); err != nil {
		return HandlerState{}, err
	}
	if hs.Head, err = a.headOf(ctx, p, ref, hs.Halt); err != nil {
		return HandlerState{}, err
	}
	return hs, nil
}

// pendingEntries lists a group's pending entries, up to MaxPendingShown per lane, oldest
// first.
func (a *Admin) pendingEntries(ctx context.Context, p PartitionName, group string) ([]PendingEntry, error) {
	out := []PendingEntry{}
	for _, l := range a.lanes(p) {
		pe, err := a.pendingRange(ctx, l, group, "-", "+", MaxPendingShown)
		if err != nil {
			return nil, err
		}
		for _, e := range pe {
			out = append(out, PendingEntry{ID: e.ID, Lane: l, Consumer: e.Consumer, Deliveries: e.RetryCount, IdleMS: e.Idle.Milliseconds()})
		}
	}
	return out, nil
}

// pendingTotal counts a group's pending entries over the lanes.
func pendingTotal(lanes []Lane, group string) int64 {
	var n int64
	for _, l := range lanes {
		for _, lg := range l.Groups {
			if lg.Name == group {
				n += lg.Pending
			}
		}
	}
	return n
}

// lease reads the lease of a unit and its owner's session TTL; nil when there is none.
func (a *Admin) lease(ctx context.Context, ref engine.HeadRef) (*Lease, error) {
	pipe := a.rdb.Pipeline()
	c := a.queueLease(ctx, pipe, a.keys.LeaseKey(a.unit(ref), ref.Group))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, translate(err)
	}
	if !c.exists() {
		return nil, nil
	}
	var session *redis.DurationCmd
	if owner := c.owner(); owner != "" {
		session = a.rdb.PTTL(ctx, a.keys.SessionKey(owner))
		if err := session.Err(); err != nil {
			return nil, translate(err)
		}
	}
	life := a.leaseLife(c, session)
	lv, _ := keyspace.ParseLease(c.value.Val())
	return &Lease{Owner: lv.Owner, Instance: keyspace.InstanceOfOwner(lv.Owner), Generation: lv.Generation,
		Live: life.Live, RemainingMS: life.Remaining.Milliseconds()}, nil
}
