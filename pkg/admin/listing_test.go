package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

func TestListPartitions(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	if err := w.rdb.XAdd(ctx, &redis.XAddArgs{Stream: keyspace.SingleNode.DLQStream("order", "A"), Values: []any{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	var all []admin.Partition
	testkit.WaitFor(t, 5*time.Second, "order:B acknowledged", func() bool {
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

// A partition published before braces were refused in keys is still listed, so an
// operator sees it (the engine's discovery decides whether it is still read).
func TestListPartitionsKeepsLegacyKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rdb.SAdd(ctx, "order:__partitions__", "{legacy}", "client-1")
	rdb.SAdd(ctx, "order:__groups__", "H")
	addEntry(t, rdb, "order:{legacy}", "1-0")
	addEntry(t, rdb, "order:client-1", "1-0")
	ps, err := admin.New(rdb, admin.Options{}).ListPartitions(ctx, admin.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, p := range ps {
		keys = append(keys, p.Key)
	}
	if diff := cmp.Diff([]string{"client-1", "{legacy}"}, keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if _, err := admin.New(rdb, admin.Options{}).ParseStream("order:{legacy}"); err != nil {
		t.Errorf("ParseStream of a legacy key: %v", err)
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
	testkit.WaitFor(t, 10*time.Second, "the correlation value halted", func() bool {
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
	testkit.WaitFor(t, 10*time.Second, "resumed", func() bool {
		ps, err = adm.ListPartitions(ctx, admin.Filter{Halted: true})
		return err == nil && len(ps) == 0
	})
}
