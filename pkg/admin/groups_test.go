package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// Groups shows a declared handler that nothing runs, how far behind it is and that the
// new config no longer declares it; RemoveGroup refuses while the config declares the
// group, while it runs, with a stale figure and for an unknown group, then retires it;
// every attempt is audited.
func TestGroupsListAndRemove(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	d := orderDomain(t, poisonHandler(srv.Client(t)))
	old := engine.NewDomain("old").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "seq", "poison"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", Func: d.Handlers[0].Func}).
		AddHandler(engine.Handler{Name: "Mailer", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id"})
	if err := old.Init(engine.NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	// The running instance still has the old domain: it registers Mailer without running it.
	startEngine(t, srv, old, "i1")
	b := engine.NewRedisBroker(rdb)
	for seq := 0; seq < 3; seq++ {
		publish(t, b, d, "A", seq, false)
		publish(t, b, d, "B", seq, false)
	}
	testkit.WaitFor(t, 10*time.Second, "Projector handled everything", func() bool {
		return len(logOf(t, rdb, "A")) == 3 && len(logOf(t, rdb, "B")) == 3
	})

	// The operator's config is the new domain, without Mailer.
	adm := admin.New(rdb, admin.Options{Declared: engine.DeclaredGroups(d)})
	yes, no := true, false
	want := []admin.Group{
		{Category: "order", Name: "Mailer", Registered: true, Declared: &no, Partitions: 2, Behind: 2, Unread: 6},
		{Category: "order", Name: "Projector", Registered: true, Declared: &yes, Partitions: 2, Read: 6, LiveLeases: 2},
	}
	var gs []admin.Group
	var err error
	testkit.WaitFor(t, 5*time.Second, "every ack applied", func() bool {
		if gs, err = adm.Groups(ctx, ""); err != nil {
			t.Fatal(err)
		}
		return cmp.Equal(want, gs)
	})

	who := admin.Actor{User: "alice", Host: "ops-1", Command: "groups remove"}
	zero, stale := int64(0), int64(5)
	tries := []struct {
		name    string
		adm     *admin.Admin
		r       admin.GroupRemoval
		wantErr error
	}{
		{"declared", adm, admin.GroupRemoval{Category: "order", Group: "Projector"}, admin.ErrGroupDeclared},
		{"running", admin.New(rdb, admin.Options{}), admin.GroupRemoval{Category: "order", Group: "Projector"}, engine.ErrGroupLive},
		{"stale figure", adm, admin.GroupRemoval{Category: "order", Group: "Mailer", ExpectRead: &stale}, engine.ErrGroupRead},
		{"unknown", adm, admin.GroupRemoval{Category: "order", Group: "Nobody"}, engine.ErrGroupNotRegistered},
	}
	for _, tt := range tries {
		tt.r.Actor = who
		if _, err := tt.adm.RemoveGroup(ctx, tt.r); !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.wantErr)
		}
	}
	dry, err := adm.RemoveGroup(ctx, admin.GroupRemoval{Category: "order", Group: "Mailer", ExpectRead: &zero, DryRun: true, Actor: who})
	if err != nil || !dry.DryRun || dry.Partitions != 2 {
		t.Fatalf("dry run: %v %+v", err, dry)
	}
	res, err := adm.RemoveGroup(ctx, admin.GroupRemoval{Category: "order", Group: "Mailer", ExpectRead: &zero, Reason: "OPS-7", Actor: who})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != admin.OutcomeOK || res.Partitions != 2 || res.Destroyed != 0 {
		t.Errorf("removed = %+v", res)
	}
	gs, _ = adm.Groups(ctx, "order")
	if len(gs) != 1 || gs[0].Name != "Projector" {
		t.Errorf("groups after the removal = %+v, want Projector only", gs)
	}

	entries, err := adm.Audit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range entries {
		if e.Command != "groups remove" || e.Stream != "order" || e.User != "alice" {
			t.Errorf("audit entry = %+v", e)
		}
		outcomes = append(outcomes, e.Handler+" "+e.Outcome)
	}
	wantOutcomes := []string{"Projector declared", "Projector live_lease", "Mailer read_moved", "Nobody not_registered", "Mailer ok"}
	if diff := cmp.Diff(wantOutcomes, outcomes); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	if last := entries[len(entries)-1]; last.Reason != "OPS-7" || last.Detail == "" {
		t.Errorf("the removal's audit entry = %+v", last)
	}
}
