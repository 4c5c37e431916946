package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Lease units and lanes depend only on the domain (consumer group + stream), never on
// instance-local flags. These tests run two instances that disagree on a flag, as during
// a rolling change of domain.toml.

// sharedPMDomain partitions order and payment by ordinary handlers, and declares the
// process manager Fulfillment over both, with or without sequential_by: the streams are
// the same either way, only the process manager's lease unit differs.
func sharedPMDomain(tb testing.TB, sequential bool, fn HandlerFunc) *Domain {
	tb.Helper()
	return pmDomainWith(tb, sequential, fn, func(d *Domain) {
		d.AddHandler(Handler{Name: "Projector", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"}, SequentialBy: "order_id"}).
			AddHandler(Handler{Name: "PayProjector", Kind: EventHandlerKind, PartOf: "payment", Handles: []string{"PaymentConfirmed"}, SequentialBy: "order_ref"})
	})
}

// A process manager whose sequential_by flag differs between two running instances (a
// rolling change of the flag): the one that leases correlation values and the one that
// leases streams never drain one stream at once, and each stream is handled in publish
// order. While both run, a value whose stream the old instance holds waits for it (the
// new instance needs every stream of the value); when the old instance leaves, the rest
// is handled.
func TestProcessManagerFlagChangeNeverSharesAStream(t *testing.T) {
	srv, rdb, b := startNode(t)
	mk := func(id string) HandlerFunc {
		c := srv.Client(t)
		return func(ctx context.Context, ev Event) error {
			m, value := pmEvent(ev)
			stream := ev.Category + ":" + value
			bg := context.Background()
			if !c.SetNX(bg, "t:in:"+stream, id, time.Minute).Val() {
				c.Incr(bg, "t:overlap")
			}
			time.Sleep(time.Millisecond)
			c.RPush(bg, "t:log:"+stream, fmt.Sprint(m["seq"]))
			c.Incr(bg, "t:by:"+id)
			c.Del(bg, "t:in:"+stream)
			return nil
		}
	}
	only := func(c *EngineConfig) { c.Timing, c.Handlers = fastTiming(time.Second), []string{"Fulfillment"} }
	startEngineWith(t, srv, sharedPMDomain(t, true, mk("seq")), "seq", only)
	plain := startEngineWith(t, srv, sharedPMDomain(t, false, mk("plain")), "plain", only)
	d := sharedPMDomain(t, true, nil)
	values := []string{"o-1", "o-2", "o-3", "o-4"}
	const n = 150
	for seq := 0; seq < n; seq++ {
		for _, v := range values {
			pmPublish(t, b, d, "OrderPlaced", "order_id", v, seq)
			pmPublish(t, b, d, "PaymentConfirmed", "order_ref", v, seq)
		}
	}
	var streams []string
	for _, v := range values {
		streams = append(streams, "order:"+v, "payment:"+v)
	}
	// Both run side by side. Usually both handle events; when the old instance happens to
	// hold a stream of every value first, the new one waits for it (safe, not live, until
	// the old one leaves): then only the no-overlap and order checks below apply.
	both := false
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && !both; time.Sleep(20 * time.Millisecond) {
		both = rdb.Exists(context.Background(), "t:by:seq", "t:by:plain").Val() == 2
	}
	t.Logf("both instances handled events side by side: %v", both)
	time.Sleep(time.Second)
	if err := plain.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		testkit.WaitFor(t, 20*time.Second, s+" handled", func() bool {
			got, _ := dedupFirst(intsOf(rdb.LRange(context.Background(), "t:log:"+s, 0, -1).Val()))
			return len(got) >= n
		})
	}
	if o := rdb.Get(context.Background(), "t:overlap").Val(); o != "" && o != "0" {
		t.Errorf("%s events of one stream overlapped between the two instances", o)
	}
	for _, s := range streams {
		got, _ := dedupFirst(intsOf(rdb.LRange(context.Background(), "t:log:"+s, 0, -1).Val()))
		if diff := cmp.Diff(seqs(0, n), got); diff != "" {
			t.Errorf("%s: order (-want +got):\n%s", s, diff)
		}
	}
}

func intsOf(ss []string) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i], _ = strconv.Atoi(s)
	}
	return out
}

// A backfill lane written by a publisher with priority lanes on is drained, and reaped
// with its partition, by an instance that has lanes off: nothing is stranded.
func TestBackfillLaneDrainedWithLanesOff(t *testing.T) {
	srv, rdb, b := startNode(t)
	var handled []int
	done := make(chan struct{}, 16)
	h := func(ctx context.Context, ev Event) error {
		var p testPayload
		_ = json.Unmarshal(ev.Data, &p)
		handled = append(handled, p.Seq)
		done <- struct{}{}
		return nil
	}
	startEngineWith(t, srv, testDomain(t, h, nil), "off", func(c *EngineConfig) {
		c.Timing = fastTiming(time.Second)
		c.Timing.ReapIdle = 300 * time.Millisecond
	})
	withLanes := testDomain(t, nil, func(d *Domain) { d.LanesEnabled, d.LanesThreshold = true, 5 })
	for seq, prio := range []int{9, 1, 1} { // one primary, two backfill
		data := []byte(fmt.Sprintf(`{"client_id":"K","seq":%d}`, seq))
		p, err := b.Publish(context.Background(), withLanes, "OrderPlaced", data, PublishOptions{Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		if prio == 1 && !strings.HasSuffix(p.Stream, ":backfill") {
			t.Fatalf("low priority went to %s", p.Stream)
		}
	}
	for i := 0; i < 3; i++ {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("handled %v of 3 events (the backfill lane was not drained)", handled)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the partition reaped with both lanes", func() bool {
		n, _ := rdb.Exists(context.Background(), "order:K", "order:K:backfill").Result()
		return n == 0 && !rdb.SIsMember(context.Background(), keyspace.SingleNode.PartitionIndex("order"), "K").Val()
	})
}
