package engine

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// MoveToDLQ then ReplayDLQ: the event is back at the tail once, with its id kept, and a
// second replay of the same DLQ entry publishes nothing.
func TestDLQMoveAndReplayOnce(t *testing.T) {
	srv, rdb, b := startNode(t)
	ctx := context.Background()
	d := sinkDomain(t, srv.Client(t), "i1", func(d *Domain) { d.Handlers[0].MaxRetries = 1 })
	startEngine(t, srv, d, "i1", time.Second)
	poison := publish(t, b, d, "A", 0, true)
	ref := HeadRef{Group: "Projector", Category: "order", Key: "A"}
	testkit.WaitFor(t, 5*time.Second, "halted", func() bool { h, _ := b.Halt(ctx, ref); return h != nil })
	if err := b.MoveToDLQ(ctx, ref, poison.EntryID, false, "moved_by", "test"); err != nil {
		t.Fatal(err)
	}
	dl := rdb.XRange(ctx, keyspace.SingleNode.DLQStream("order", "A"), "-", "+").Val()
	if len(dl) != 1 || dl[0].Values["original_id"] != poison.EntryID || dl[0].Values["halt_error"] == "" || dl[0].Values["moved_by"] != "test" {
		t.Fatalf("DLQ = %+v", dl)
	}
	before := rdb.XLen(ctx, "order:A").Val()
	r := Route{Category: "order", Key: "A", Stream: "order:A", Index: keyspace.SingleNode.PartitionIndex("order")}
	p, err := b.ReplayDLQ(ctx, keyspace.SingleNode.DLQStream("order", "A"), dl[0].ID, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReplayDLQ(ctx, keyspace.SingleNode.DLQStream("order", "A"), dl[0].ID, r); !errors.Is(err, ErrEntryGone) {
		t.Fatalf("second replay: err = %v, want ErrEntryGone", err)
	}
	if n := rdb.XLen(ctx, keyspace.SingleNode.DLQStream("order", "A")).Val(); n != 0 {
		t.Fatalf("DLQ still holds %d entries", n)
	}
	msgs := rdb.XRange(ctx, "order:A", p.EntryID, p.EntryID).Val()
	if len(msgs) != 1 || rdb.XLen(ctx, "order:A").Val() > before+1 {
		t.Fatalf("replayed entry not found once at the tail: %v", msgs)
	}
	ev, err := EventFromMessage(msgs[0])
	if err != nil || ev.ID != poison.EventID {
		t.Fatalf("replayed event %+v (%v), want id %s kept", ev, err, poison.EventID)
	}
	var pl testPayload
	_ = json.Unmarshal(ev.Data, &pl)
	if !pl.Poison {
		t.Fatal("payload not kept")
	}
}
