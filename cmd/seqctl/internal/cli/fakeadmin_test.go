package cli

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// fakeAdmin is the Admin of the run tables: canned answers, recorded calls.
type fakeAdmin struct {
	partitions []admin.Partition
	listErr    error
	filter     admin.Filter
	listCalls  int
	onList     func(call int) // called after each ListPartitions

	inspection *admin.Inspection
	inspectErr error

	head     *admin.Head
	headErr  error
	handlers []string
	// heads, when set, are the heads Head answers, by stream (none: caught up); Head
	// then ignores head and headErr.
	heads map[string]*admin.Head

	actErr    error
	actErrs   map[string]error // the error Act returns for a stream, before actErr
	actions   []admin.Action
	records   []admin.AuditEntry
	recordErr error

	dlq        []admin.DLQEntry
	dlqErr     error
	plan       *admin.ReplayPlan
	planErr    error
	replay     *admin.ReplayResult
	replayErr  error
	audit      []admin.AuditEntry
	auditQuery admin.AuditQuery
	dlqs       []admin.DLQSummary
	purges     []string
	purgeErr   error
	replayed   []string
	streams    []string
	instances  []admin.Instance

	groups    []admin.Group
	groupsErr error
	removeErr error
	removals  []admin.GroupRemoval

	// pauseCalls are the Pause and Resume calls, in order; pauseErrs the error either
	// returns for a stream; pauseRecs the records PauseOf answers, by stream.
	pauseCalls []pauseCall
	pauseErrs  map[string]error
	pauseRecs  map[string]*engine.PauseRecord

	// handlerLimits is what HandlerLimits answers (nil: no config); limits the values
	// Limit and Limits answer; limitErrs the error Limit, SetLimit and ClearLimit return
	// for a value; limitCalls the SetLimit and ClearLimit calls, in order; limitQuery
	// what Limits was asked last.
	handlerLimits map[string]engine.HandlerLimit
	limits        []admin.Limit
	limitErrs     map[string]error
	limitCalls    []admin.LimitRequest
	limitActions  []string
	limitQuery    admin.LimitQuery
}

// pauseCall is one Pause or Resume of the fake admin.
type pauseCall struct {
	Action string
	Req    admin.PauseRequest
}

// opener opens f, and closes nothing.
func (f *fakeAdmin) opener() cmdutil.AdminOpener {
	return func(context.Context) (cmdutil.Admin, func(), error) { return f, func() {}, nil }
}

func (f *fakeAdmin) ListPartitions(_ context.Context, flt admin.Filter) ([]admin.Partition, error) {
	f.filter = flt
	f.listCalls++
	if len(flt.States) > 0 || flt.KeyGlob != "" || flt.Category != "" || flt.Handler != "" {
		var out []admin.Partition
		for _, p := range f.partitions {
			if ok, _ := path.Match(flt.KeyGlob, p.Key); (flt.KeyGlob == "" || ok) && (len(flt.States) == 0 || slices.Contains(flt.States, p.State)) &&
				(flt.Category == "" || p.Category == flt.Category) && (flt.Handler == "" || p.Handler == flt.Handler) {
				out = append(out, p)
			}
		}
		return out, f.listErr
	}
	if f.onList != nil {
		defer f.onList(f.listCalls)
	}
	return append([]admin.Partition(nil), f.partitions...), f.listErr
}

func (f *fakeAdmin) Inspect(context.Context, string, string) (*admin.Inspection, error) {
	return f.inspection, f.inspectErr
}

func (f *fakeAdmin) Head(_ context.Context, stream, handler string) (*admin.Head, error) {
	if f.heads != nil {
		if h := f.heads[stream]; h != nil {
			return h, nil
		}
		return nil, &admin.NotFoundError{What: "head", Name: "of " + stream + " for " + handler, Hint: "the handler is caught up"}
	}
	return f.head, f.headErr
}

func (f *fakeAdmin) Handlers(context.Context, string) ([]string, error) { return f.handlers, nil }

func (f *fakeAdmin) Act(_ context.Context, a admin.Action) (*admin.ActionResult, error) {
	f.actions = append(f.actions, a)
	if err := f.actErrs[a.Stream]; err != nil {
		return nil, err
	}
	if f.actErr != nil {
		return nil, f.actErr
	}
	r := &admin.ActionResult{Action: a.Kind, Stream: a.Stream, Handler: a.Handler, EntryID: a.ExpectID, Outcome: admin.OutcomeOK}
	if a.Kind == admin.ActionDLQ {
		r.DLQStream = a.Stream + ":dlq"
	}
	return r, nil
}

func (f *fakeAdmin) DLQ(context.Context, string) ([]admin.DLQEntry, error) { return f.dlq, f.dlqErr }

func (f *fakeAdmin) PlanReplay(context.Context, string, string) (*admin.ReplayPlan, error) {
	return f.plan, f.planErr
}

func (f *fakeAdmin) Replay(_ context.Context, _, id string, _ admin.Actor) (*admin.ReplayResult, error) {
	f.replayed = append(f.replayed, id)
	return f.replay, f.replayErr
}

func (f *fakeAdmin) Record(_ context.Context, e admin.AuditEntry) error {
	f.records = append(f.records, e)
	return f.recordErr
}

func (f *fakeAdmin) AuditEntries(_ context.Context, q admin.AuditQuery) ([]admin.AuditEntry, error) {
	f.auditQuery = q
	return f.audit, nil
}

func (f *fakeAdmin) DLQs(context.Context) ([]admin.DLQSummary, error) { return f.dlqs, nil }

func (f *fakeAdmin) PurgeDLQ(_ context.Context, stream, through string, _ admin.Actor) (*admin.PurgeResult, error) {
	f.purges = append(f.purges, through)
	if f.purgeErr != nil {
		return nil, f.purgeErr
	}
	return &admin.PurgeResult{Stream: stream, DLQStream: stream + ":dlq", Through: through, Removed: int64(len(f.dlq)), Outcome: admin.OutcomeOK}, nil
}

func (f *fakeAdmin) Streams(context.Context) ([]string, error) { return f.streams, nil }

func (f *fakeAdmin) Instances(context.Context) ([]admin.Instance, error) { return f.instances, nil }

func (f *fakeAdmin) Groups(context.Context, string) ([]admin.Group, error) {
	return append([]admin.Group(nil), f.groups...), f.groupsErr
}

func (f *fakeAdmin) RemoveGroup(_ context.Context, r admin.GroupRemoval) (*admin.GroupRemoved, error) {
	f.removals = append(f.removals, r)
	if f.removeErr != nil {
		return nil, f.removeErr
	}
	return &admin.GroupRemoved{Category: r.Category, Group: r.Group, DryRun: r.DryRun, Outcome: admin.OutcomeOK,
		GroupRetired: engine.GroupRetired{Partitions: 2, Read: *r.ExpectRead, Destroyed: 1, Halts: 1}}, nil
}

// Pause answers as the admin does: a record by alice@ops-1 since t0, until t0 + For.
func (f *fakeAdmin) Pause(_ context.Context, req admin.PauseRequest) (*admin.PauseResult, error) {
	f.pauseCalls = append(f.pauseCalls, pauseCall{admin.ActionPause, req})
	if err := f.pauseErrs[req.Stream]; err != nil {
		return nil, err
	}
	rec := &engine.PauseRecord{Reason: req.Reason, By: "alice@ops-1", Since: t0}
	if req.For > 0 {
		rec.Until = t0.Add(req.For)
	}
	_, replaced := f.pauseRecs[req.Stream]
	return &admin.PauseResult{Action: admin.ActionPause, Stream: req.Stream, Handler: req.Handler, Pause: rec, Replaced: replaced, Outcome: admin.OutcomeOK}, nil
}

func (f *fakeAdmin) Resume(_ context.Context, req admin.PauseRequest) (*admin.PauseResult, error) {
	f.pauseCalls = append(f.pauseCalls, pauseCall{admin.ActionResume, req})
	if err := f.pauseErrs[req.Stream]; err != nil {
		return nil, err
	}
	return &admin.PauseResult{Action: admin.ActionResume, Stream: req.Stream, Handler: req.Handler, Outcome: admin.OutcomeOK}, nil
}

func (f *fakeAdmin) PauseOf(_ context.Context, stream, _ string) (*engine.PauseRecord, error) {
	return f.pauseRecs[stream], nil
}

func (f *fakeAdmin) HandlerLimits() map[string]engine.HandlerLimit { return f.handlerLimits }

// Limit answers the value of f.limits, or one without an override, with the domain's
// caps of f.handlerLimits.
func (f *fakeAdmin) Limit(_ context.Context, handler, value string) (*admin.Limit, error) {
	if err := f.limitErrs[value]; err != nil {
		return nil, err
	}
	for _, l := range f.limits {
		if l.Handler == handler && l.Value == value {
			return &l, nil
		}
	}
	l := &admin.Limit{Handler: handler, Value: value}
	if hl, ok := f.handlerLimits[handler]; ok {
		caps := admin.CapsOf(hl)
		l.By, l.Default = hl.By, &caps
		l.Effective = admin.EffectiveCaps(l.Default, nil)
	}
	return l, nil
}

func (f *fakeAdmin) Limits(_ context.Context, q admin.LimitQuery) ([]admin.Limit, error) {
	f.limitQuery = q
	var out []admin.Limit
	for _, l := range f.limits {
		if (q.Handler == "" || l.Handler == q.Handler) && (l.Override != nil || q.Waiting && l.Waiting > 0) {
			out = append(out, l)
		}
	}
	return out, nil
}

// SetLimit answers as the admin does: an override by alice@ops-1 since t0.
func (f *fakeAdmin) SetLimit(ctx context.Context, req admin.LimitRequest) (*admin.LimitResult, error) {
	return f.limitAction(ctx, admin.ActionLimitSet, req)
}

func (f *fakeAdmin) ClearLimit(ctx context.Context, req admin.LimitRequest) (*admin.LimitResult, error) {
	return f.limitAction(ctx, admin.ActionLimitClear, req)
}

func (f *fakeAdmin) limitAction(ctx context.Context, action string, req admin.LimitRequest) (*admin.LimitResult, error) {
	f.limitCalls = append(f.limitCalls, req)
	f.limitActions = append(f.limitActions, action+" "+req.Handler+" "+req.Value)
	cur, err := f.Limit(ctx, req.Handler, req.Value)
	if err != nil {
		return nil, err
	}
	res := &admin.LimitResult{Action: action, Handler: req.Handler, Value: req.Value, Old: cur.Override, Default: cur.Default,
		Before: cur.Effective, Outcome: admin.OutcomeOK}
	if action == admin.ActionLimitSet {
		res.New = &engine.LimitOverride{Concurrency: req.Concurrency, Rate: req.Rate, Per: req.Per, Off: req.Off,
			Reason: req.Reason, By: "alice@ops-1", Since: t0}
	}
	res.After = admin.EffectiveCaps(res.Default, res.New)
	return res, nil
}

// Fixed data of the run tables.
var (
	t0       = time.Date(2025, 1, 31, 10, 0, 0, 0, time.UTC)
	t1       = t0.Add(5 * time.Minute)
	poisonID = "1738317600000-0"
)

func sampleHalt() *engine.HaltRecord {
	return &engine.HaltRecord{EntryID: poisonID, Stream: "order:client-1", Attempts: 3,
		Error: "projector: total must be positive\nat line 12", Since: t0, Owner: "worker-1.1", Generation: 7}
}

func samplePartitions() []admin.Partition {
	return []admin.Partition{
		{Category: "order", Key: "client-2", Stream: "order:client-2", Handler: "OrderProjector", Owner: "worker-2.1", Generation: 9,
			LeaseRemainingMS: 9000, Backlog: 121, Lag: 120, Pending: 1, HeadAgeMS: 1500, State: admin.StateRunning, HeadID: "1738317601000-0"},
		{Category: "order", Key: "client-1", Stream: "order:client-1", Handler: "OrderProjector", Owner: "worker-1.1", Generation: 7,
			LeaseRemainingMS: 12345, Backlog: 3, Lag: 0, Pending: 3, DLQ: 2, HeadAgeMS: 330000, State: admin.StateHalted, HaltedEntryID: poisonID,
			HeadID: poisonID, Halt: sampleHalt()},
		{Category: "order", Key: "client-3", Stream: "order:client-3", Handler: "OrderProjector", Owner: "worker-1.1", Generation: 8,
			LeaseRemainingMS: 14000, State: admin.StateIdle},
		{Category: "order", Key: "client-10", Stream: "order:client-10", Handler: "OrderProjector", Owner: "worker-2.1", Generation: 4,
			LeaseRemainingMS: 8000, Backlog: 0, State: admin.StateIdle},
		{Category: "payment", Key: "p-9", Stream: "payment:p-9", Handler: "Ledger", Backlog: -1, Lag: -1, HeadAgeMS: 2*86400000 + 3*3600000,
			State: admin.StateUnowned, HeadID: "1738000000000-0"},
	}
}

func sampleEnvelope() admin.Envelope {
	return admin.Envelope{ID: "7f1c9a52-3c1e-4b8e-9d0a-1b2c3d4e5f60", Type: "OrderPlaced", Category: "order", Key: "client-1",
		Data: json.RawMessage(`{"order_id":"o-17","client_id":"client-1","total":-5}`), PublishedAt: &t0}
}

func sampleHead() *admin.Head {
	return &admin.Head{Stream: "order:client-1", Handler: "OrderProjector", ID: poisonID, Lane: "order:client-1",
		Status: admin.HeadHalted, Attempts: 3, LastError: sampleHalt().Error, HaltedSince: &t0, AgeMS: 330000,
		IdleMS: 200000, Consumer: "worker-1.1:7", Envelope: sampleEnvelope()}
}

func sampleInspection() *admin.Inspection {
	h := sampleHead()
	return &admin.Inspection{
		Stream: "order:client-1", Category: "order", Key: "client-1", Indexed: true,
		Lanes: []admin.Lane{{Stream: "order:client-1", Kind: "primary", Exists: true, Length: 5, FirstID: "1738317500000-0", LastID: "1738317602000-0",
			Groups: []admin.LaneGroup{{Name: "OrderProjector", LastDeliveredID: "1738317602000-0", EntriesRead: 5, Lag: 0, Pending: 3, Consumers: 1}}}},
		DLQStream: "order:client-1:dlq", DLQLength: 2,
		Handlers: []admin.HandlerState{{
			Handler: "OrderProjector", Unit: "order:client-1", State: admin.StateHalted,
			Lease: &admin.Lease{Owner: "worker-1.1", Instance: "worker-1", Generation: 7, Live: true, RemainingMS: 12345},
			Halt:  sampleHalt(),
			Pending: []admin.PendingEntry{
				{ID: poisonID, Lane: "order:client-1", Consumer: "worker-1.1:7", Deliveries: 3, IdleMS: 200000},
				{ID: "1738317601000-0", Lane: "order:client-1", Consumer: "worker-1.1:7", Deliveries: 1, IdleMS: 330000},
			},
			PendingTotal: 2, Head: h,
		}},
	}
}

func sampleDLQ() []admin.DLQEntry {
	env := sampleEnvelope()
	return []admin.DLQEntry{{
		ID: "1738318000000-0", DLQStream: "order:client-1:dlq", OriginalID: poisonID, Handler: "OrderProjector",
		Lane: "order:client-1", Attempts: 3, Error: sampleHalt().Error, HaltedSince: &t0,
		MovedBy: "alice@ops-1", MovedAt: &t1, Reason: "OPS-42", Envelope: env,
	}}
}

func sampleAudit() []admin.AuditEntry {
	return []admin.AuditEntry{
		{ID: "1738317900000-0", Time: t1, User: "alice", RedisUser: "ops-acting", Host: "ops-1", Command: "head skip", Stream: "order:client-1",
			Handler: "OrderProjector", EntryID: "1-1", Outcome: admin.OutcomeHeadMoved, Detail: "engine: head moved: expected 1-1"},
		{ID: "1738318000000-0", Time: t1.Add(time.Minute), User: "alice", RedisUser: "ops-acting", Host: "ops-1", Command: "head dlq", Stream: "order:client-1",
			Handler: "OrderProjector", EntryID: poisonID, Outcome: admin.OutcomeOK, Reason: "OPS-42"},
	}
}

func sampleDLQs() []admin.DLQSummary {
	return []admin.DLQSummary{
		{Stream: "order:client-1", DLQStream: "order:client-1:dlq", Category: "order", Key: "client-1", Length: 2,
			OldestID: "1738318000000-0", NewestID: "1738318060000-0", OldestAgeMS: 3600000},
		{Stream: "order:client-10", DLQStream: "order:client-10:dlq", Category: "order", Key: "client-10", Length: 1,
			OldestID: "1738318100000-0", NewestID: "1738318100000-0", OldestAgeMS: 60000},
	}
}

func sampleGroups() []admin.Group {
	yes, no := true, false
	return []admin.Group{
		{Category: "order", Name: "Mailer", Registered: true, Declared: &no, Partitions: 20, Behind: 20, Unread: 517, Read: 83},
		{Category: "order", Name: "Projector", Registered: true, Declared: &yes, Partitions: 20, Read: 600, LiveLeases: 20, Pending: 1, Halted: 1},
		{Category: "payment", Name: "Ledger", Registered: false, Declared: &yes, Unread: -1},
	}
}
