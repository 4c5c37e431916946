package admin_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

// world is a running engine with order:A halted on a poison head, order:B drained, and
// a registered group "Mailer" that no instance runs.
type world struct {
	srv    *redistest.Server
	rdb    *redis.Client
	broker *engine.RedisBroker
	dom    *engine.Domain
	poison engine.Published
	first  engine.Published // order:A seq 0
}

func haltedWorld(t *testing.T) *world {
	t.Helper()
	srv := redistest.Start(t)
	w := &world{srv: srv, rdb: srv.Client(t)}
	w.broker = engine.NewRedisBroker(w.rdb)
	w.dom = orderDomain(t, poisonHandler(srv.Client(t)))
	// Registered before anything is published, so the owner's trim keeps its entries.
	if err := w.rdb.SAdd(context.Background(), engine.GroupRegistry("order"), "Mailer").Err(); err != nil {
		t.Fatal(err)
	}
	startEngine(t, srv, w.dom, "i1")
	for seq := 0; seq < 5; seq++ {
		p := publish(t, w.broker, w.dom, "A", seq, seq == 2)
		switch seq {
		case 0:
			w.first = p
		case 2:
			w.poison = p
		}
	}
	for seq := 0; seq < 3; seq++ {
		publish(t, w.broker, w.dom, "B", seq, false)
	}
	waitHalted(t, w.broker, "A")
	waitFor(t, 10*time.Second, "order:B drained", func() bool { return len(logOf(t, w.rdb, "B")) == 3 })
	return w
}

func TestListPartitions(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	if err := w.rdb.XAdd(ctx, &redis.XAddArgs{Stream: engine.DLQStream("order", "A"), Values: []any{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	var all []admin.Partition
	waitFor(t, 5*time.Second, "order:B acknowledged", func() bool {
		var err error
		all, err = adm.ListPartitions(ctx, admin.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range all {
			if p.Stream == "order:B" && p.Handler == "Projector" {
				return p.State == admin.StateIdle
			}
		}
		return false
	})
	type summary struct {
		Stream, Handler, State, Halted string
		Owned                          bool
		Backlog, DLQ                   int64
	}
	var got []summary
	for _, p := range all {
		got = append(got, summary{p.Stream, p.Handler, string(p.State), p.HaltedEntryID, p.Owner != "", p.Backlog, p.DLQ})
		if p.Backlog != p.Lag+p.Pending {
			t.Errorf("%s/%s: backlog %d, want lag %d + pending %d", p.Stream, p.Handler, p.Backlog, p.Lag, p.Pending)
		}
		if p.Owner != "" && (p.Generation <= 0 || p.LeaseRemainingMS <= 0 || !strings.HasPrefix(p.Owner, "i1.")) {
			t.Errorf("%s/%s: owner %q generation %d lease %d ms, want i1.N, a generation and a lease", p.Stream, p.Handler, p.Owner, p.Generation, p.LeaseRemainingMS)
		}
		if p.State == admin.StateHalted || p.State == admin.StateUnowned {
			if p.HeadAgeMS <= 0 && p.State == admin.StateUnowned {
				t.Errorf("%s/%s: head age %d, want > 0", p.Stream, p.Handler, p.HeadAgeMS)
			}
		}
	}
	want := []summary{
		{"order:A", "Mailer", "unowned", "", false, 5, 1},
		{"order:A", "Projector", "halted", w.poison.EntryID, true, 3, 1},
		{"order:B", "Mailer", "unowned", "", false, 3, 0},
		{"order:B", "Projector", "idle", "", true, 0, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("partitions (-want +got):\n%s", diff)
	}

	filters := []struct {
		name string
		f    admin.Filter
		want int
	}{
		{"halted", admin.Filter{Halted: true}, 1},
		{"handler", admin.Filter{Handler: "Mailer"}, 2},
		{"owner instance", admin.Filter{Owner: "i1"}, 2},
		{"owner session", admin.Filter{Owner: all[1].Owner}, 2},
		{"unknown owner", admin.Filter{Owner: "i9"}, 0},
		{"category", admin.Filter{Category: "order"}, 4},
		{"other category", admin.Filter{Category: "payment"}, 0},
		{"state unowned", admin.Filter{States: []admin.State{admin.StateUnowned}}, 2},
		{"states idle or halted", admin.Filter{States: []admin.State{admin.StateIdle, admin.StateHalted}}, 2},
		{"key glob", admin.Filter{KeyGlob: "[A]"}, 2},
		{"key glob and handler", admin.Filter{KeyGlob: "B*", Handler: "Projector"}, 1},
		{"key glob matching nothing", admin.Filter{KeyGlob: "client-*"}, 0},
	}
	for _, tt := range filters {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := adm.ListPartitions(ctx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != tt.want {
				t.Errorf("%+v: %d partitions, want %d: %+v", tt.f, len(ps), tt.want, ps)
			}
		})
	}

	halted, _ := adm.ListPartitions(ctx, admin.Filter{Halted: true})
	if h := halted[0].Halt; h == nil || h.Attempts != 2 || !strings.Contains(h.Error, "poison payload A/2") {
		t.Errorf("halt record = %+v, want 2 attempts and the handler's error", h)
	}
	if halted[0].HeadID != w.poison.EntryID || halted[0].HeadAgeMS <= 0 {
		t.Errorf("halted head = %s (age %d ms), want %s", halted[0].HeadID, halted[0].HeadAgeMS, w.poison.EntryID)
	}
}

func TestListPartitionsBadKeyGlob(t *testing.T) {
	srv := redistest.Start(t)
	_, err := admin.New(srv.Client(t), admin.Options{}).ListPartitions(context.Background(), admin.Filter{KeyGlob: "client-[1"})
	if err == nil || !strings.Contains(err.Error(), `invalid key pattern "client-[1"`) {
		t.Errorf("error = %v, want the bad pattern named", err)
	}
}

func TestInstances(t *testing.T) {
	w := haltedWorld(t)
	ins, err := admin.New(w.rdb, admin.Options{}).Instances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || ins[0].ID != "i1" || !strings.HasPrefix(ins[0].Owner, "i1.") || !ins[0].Live || ins[0].SessionTTLMS <= 0 ||
		ins[0].PID == 0 || ins[0].HeartbeatAt.IsZero() {
		t.Errorf("instances = %+v", ins)
	}
}

func TestSortPartitions(t *testing.T) {
	mixed := []admin.Partition{
		{Category: "order", Key: "b", Handler: "H", Lag: 1, HeadAgeMS: 50},
		{Category: "order", Key: "a", Handler: "H", Lag: 7, HeadAgeMS: 10},
		{Category: "billing", Key: "z", Handler: "H", Lag: 7, HeadAgeMS: 90},
	}
	// Names compare in natural order: client-2 before client-10.
	natural := []admin.Partition{
		{Category: "order", Key: "client-11", Handler: "H", Backlog: 1, DLQ: 0},
		{Category: "order", Key: "client-2", Handler: "H", Backlog: 9, DLQ: 3},
		{Category: "order", Key: "client-10", Handler: "H", Backlog: 5, DLQ: 0},
	}
	for _, tt := range []struct {
		ps   []admin.Partition
		by   admin.SortBy
		want []string
	}{
		{mixed, admin.SortName, []string{"billing:z", "order:a", "order:b"}},
		{mixed, admin.SortLag, []string{"billing:z", "order:a", "order:b"}},
		{mixed, admin.SortAge, []string{"billing:z", "order:b", "order:a"}},
		{natural, admin.SortName, []string{"order:client-2", "order:client-10", "order:client-11"}},
		{natural, admin.SortBacklog, []string{"order:client-2", "order:client-10", "order:client-11"}},
		{natural, admin.SortDLQ, []string{"order:client-2", "order:client-10", "order:client-11"}},
	} {
		// Each sort starts from the reverse of the name order, so no row is in place by chance.
		ps := slices.Clone(tt.ps)
		admin.SortPartitions(ps, admin.SortName)
		slices.Reverse(ps)
		admin.SortPartitions(ps, tt.by)
		var got []string
		for _, p := range ps {
			got = append(got, p.Category+":"+p.Key)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("sort by %s (-want +got):\n%s", tt.by, diff)
		}
	}
}

func TestListPartitionsWithConfig(t *testing.T) {
	w := haltedWorld(t)
	cfg, err := config.Parse("domain.toml", []byte(`name = "test"
[[events]]
name = "OrderPlaced"
category = "order"
fields = ["client_id", "seq", "poison"]
[[handlers]]
name = "Projector"
part_of = "order"
handles = ["OrderPlaced"]
sequential_by = "client_id"
`))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := admin.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := &admin.Topology{Categories: []admin.CategoryTopology{{Name: "order", Groups: []admin.GroupTopology{{Name: "Projector"}}}}}
	if diff := cmp.Diff(want, opts.Topology); diff != "" {
		t.Fatalf("topology (-want +got):\n%s", diff)
	}
	ps, err := admin.New(w.rdb, opts).ListPartitions(context.Background(), admin.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// Mailer is registered in Redis but not in the config: the config decides.
	if len(ps) != 2 || ps[0].Handler != "Projector" || ps[0].State != admin.StateHalted || ps[1].Handler != "Projector" {
		t.Errorf("partitions with a config = %+v, want order:A halted and order:B for Projector only", ps)
	}
}

func TestHeadAndInspect(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})

	h, err := adm.Head(ctx, "order:A", "Projector")
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != w.poison.EntryID || h.Status != admin.HeadHalted || h.Attempts != 2 || h.Lane != "order:A" ||
		!strings.Contains(h.LastError, "poison payload A/2") || h.HaltedSince == nil {
		t.Errorf("head = %+v, want the halted poison entry after 2 attempts with its error", h)
	}
	if h.Envelope.Type != "OrderPlaced" || h.Envelope.ID != w.poison.EventID || string(h.Envelope.Data) != `{"client_id":"A","seq":2,"poison":true}` {
		t.Errorf("head envelope = %+v", h.Envelope)
	}
	// Mailer never read: its head is the first entry, not delivered.
	h, err = adm.Head(ctx, "order:A", "Mailer")
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != w.first.EntryID || h.Status != admin.HeadUndelivered || h.Attempts != 0 {
		t.Errorf("Mailer head = %+v, want the first entry, undelivered", h)
	}
	// B is caught up for the Projector.
	waitFor(t, 5*time.Second, "order:B caught up", func() bool {
		_, err := adm.Head(ctx, "order:B", "Projector")
		return errors.Is(err, admin.ErrNotFound)
	})
	if _, err := adm.Head(ctx, "order:A", "Nobody"); !errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), "Mailer, Projector") {
		t.Errorf("unknown handler: err = %v, want not found naming the handlers", err)
	}
	var nf *admin.NotFoundError
	if _, err := adm.Head(ctx, "order:Z", "Projector"); !errors.As(err, &nf) || nf.What != "partition" {
		t.Errorf("head of an unknown partition: err = %v, want partition not found", err)
	}
	if _, err := adm.Head(ctx, "order:a:b:c", "Projector"); !errors.Is(err, admin.ErrInvalidStream) {
		t.Errorf("bad stream: err = %v, want ErrInvalidStream", err)
	}

	in, err := adm.Inspect(ctx, "order:A", "")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Indexed || len(in.Lanes) != 1 || in.Lanes[0].Length != 5 || in.DLQStream != "order:A:dlq" || len(in.Handlers) != 2 {
		t.Fatalf("inspection = %+v", in)
	}
	var proj admin.HandlerState
	for _, hs := range in.Handlers {
		if hs.Handler == "Projector" {
			proj = hs
		}
	}
	if proj.State != admin.StateHalted || proj.Halt == nil || proj.Lease == nil || !proj.Lease.Live || proj.Lease.Instance != "i1" ||
		proj.Head == nil || proj.Head.ID != w.poison.EntryID || proj.PendingTotal < 1 || int(proj.PendingTotal) != len(proj.Pending) ||
		proj.Pending[0].ID != w.poison.EntryID || proj.Pending[0].Deliveries != 2 {
		t.Errorf("Projector state = %+v", proj)
	}
	if _, err := adm.Inspect(ctx, "order:Z", ""); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("inspect of an unknown partition: err = %v, want not found", err)
	}
}

func TestActions(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	actor := admin.Actor{User: "ops", Host: "laptop", Command: "head skip"}
	act := func(kind admin.ActionKind, id string, force bool) error {
		_, err := adm.Act(ctx, admin.Action{Kind: kind, Stream: "order:A", Handler: "Projector", ExpectID: id, Force: force, Reason: "test", Actor: actor})
		return err
	}

	// A stale id changes nothing.
	var moved *engine.HeadMovedError
	if err := act(admin.ActionSkip, "1-1", false); !errors.As(err, &moved) || moved.Head != w.poison.EntryID {
		t.Fatalf("stale skip: err = %v, want HeadMovedError naming %s", err, w.poison.EntryID)
	}
	// Retry: the owner tries once more, fails, and halts again (3 attempts now).
	if err := act(admin.ActionRetry, w.poison.EntryID, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "halted again after the retry", func() bool {
		h, err := adm.Head(ctx, "order:A", "Projector")
		return err == nil && h.Status == admin.HeadHalted && h.Attempts == 3
	})
	// Move to the DLQ: the entry is copied with its error, the partition resumes.
	res, err := adm.Act(ctx, admin.Action{Kind: admin.ActionDLQ, Stream: "order:A", Handler: "Projector", ExpectID: w.poison.EntryID, Reason: "bad payload", Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if res.DLQStream != "order:A:dlq" || res.Outcome != admin.OutcomeOK {
		t.Errorf("dlq result = %+v", res)
	}
	waitFor(t, 10*time.Second, "order:A resumed", func() bool { return len(logOf(t, w.rdb, "A")) == 4 })
	dlq, err := adm.DLQ(ctx, "order:A")
	if err != nil {
		t.Fatal(err)
	}
	if len(dlq) != 1 || dlq[0].OriginalID != w.poison.EntryID || dlq[0].Handler != "Projector" || dlq[0].Attempts != 3 ||
		!strings.Contains(dlq[0].Error, "poison payload") || dlq[0].MovedBy != "ops@laptop" || dlq[0].Reason != "bad payload" ||
		dlq[0].MovedAt == nil || dlq[0].Lane != "order:A" || dlq[0].Envelope.ID != w.poison.EventID || dlq[0].Envelope.Fields != nil {
		t.Fatalf("DLQ = %+v", dlq)
	}
	// A head that is not halted is refused without force.
	if err := act(admin.ActionSkip, w.poison.EntryID, false); !errors.Is(err, engine.ErrHeadMoved) {
		t.Errorf("skip after the move: err = %v, want head moved (no head)", err)
	}

	// Replay: back at the tail, same event id, removed from the DLQ; it halts again.
	plan, err := adm.PlanReplay(ctx, "order:A", dlq[0].ID)
	if err != nil || plan.Stream != "order:A" {
		t.Fatalf("plan = %+v, %v", plan, err)
	}
	replayer := admin.Actor{User: "ops", Host: "laptop", Command: "dlq replay"}
	rr, err := adm.Replay(ctx, "order:A", dlq[0].ID, replayer)
	if err != nil {
		t.Fatal(err)
	}
	if !rr.Removed || rr.EventID != w.poison.EventID || rr.Stream != "order:A" || rr.EntryID <= w.poison.EntryID {
		t.Errorf("replay = %+v", rr)
	}
	if left, _ := adm.DLQ(ctx, "order:A"); len(left) != 0 {
		t.Errorf("DLQ after the replay = %+v, want empty", left)
	}
	waitFor(t, 10*time.Second, "halted on the replayed entry", func() bool {
		h, err := adm.Head(ctx, "order:A", "Projector")
		return err == nil && h.Status == admin.HeadHalted && h.ID == rr.EntryID
	})
	if _, err := adm.Replay(ctx, "order:A", dlq[0].ID, replayer); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("second replay: err = %v, want not found", err)
	}

	// Skip the replayed head now.
	if err := act(admin.ActionSkip, rr.EntryID, false); err != nil {
		t.Fatal(err)
	}

	// A pending head that is not halted (Mailer reads by hand) needs force.
	w.rdb.XGroupCreate(ctx, "order:B", "Mailer", "0")
	msgs := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "Mailer", Consumer: "x", Streams: []string{"order:B", ">"}, Count: 1}).Val()
	mid := msgs[0].Messages[0].ID
	mail := func(force bool) error {
		_, err := adm.Act(ctx, admin.Action{Kind: admin.ActionSkip, Stream: "order:B", Handler: "Mailer", ExpectID: mid, Force: force, Actor: actor})
		return err
	}
	if err := mail(false); !errors.Is(err, engine.ErrNotHalted) {
		t.Errorf("skip of a running head: err = %v, want ErrNotHalted", err)
	}
	if err := mail(true); err != nil {
		t.Errorf("forced skip: %v", err)
	}

	// Every attempt is in the audit log with its outcome.
	entries, err := adm.Audit(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range entries {
		outcomes = append(outcomes, e.Command+" "+e.Outcome)
		if e.User != "ops" || e.Host != "laptop" || e.Stream == "" || e.EntryID == "" || e.Time.IsZero() {
			t.Errorf("audit entry lacks fields: %+v", e)
		}
	}
	wantOutcomes := []string{
		"head skip head_moved", "head skip ok", "head skip ok", "head skip head_moved", "dlq replay ok", "dlq replay not_found",
		"head skip ok", "head skip not_halted", "head skip ok",
	}
	if diff := cmp.Diff(wantOutcomes, outcomes); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	if recent, _ := adm.Audit(ctx, time.Nanosecond); len(recent) >= len(entries) {
		t.Errorf("--since 1ns returned %d of %d entries", len(recent), len(entries))
	}
}

func TestProcessManagerDetection(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	d := engine.NewDomain("pm").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "poison"}}).
		AddEvent(engine.EventType{Name: "PaymentConfirmed", Category: "payment", Fields: []string{"order_ref"}}).
		AddProcessManager(engine.ProcessManager{Name: "Fulfillment", SequentialBy: true, MaxRetries: 1, RetryDelay: 10 * time.Millisecond,
			Func: func(ctx context.Context, ev engine.Event) error {
				if strings.Contains(string(ev.Data), "poison") {
					return errors.New("poison")
				}
				return nil
			},
			Handles: []engine.PMHandle{
				{Event: "OrderPlaced", Correlate: engine.Correlate{PMField: "order_id", EventField: "order_id"}, Start: true},
				{Event: "PaymentConfirmed", Correlate: engine.Correlate{PMField: "order_id", EventField: "order_ref"}},
			}})
	if err := d.Init(engine.NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	startEngine(t, srv, d, "i1")
	b := engine.NewRedisBroker(rdb)
	ctx := context.Background()
	if _, err := b.Publish(ctx, d, "PaymentConfirmed", []byte(`{"order_ref":"o-1"}`), engine.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	bad, err := b.Publish(ctx, d, "OrderPlaced", []byte(`{"order_id":"o-1","poison":true}`), engine.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	adm := admin.New(rdb, admin.Options{})
	var ps []admin.Partition
	waitFor(t, 10*time.Second, "the correlation value halted", func() bool {
		ps, err = adm.ListPartitions(ctx, admin.Filter{Halted: true})
		return err == nil && len(ps) == 2
	})
	for _, p := range ps {
		if !p.ProcessManager || p.HaltedEntryID != bad.EntryID || p.Owner == "" {
			t.Errorf("%s: %+v, want a process-manager row halted on %s with an owner", p.Stream, p, bad.EntryID)
		}
	}
	// The same from a topology (a config), without detection.
	pmGroups := []admin.GroupTopology{{Name: "Fulfillment", ProcessManager: true}}
	withTopo := admin.New(rdb, admin.Options{Topology: &admin.Topology{Categories: []admin.CategoryTopology{
		{Name: "order", Groups: pmGroups}, {Name: "payment", Groups: pmGroups},
	}}})
	if ps2, err := withTopo.ListPartitions(ctx, admin.Filter{Halted: true}); err != nil || len(ps2) != 2 || !ps2[1].ProcessManager {
		t.Errorf("with a topology: %+v, %v", ps2, err)
	}
	h, err := withTopo.Head(ctx, "payment:o-1", "Fulfillment")
	if err != nil || h.ID != bad.EntryID || h.Lane != "order:o-1" || !h.ProcessManager {
		t.Errorf("head through the payment row = %+v, %v; want the unit's halted head on order:o-1", h, err)
	}
	// Skipping through the payment row acts on the unit's halted head (on order:o-1).
	if _, err := adm.Act(ctx, admin.Action{Kind: admin.ActionSkip, Stream: "payment:o-1", Handler: "Fulfillment", ExpectID: bad.EntryID}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "resumed", func() bool {
		ps, err = adm.ListPartitions(ctx, admin.Filter{Halted: true})
		return err == nil && len(ps) == 0
	})
}

func TestRedisUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	_, err := admin.New(rdb, admin.Options{}).ListPartitions(context.Background(), admin.Filter{})
	if !errors.Is(err, engine.ErrRedisUnavailable) {
		t.Errorf("err = %v, want ErrRedisUnavailable", err)
	}
}

func TestParseStream(t *testing.T) {
	adm := admin.New(nil, admin.Options{})
	for _, tt := range []struct {
		in, want, err string
	}{
		{"order:client-123", "order:client-123", ""},
		{"order:client-123:backfill", "order:client-123", ""},
		{"order:client-123:dlq", "order:client-123", ""},
		{"order", "order", ""},
		{"order:__partitions__", "", "reserved __name__"},
		{"order:a:b", "", "want {category}:{key}"},
		{":x", "", "category is empty"},
	} {
		p, err := adm.ParseStream(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseStream(%q) err = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || p.Stream() != tt.want {
			t.Errorf("ParseStream(%q) = %q, %v; want %q", tt.in, p.Stream(), err, tt.want)
		}
	}
}

// A low-priority event goes to the backfill lane; a halt there is listed, its head is
// on the lane, and a replay puts it back on the same lane.
func TestBackfillLane(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	d := engine.NewDomain("lanes").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "seq", "poison"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", MaxRetries: 1, RetryDelay: 10 * time.Millisecond, Func: poisonHandler(srv.Client(t))})
	d.LanesEnabled, d.LanesThreshold = true, 1
	if err := d.Init(engine.NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	startEngine(t, srv, d, "i1")
	b := engine.NewRedisBroker(rdb)
	ctx := context.Background()
	publish(t, b, d, "A", 0, false) // priority 0 < 1: backfill
	bad := publish(t, b, d, "A", 1, true)
	if bad.Stream != "order:A:backfill" {
		t.Fatalf("published to %s, want the backfill lane", bad.Stream)
	}
	for _, opts := range []admin.Options{{}, {Lanes: admin.LanesOn}} {
		adm := admin.New(rdb, opts)
		var ps []admin.Partition
		waitFor(t, 10*time.Second, "halted on the backfill lane", func() bool {
			var err error
			ps, err = adm.ListPartitions(ctx, admin.Filter{Halted: true})
			return err == nil && len(ps) == 1
		})
		if ps[0].HaltedEntryID != bad.EntryID || ps[0].Halt.Stream != "order:A:backfill" || ps[0].Pending != 1 {
			t.Errorf("lanes %v: row = %+v", opts.Lanes, ps[0])
		}
		h, err := adm.Head(ctx, "order:A", "Projector")
		if err != nil || h.Lane != "order:A:backfill" {
			t.Errorf("lanes %v: head = %+v, %v", opts.Lanes, h, err)
		}
		in, err := adm.Inspect(ctx, "order:A", "")
		if err != nil || len(in.Lanes) != 2 || in.Lanes[1].Kind != "backfill" || in.Lanes[1].Length != 2 {
			t.Errorf("lanes %v: inspection lanes = %+v, %v", opts.Lanes, in.Lanes, err)
		}
	}
	adm := admin.New(rdb, admin.Options{})
	if _, err := adm.Act(ctx, admin.Action{Kind: admin.ActionDLQ, Stream: "order:A", Handler: "Projector", ExpectID: bad.EntryID}); err != nil {
		t.Fatal(err)
	}
	dlq, err := adm.DLQ(ctx, "order:A")
	if err != nil || len(dlq) != 1 || dlq[0].Lane != "order:A:backfill" {
		t.Fatalf("DLQ = %+v, %v", dlq, err)
	}
	rr, err := adm.Replay(ctx, "order:A", dlq[0].ID, admin.Actor{})
	if err != nil || rr.Stream != "order:A:backfill" {
		t.Errorf("replay = %+v, %v; want the backfill lane", rr, err)
	}
}

// With MinReplicas 1 every action (retry, move to DLQ, DLQ replay, skip) waits for the
// replica once; with the replica stopped, a skip is done on the primary, returns the
// shortfall (the action may be lost on failover) and is audited as not_replicated.
func TestActionsWaitForReplicas(t *testing.T) {
	w := haltedWorld(t)
	replica := redistest.StartReplica(t, w.srv)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{MinReplicas: 1, ReplicaTimeout: time.Second})
	actor := admin.Actor{User: "ops", Host: "laptop", Command: "head"}
	waits := func() int64 { return redistest.CommandCalls(t, w.rdb, "wait") }
	act := func(kind admin.ActionKind, id string) error {
		_, err := adm.Act(ctx, admin.Action{Kind: kind, Stream: "order:A", Handler: "Projector", ExpectID: id, Actor: actor})
		return err
	}
	haltedOn := func(id string, attempts int64) {
		t.Helper()
		waitFor(t, 10*time.Second, "halted on "+id, func() bool {
			h, err := adm.Head(ctx, "order:A", "Projector")
			return err == nil && h.Status == admin.HeadHalted && h.ID == id && h.Attempts == attempts
		})
	}
	counted := func(name string, fn func() error) {
		t.Helper()
		before := waits()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := waits() - before
		t.Logf("%s: %d WAIT call(s)", name, n)
		if n != 1 {
			t.Errorf("%s: %d WAIT calls, want 1", name, n)
		}
	}

	counted("retry", func() error { return act(admin.ActionRetry, w.poison.EntryID) })
	haltedOn(w.poison.EntryID, 3)
	counted("move to DLQ", func() error { return act(admin.ActionDLQ, w.poison.EntryID) })
	dlq, err := adm.DLQ(ctx, "order:A")
	if err != nil || len(dlq) != 1 {
		t.Fatalf("DLQ = %+v, %v", dlq, err)
	}
	var rr *admin.ReplayResult
	counted("DLQ replay", func() (err error) { rr, err = adm.Replay(ctx, "order:A", dlq[0].ID, actor); return err })
	haltedOn(rr.EntryID, 2)

	replica.Stop()
	err = act(admin.ActionSkip, rr.EntryID)
	if !errors.Is(err, engine.ErrReplicaShortfall) || !strings.Contains(err.Error(), "failover may lose it") {
		t.Fatalf("skip with the replica down: err = %v, want the shortfall saying a failover may lose it", err)
	}
	t.Logf("skip with the replica down: %v", err)
	if h, err := adm.Head(ctx, "order:A", "Projector"); err == nil && h.ID == rr.EntryID {
		t.Errorf("the skip was not done on the primary: the head is still %s", h.ID)
	}
	entries, err := adm.Audit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1]
	if last.Outcome != admin.OutcomeNotReplicated || !strings.Contains(last.Detail, "0 of the 1 required replicas") {
		t.Errorf("audit of the skip = %+v, want outcome %s with the numbers", last, admin.OutcomeNotReplicated)
	}
}
