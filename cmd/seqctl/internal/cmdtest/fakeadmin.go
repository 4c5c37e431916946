package cmdtest

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

// FakeAdmin is the Admin of the run tables: canned answers, recorded calls.
type FakeAdmin struct {
	Partitions []admin.Partition
	ListErr    error
	Filter     admin.Filter
	ListCalls  int
	OnList     func(call int) // called after each ListPartitions
	Rebuilt    []string       // the categories of each RebuildStateIndex call
	PageErr    error          // EachPartition fails with it after its first page
	Unindexed  []string       // the categories EachPartition reports unindexed
	// OverviewSampled makes Overview say its partitions are a sample; PingErr is what
	// Ping answers.
	OverviewSampled bool
	PingErr         error

	Inspection *admin.Inspection
	InspectErr error

	HeadAnswer   *admin.Head
	HeadErr      error
	HandlerNames []string
	// Heads, when set, are the heads Head answers, by stream (none: caught up); Head
	// then ignores head and HeadErr.
	Heads map[string]*admin.Head

	ActErr    error
	ActErrs   map[string]error // the error Act returns for a stream, before ActErr
	Actions   []admin.Action
	Records   []admin.AuditEntry
	RecordErr error

	DLQEntries   []admin.DLQEntry
	DLQErr       error
	Plan         *admin.ReplayPlan
	PlanErr      error
	ReplayResult *admin.ReplayResult
	ReplayErr    error
	Audit        []admin.AuditEntry
	AuditQuery   admin.AuditQuery
	DLQSummaries []admin.DLQSummary
	purges       []string
	purgeErr     error
	Replayed     []string
	StreamList   []string
	InstanceList []admin.Instance

	GroupList []admin.Group
	GroupsErr error
	RemoveErr error
	removals  []admin.GroupRemoval

	// PauseCalls are the Pause and Resume calls, in order; PauseErrs the error either
	// returns for a stream; PauseRecs the records PauseOf answers, by stream.
	PauseCalls []pauseCall
	PauseErrs  map[string]error
	PauseRecs  map[string]*engine.PauseRecord

	// LimitsByHandler is what HandlerLimits answers (nil: no config); limits the values
	// Limit and Limits answer; LimitErrs the error Limit, SetLimit and ClearLimit return
	// for a value; LimitCalls the SetLimit and ClearLimit calls, in order; limitQuery
	// what Limits was asked last.
	LimitsByHandler map[string]engine.HandlerLimit
	LimitList       []admin.Limit
	LimitErrs       map[string]error
	LimitCalls      []admin.LimitRequest
	LimitActions    []string
	limitQuery      admin.LimitQuery
}

// pauseCall is one Pause or Resume of the fake admin.
type pauseCall struct {
	Action string
	Req    admin.PauseRequest
}

// Opener opens f, and closes nothing.
func (f *FakeAdmin) Opener() cmdutil.AdminOpener {
	return func(context.Context) (cmdutil.Admin, func(), error) { return f, func() {}, nil }
}

// EachPartition hands ListPartitions' answer over sorted by name, in pages of two rows,
// so that the run tables see the pages of a streamed listing.
func (f *FakeAdmin) EachPartition(ctx context.Context, flt admin.Filter, fn func([]admin.Partition) error) error {
	for _, c := range f.Unindexed {
		if flt.OnUnindexed != nil {
			flt.OnUnindexed(c)
		}
	}
	ps, err := f.ListPartitions(ctx, flt)
	if err != nil {
		return err
	}
	admin.SortPartitions(ps, admin.SortName)
	for page := range slices.Chunk(ps, 2) {
		if err := fn(page); err != nil {
			return err
		}
		if f.PageErr != nil {
			return f.PageErr
		}
	}
	return nil
}

// Overview answers every partition ListPartitions would, counted, sampled when
// OverviewSampled is set.
func (f *FakeAdmin) Overview(ctx context.Context, limit int) (*admin.Overview, error) {
	ps, err := f.ListPartitions(ctx, admin.Filter{})
	if err != nil {
		return nil, err
	}
	ov := &admin.Overview{Partitions: ps, Rows: int64(len(ps)), Sampled: f.OverviewSampled}
	keys := map[string]bool{}
	for _, p := range ps {
		keys[p.Stream] = true
	}
	ov.Streams = int64(len(keys))
	return ov, nil
}

// Ping answers PingErr.
func (f *FakeAdmin) Ping(context.Context) error { return f.PingErr }

// RebuildStateIndex records the call and rebuilds nothing.
func (f *FakeAdmin) RebuildStateIndex(_ context.Context, category string) ([]admin.StateIndexRebuild, error) {
	f.Rebuilt = append(f.Rebuilt, category)
	return []admin.StateIndexRebuild{{Category: category}}, nil
}

func (f *FakeAdmin) ListPartitions(_ context.Context, flt admin.Filter) ([]admin.Partition, error) {
	flt.OnUnindexed = nil // a function: the run tables compare the rest
	f.Filter = flt
	f.ListCalls++
	if len(flt.States) > 0 || flt.KeyGlob != "" || flt.Category != "" || flt.Handler != "" {
		var out []admin.Partition
		for _, p := range f.Partitions {
			if ok, _ := path.Match(flt.KeyGlob, p.Key); (flt.KeyGlob == "" || ok) && (len(flt.States) == 0 || slices.Contains(flt.States, p.State)) &&
				(flt.Category == "" || p.Category == flt.Category) && (flt.Handler == "" || p.Handler == flt.Handler) {
				out = append(out, p)
			}
		}
		return out, f.ListErr
	}
	if f.OnList != nil {
		defer f.OnList(f.ListCalls)
	}
	return append([]admin.Partition(nil), f.Partitions...), f.ListErr
}

func (f *FakeAdmin) Inspect(context.Context, string, string) (*admin.Inspection, error) {
	return f.Inspection, f.InspectErr
}

func (f *FakeAdmin) Head(_ context.Context, stream, handler string) (*admin.Head, error) {
	if f.Heads != nil {
		if h := f.Heads[stream]; h != nil {
			return h, nil
		}
		return nil, &admin.NotFoundError{What: "head", Name: "of " + stream + " for " + handler, Hint: "the handler is caught up"}
	}
	return f.HeadAnswer, f.HeadErr
}

func (f *FakeAdmin) Handlers(context.Context, string) ([]string, error) { return f.HandlerNames, nil }

func (f *FakeAdmin) Act(_ context.Context, a admin.Action) (*admin.ActionResult, error) {
	f.Actions = append(f.Actions, a)
	if err := f.ActErrs[a.Stream]; err != nil {
		return nil, err
	}
	if f.ActErr != nil {
		return nil, f.ActErr
	}
	r := &admin.ActionResult{Action: a.Kind, Stream: a.Stream, Handler: a.Handler, EntryID: a.ExpectID, Done: admin.Done{Outcome: admin.OutcomeOK}}
	if a.Kind == admin.ActionDLQ {
		r.DLQStream = a.Stream + ":dlq"
	}
	return r, nil
}

func (f *FakeAdmin) DLQ(context.Context, string) ([]admin.DLQEntry, error) {
	return f.DLQEntries, f.DLQErr
}

func (f *FakeAdmin) PlanReplay(context.Context, string, string) (*admin.ReplayPlan, error) {
	return f.Plan, f.PlanErr
}

func (f *FakeAdmin) Replay(_ context.Context, _, id string, _ admin.Actor) (*admin.ReplayResult, error) {
	f.Replayed = append(f.Replayed, id)
	return f.ReplayResult, f.ReplayErr
}

func (f *FakeAdmin) Record(_ context.Context, e admin.AuditEntry) error {
	f.Records = append(f.Records, e)
	return f.RecordErr
}

func (f *FakeAdmin) AuditEntries(_ context.Context, q admin.AuditQuery) ([]admin.AuditEntry, error) {
	f.AuditQuery = q
	return f.Audit, nil
}

func (f *FakeAdmin) DLQs(context.Context) ([]admin.DLQSummary, error) { return f.DLQSummaries, nil }

func (f *FakeAdmin) PurgeDLQ(_ context.Context, stream, through string, _ admin.Actor) (*admin.PurgeResult, error) {
	f.purges = append(f.purges, through)
	if f.purgeErr != nil {
		return nil, f.purgeErr
	}
	return &admin.PurgeResult{Stream: stream, DLQStream: stream + ":dlq", Through: through, Removed: int64(len(f.DLQEntries)), Outcome: admin.OutcomeOK}, nil
}

func (f *FakeAdmin) Streams(context.Context) ([]string, error) { return f.StreamList, nil }

func (f *FakeAdmin) Instances(context.Context) ([]admin.Instance, error) { return f.InstanceList, nil }

func (f *FakeAdmin) Groups(context.Context, string) ([]admin.Group, error) {
	return append([]admin.Group(nil), f.GroupList...), f.GroupsErr
}

func (f *FakeAdmin) RemoveGroup(_ context.Context, r admin.GroupRemoval) (*admin.GroupRemoved, error) {
	f.removals = append(f.removals, r)
	if f.RemoveErr != nil {
		return nil, f.RemoveErr
	}
	return &admin.GroupRemoved{Category: r.Category, Group: r.Group, DryRun: r.DryRun, Done: admin.Done{Outcome: admin.OutcomeOK},
		GroupRetired: engine.GroupRetired{Partitions: 2, Read: *r.ExpectRead, Destroyed: 1, Halts: 1}}, nil
}

// Pause answers as the admin does: a record by alice@ops-1 since T0, until T0 + For.
func (f *FakeAdmin) Pause(_ context.Context, req admin.PauseRequest) (*admin.PauseResult, error) {
	f.PauseCalls = append(f.PauseCalls, pauseCall{admin.ActionPause, req})
	if err := f.PauseErrs[req.Stream]; err != nil {
		return nil, err
	}
	rec := &engine.PauseRecord{Reason: req.Reason, By: "alice@ops-1", Since: T0}
	if req.For > 0 {
		rec.Until = T0.Add(req.For)
	}
	_, replaced := f.PauseRecs[req.Stream]
	return &admin.PauseResult{Action: admin.ActionPause, Stream: req.Stream, Handler: req.Handler, Pause: rec, Replaced: replaced, Done: admin.Done{Outcome: admin.OutcomeOK}}, nil
}

func (f *FakeAdmin) Resume(_ context.Context, req admin.PauseRequest) (*admin.PauseResult, error) {
	f.PauseCalls = append(f.PauseCalls, pauseCall{admin.ActionResume, req})
	if err := f.PauseErrs[req.Stream]; err != nil {
		return nil, err
	}
	return &admin.PauseResult{Action: admin.ActionResume, Stream: req.Stream, Handler: req.Handler, Done: admin.Done{Outcome: admin.OutcomeOK}}, nil
}

func (f *FakeAdmin) PauseOf(_ context.Context, stream, _ string) (*engine.PauseRecord, error) {
	return f.PauseRecs[stream], nil
}

func (f *FakeAdmin) HandlerLimits() map[string]engine.HandlerLimit { return f.LimitsByHandler }

// Limit answers the value of f.limits, or one without an override, with the domain's
// caps of f.LimitsByHandler.
func (f *FakeAdmin) Limit(_ context.Context, handler, value string) (*admin.Limit, error) {
	if err := f.LimitErrs[value]; err != nil {
		return nil, err
	}
	for _, l := range f.LimitList {
		if l.Handler == handler && l.Value == value {
			return &l, nil
		}
	}
	l := &admin.Limit{Handler: handler, Value: value}
	if hl, ok := f.LimitsByHandler[handler]; ok {
		caps := admin.CapsOf(hl)
		l.By, l.Default = hl.By, &caps
		l.Effective = admin.EffectiveCaps(l.Default, nil)
	}
	return l, nil
}

func (f *FakeAdmin) Limits(_ context.Context, q admin.LimitQuery) ([]admin.Limit, error) {
	f.limitQuery = q
	var out []admin.Limit
	for _, l := range f.LimitList {
		if (q.Handler == "" || l.Handler == q.Handler) && (l.Override != nil || q.Waiting && l.Waiting > 0) {
			out = append(out, l)
		}
	}
	return out, nil
}

// SetLimit answers as the admin does: an override by alice@ops-1 since T0.
func (f *FakeAdmin) SetLimit(ctx context.Context, req admin.LimitRequest) (*admin.LimitResult, error) {
	return f.limitAction(ctx, admin.ActionLimitSet, req)
}

func (f *FakeAdmin) ClearLimit(ctx context.Context, req admin.LimitRequest) (*admin.LimitResult, error) {
	return f.limitAction(ctx, admin.ActionLimitClear, req)
}

func (f *FakeAdmin) limitAction(ctx context.Context, action string, req admin.LimitRequest) (*admin.LimitResult, error) {
	f.LimitCalls = append(f.LimitCalls, req)
	f.LimitActions = append(f.LimitActions, action+" "+req.Handler+" "+req.Value)
	cur, err := f.Limit(ctx, req.Handler, req.Value)
	if err != nil {
		return nil, err
	}
	res := &admin.LimitResult{Action: action, Handler: req.Handler, Value: req.Value, Old: cur.Override, Default: cur.Default,
		Before: cur.Effective, Done: admin.Done{Outcome: admin.OutcomeOK}}
	if action == admin.ActionLimitSet {
		res.New = &engine.LimitOverride{Concurrency: req.Concurrency, Rate: req.Rate, Per: req.Per, Off: req.Off,
			Reason: req.Reason, By: "alice@ops-1", Since: T0}
	}
	res.After = admin.EffectiveCaps(res.Default, res.New)
	return res, nil
}

// Fixed data of the run tables.
var (
	T0       = time.Date(2025, 1, 31, 10, 0, 0, 0, time.UTC)
	T1       = T0.Add(5 * time.Minute)
	PoisonID = "1738317600000-0"
)

func sampleHalt() *engine.HaltRecord {
	return &engine.HaltRecord{EntryID: PoisonID, Stream: "order:client-1", Attempts: 3,
		Error: "projector: total must be positive\nat line 12", Since: T0, Owner: "worker-1.1", Generation: 7}
}

func SamplePartitions() []admin.Partition {
	return []admin.Partition{
		{Category: "order", Key: "client-2", Stream: "order:client-2", Handler: "OrderProjector", Owner: "worker-2.1", Generation: 9,
			LeaseRemainingMS: 9000, Backlog: 121, Lag: 120, Pending: 1, HeadAgeMS: 1500, State: admin.StateRunning, HeadID: "1738317601000-0"},
		{Category: "order", Key: "client-1", Stream: "order:client-1", Handler: "OrderProjector", Owner: "worker-1.1", Generation: 7,
			LeaseRemainingMS: 12345, Backlog: 3, Lag: 0, Pending: 3, DLQ: 2, HeadAgeMS: 330000, State: admin.StateHalted, HaltedEntryID: PoisonID,
			HeadID: PoisonID, Halt: sampleHalt()},
		{Category: "order", Key: "client-3", Stream: "order:client-3", Handler: "OrderProjector", Owner: "worker-1.1", Generation: 8,
			LeaseRemainingMS: 14000, State: admin.StateIdle},
		{Category: "order", Key: "client-10", Stream: "order:client-10", Handler: "OrderProjector", Owner: "worker-2.1", Generation: 4,
			LeaseRemainingMS: 8000, Backlog: 0, State: admin.StateIdle},
		{Category: "payment", Key: "p-9", Stream: "payment:p-9", Handler: "Ledger", Backlog: -1, Lag: -1, HeadAgeMS: 2*86400000 + 3*3600000,
			State: admin.StateUnowned, HeadID: "1738000000000-0"},
	}
}

func SampleEnvelope() admin.Envelope {
	return admin.Envelope{ID: "7f1c9a52-3c1e-4b8e-9d0a-1b2c3d4e5f60", Type: "OrderPlaced", Category: "order", Key: "client-1",
		Data: json.RawMessage(`{"order_id":"o-17","client_id":"client-1","total":-5}`), PublishedAt: &T0}
}

func SampleHead() *admin.Head {
	return &admin.Head{Stream: "order:client-1", Handler: "OrderProjector", ID: PoisonID, Lane: "order:client-1",
		Status: admin.HeadHalted, Attempts: 3, LastError: sampleHalt().Error, HaltedSince: &T0, AgeMS: 330000,
		IdleMS: 200000, Consumer: "worker-1.1:7", Envelope: SampleEnvelope()}
}

func SampleInspection() *admin.Inspection {
	h := SampleHead()
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
				{ID: PoisonID, Lane: "order:client-1", Consumer: "worker-1.1:7", Deliveries: 3, IdleMS: 200000},
				{ID: "1738317601000-0", Lane: "order:client-1", Consumer: "worker-1.1:7", Deliveries: 1, IdleMS: 330000},
			},
			PendingTotal: 2, Head: h,
		}},
	}
}

func SampleDLQ() []admin.DLQEntry {
	env := SampleEnvelope()
	return []admin.DLQEntry{{
		ID: "1738318000000-0", DLQStream: "order:client-1:dlq", OriginalID: PoisonID, Handler: "OrderProjector",
		Lane: "order:client-1", Attempts: 3, Error: sampleHalt().Error, HaltedSince: &T0,
		MovedBy: "alice@ops-1", MovedAt: &T1, Reason: "OPS-42", Envelope: env,
	}}
}

func SampleAudit() []admin.AuditEntry {
	return []admin.AuditEntry{
		{ID: "1738317900000-0", Time: T1, User: "alice", RedisUser: "ops-acting", Host: "ops-1", Command: "head skip", Stream: "order:client-1",
			Handler: "OrderProjector", EntryID: "1-1", Outcome: admin.OutcomeHeadMoved, Detail: "engine: head moved: expected 1-1"},
		{ID: "1738318000000-0", Time: T1.Add(time.Minute), User: "alice", RedisUser: "ops-acting", Host: "ops-1", Command: "head dlq", Stream: "order:client-1",
			Handler: "OrderProjector", EntryID: PoisonID, Outcome: admin.OutcomeOK, Reason: "OPS-42"},
	}
}

func SampleDLQs() []admin.DLQSummary {
	return []admin.DLQSummary{
		{Stream: "order:client-1", DLQStream: "order:client-1:dlq", Category: "order", Key: "client-1", Length: 2,
			OldestID: "1738318000000-0", NewestID: "1738318060000-0", OldestAgeMS: 3600000},
		{Stream: "order:client-10", DLQStream: "order:client-10:dlq", Category: "order", Key: "client-10", Length: 1,
			OldestID: "1738318100000-0", NewestID: "1738318100000-0", OldestAgeMS: 60000},
	}
}

func SampleGroups() []admin.Group {
	yes, no := true, false
	return []admin.Group{
		{Category: "order", Name: "Mailer", Registered: true, Declared: &no, Partitions: 20, Behind: 20, Unread: 517, Read: 83},
		{Category: "order", Name: "Projector", Registered: true, Declared: &yes, Partitions: 20, Read: 600, LiveLeases: 20, Pending: 1, Halted: 1},
		{Category: "payment", Name: "Ledger", Registered: false, Declared: &yes, Unread: -1},
	}
}

// SampleLimit is the limit key the tests' config gives OrderProjector.
var SampleLimit = engine.HandlerLimit{By: "tenant", Concurrency: 2, Rate: 20, Per: time.Second}

// LimitsAdmin is a fake admin whose config declares OrderProjector with a limit key (the
// only one) and Mailer without, and three values: acme with a raised override and
// partitions waiting, globex at the domain's caps with partitions waiting, internal
// with every cap off.
func LimitsAdmin() *FakeAdmin {
	def := admin.CapsOf(SampleLimit)
	starts14, starts20 := 14, 20
	return &FakeAdmin{
		LimitsByHandler: map[string]engine.HandlerLimit{"OrderProjector": SampleLimit},
		LimitList: []admin.Limit{
			{Handler: "OrderProjector", Value: "acme", By: "tenant", Default: &def,
				Override:  &engine.LimitOverride{Concurrency: 8, Reason: "acme import, OPS-7", By: "bob@ops-2", Since: T0},
				Effective: &admin.LimitCaps{Concurrency: 8, Rate: "20/s"},
				Use:       admin.LimitUsage{Held: 8, Starts: &starts14, Generation: 1738317600000123}, Waiting: 3},
			{Handler: "OrderProjector", Value: "globex", By: "tenant", Default: &def, Effective: &def,
				Use: admin.LimitUsage{Held: 2, Starts: &starts20, Generation: 1738317600000456}, Waiting: 5},
			{Handler: "OrderProjector", Value: "internal", By: "tenant", Default: &def,
				Override:  &engine.LimitOverride{Off: true, Reason: "our own backfill", By: "alice@ops-1", Since: T1},
				Effective: &admin.LimitCaps{Off: true}},
		},
	}
}
