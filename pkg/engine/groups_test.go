package engine

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// twoHandlerDomain is testDomain with a second handler, Mailer, on the same partitioned
// category. Both get fn; the engines of these tests run only Projector.
func twoHandlerDomain(tb testing.TB, fn HandlerFunc) *Domain {
	tb.Helper()
	return testDomain(tb, fn, func(d *Domain) {
		d.AddHandler(Handler{Name: "Mailer", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", Func: fn})
	})
}

func TestDeclaredGroups(t *testing.T) {
	d := NewDomain("g").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id"}}).
		AddEvent(EventType{Name: "PaymentConfirmed", Category: "payment", Fields: []string{"order_ref"}}).
		AddCommand(CommandType{Name: "PlaceOrder", Category: "order_cmd", Fields: []string{"order_id"}}).
		AddHandler(Handler{Name: "Projector", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"}, SequentialBy: "order_id",
			Func: func(context.Context, Event) error { return nil }}).
		// Mailer has no Func and no part_of.
		AddHandler(Handler{Name: "Mailer", Kind: EventHandlerKind, Handles: []string{"OrderPlaced"}}).
		AddHandler(Handler{Name: "Ledger", Kind: EventHandlerKind, PartOf: "payment", Handles: []string{"PaymentConfirmed"}}).
		AddHandler(Handler{Name: "Placer", Kind: CommandHandlerKind, PartOf: "order_cmd", Handles: []string{"PlaceOrder"}}).
		AddProcessManager(ProcessManager{Name: "Fulfillment", SequentialBy: true, Handles: []PMHandle{
			{Event: "OrderPlaced", Correlate: Correlate{PMField: "order_id", EventField: "order_id"}, Start: true},
			{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}},
		}})
	if err := d.Init(NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"order":   {"Fulfillment", "Mailer", "Projector"},
		"payment": {"Fulfillment", "Ledger"},
	}
	if diff := cmp.Diff(want, DeclaredGroups(d)); diff != "" {
		t.Errorf("declared groups (-want +got):\n%s", diff)
	}
}

// A domain with two handlers on one partitioned category, only
// one of them running: nothing the other has not read is trimmed or reaped, however many
// events the running one handles and however long the partitions stay idle; after
// RetireGroup (what 'seqctl groups remove' runs) trim and reap resume.
func TestGroupRegistryProtectsUnservedHandler(t *testing.T) {
	srv, rdb, b := startNode(t)
	ctx := context.Background()
	var handled atomic.Int64
	d := twoHandlerDomain(t, func(context.Context, Event) error { handled.Add(1); return nil })
	const idle = time.Second
	startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Handlers = []string{"Projector"} // Mailer is declared, and has a Func, but is not run here
		c.Timing = fastTiming(time.Second)
		c.Timing.ReapIdle = idle
	})
	if got := rdb.SMembers(ctx, keyspace.SingleNode.GroupRegistry("order")).Val(); !slices.Equal(sorted(got), []string{"Mailer", "Projector"}) {
		t.Errorf("registry = %v, want both declared handlers", got)
	}

	// Mailer ran once on order:b (it read and acknowledged 100 entries) and stopped; it
	// never read order:a.
	const perKey = 300 // above trimEvery: the running handler trims after 256
	if err := rdb.XGroupCreateMkStream(ctx, "order:b", "Mailer", "0").Err(); err != nil {
		t.Fatal(err)
	}
	var events []testPayload
	for seq := 0; seq < perKey; seq++ {
		events = append(events, testPayload{Client: "a", Seq: seq}, testPayload{Client: "b", Seq: seq})
	}
	bulkPublish(t, b, d, events)
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "Mailer", Consumer: "old", Streams: []string{"order:b", ">"}, Count: 100}).Result()
	if err != nil || len(read[0].Messages) != 100 {
		t.Fatalf("Mailer's read: %v %v", err, read)
	}
	var ids []string
	for _, m := range read[0].Messages {
		ids = append(ids, m.ID)
	}
	rdb.XAck(ctx, "order:b", "Mailer", ids...)
	mailerAt := ids[len(ids)-1]

	testkit.WaitFor(t, 20*time.Second, "Projector handled everything", func() bool { return handled.Load() == 2*perKey })
	time.Sleep(3 * idle) // reap attempts every idle period; a trim ran after 256 events of each key
	unreadA := rdb.XLen(ctx, "order:a").Val()
	unreadB := int64(len(rdb.XRange(ctx, "order:b", "("+mailerAt, "+").Val()))
	t.Logf("Projector handled %d; entries Mailer has not read still in the streams: order:a %d of %d, order:b %d of %d (order:b holds %d)",
		handled.Load(), unreadA, perKey, unreadB, perKey-100, rdb.XLen(ctx, "order:b").Val())
	if unreadA != perKey || unreadB != perKey-100 {
		t.Errorf("entries Mailer has not read were trimmed or reaped: order:a %d of %d left, order:b %d of %d", unreadA, perKey, unreadB, perKey-100)
	}
	if got := sorted(rdb.SMembers(ctx, keyspace.SingleNode.PartitionIndex("order")).Val()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("partition index = %v, want a and b (nothing reaped)", got)
	}

	// Retiring: refused for the running handler and for a stale expectation; done for
	// Mailer with what it has read.
	if _, err := b.RetireGroup(ctx, GroupRetirement{Category: "order", Group: "Projector"}); !errors.Is(err, ErrGroupLive) {
		t.Errorf("retiring the running handler: %v, want ErrGroupLive", err)
	}
	stale := int64(99)
	if _, err := b.RetireGroup(ctx, GroupRetirement{Category: "order", Group: "Mailer", ExpectRead: &stale}); !errors.Is(err, ErrGroupRead) {
		t.Errorf("retiring with a stale figure: %v, want ErrGroupRead", err)
	}
	if _, err := b.RetireGroup(ctx, GroupRetirement{Category: "order", Group: "Nobody"}); !errors.Is(err, ErrGroupNotRegistered) {
		t.Errorf("retiring an unknown group: %v, want ErrGroupNotRegistered", err)
	}
	expect := int64(100)
	dry, err := b.RetireGroup(ctx, GroupRetirement{Category: "order", Group: "Mailer", ExpectRead: &expect, DryRun: true})
	if err != nil || !rdb.SIsMember(ctx, keyspace.SingleNode.GroupRegistry("order"), "Mailer").Val() {
		t.Fatalf("dry run: %v (registered afterwards: %v)", err, rdb.SIsMember(ctx, keyspace.SingleNode.GroupRegistry("order"), "Mailer").Val())
	}
	res, err := b.RetireGroup(ctx, GroupRetirement{Category: "order", Group: "Mailer", ExpectRead: &expect})
	if err != nil {
		t.Fatal(err)
	}
	want := GroupRetired{Partitions: 2, Read: 100, Destroyed: 1}
	if diff := cmp.Diff(want, res); diff != "" || dry != res {
		t.Errorf("retired (-want +got):\n%s(dry run said %+v)", diff, dry)
	}

	removed := time.Now()
	testkit.WaitFor(t, 10*time.Second, "order:a and order:b reaped", func() bool {
		return rdb.Exists(ctx, "order:a", "order:b").Val() == 0 && rdb.SCard(ctx, keyspace.SingleNode.PartitionIndex("order")).Val() == 0
	})
	t.Logf("reaped %v after the retirement", time.Since(removed).Round(10*time.Millisecond))
	cEvents := make([]testPayload, perKey)
	for i := range cEvents {
		cEvents[i] = testPayload{Client: "c", Seq: i}
	}
	bulkPublish(t, b, d, cEvents)
	testkit.WaitFor(t, 20*time.Second, "order:c handled", func() bool { return handled.Load() == 3*perKey })
	testkit.WaitFor(t, 5*time.Second, "order:c trimmed", func() bool { return rdb.XLen(ctx, "order:c").Val() < perKey })
	t.Logf("order:c holds %d of %d entries after Projector handled them", rdb.XLen(ctx, "order:c").Val(), perKey)
}

// The registry is rebuilt when a session opens, so a Redis that lost
// its data (here FLUSHALL) protects the handler no instance runs again before any lease
// is used.
func TestGroupRegistryRebuiltWhenSessionOpens(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	var handled atomic.Int64
	d := twoHandlerDomain(t, func(context.Context, Event) error { handled.Add(1); return nil })
	startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Handlers = []string{"Projector"}
		c.Timing = fastTiming(time.Second)
	})
	both := []string{"Mailer", "Projector"}
	if got := sorted(rdb.SMembers(ctx, keyspace.SingleNode.GroupRegistry("order")).Val()); !slices.Equal(got, both) {
		t.Fatalf("registry after Start = %v, want %v", got, both)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	testkit.WaitFor(t, 10*time.Second, "registry rebuilt", func() bool {
		return slices.Equal(sorted(rdb.SMembers(ctx, keyspace.SingleNode.GroupRegistry("order")).Val()), both)
	})
	t.Logf("registry rebuilt %v after FLUSHALL", time.Since(lost).Round(10*time.Millisecond))
	// The engine works on the new session, and a trim after 256 events keeps what Mailer
	// has not read.
	events := make([]testPayload, 300)
	for i := range events {
		events[i] = testPayload{Client: "a", Seq: i}
	}
	bulkPublish(t, NewRedisBroker(rdb), d, events)
	testkit.WaitFor(t, 20*time.Second, "handled after the loss", func() bool { return handled.Load() == 300 })
	if n := rdb.XLen(ctx, "order:a").Val(); n != 300 {
		t.Errorf("order:a holds %d entries, want all 300 (Mailer has read none)", n)
	}
}

func sorted(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}
