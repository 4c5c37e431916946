package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

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
		testkit.WaitFor(t, 10*time.Second, "halted on the backfill lane", func() bool {
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
