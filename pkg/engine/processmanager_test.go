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
)

// pmDomain declares order and payment categories and a sequential process manager that
// correlates both on the order id.
func pmDomain(tb testing.TB, fn HandlerFunc) *Domain {
	tb.Helper()
	return pmDomainWith(tb, true, fn, nil)
}

// pmDomainWith declares the process manager Fulfillment over order and payment, with
// sequential_by as given; mod adds to the domain before Init.
func pmDomainWith(tb testing.TB, sequential bool, fn HandlerFunc, mod func(*Domain)) *Domain {
	tb.Helper()
	d := NewDomain("pm").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "seq"}}).
		AddEvent(EventType{Name: "PaymentConfirmed", Category: "payment", Fields: []string{"order_ref", "seq"}}).
		AddProcessManager(ProcessManager{Name: "Fulfillment", SequentialBy: sequential, Func: fn, Handles: []PMHandle{
			{Event: "OrderPlaced", Correlate: Correlate{PMField: "order_id", EventField: "order_id"}, Start: true},
			{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}},
		}})
	if mod != nil {
		mod(d)
	}
	if err := d.Init(NewRedisBroker(nil)); err != nil {
		tb.Fatal(err)
	}
	return d
}

// pmEvent reads an event of a pm domain: its fields, and the correlation value (the
// order_id of an order event, the order_ref of a payment).
func pmEvent(ev Event) (fields map[string]any, value string) {
	_ = json.Unmarshal(ev.Data, &fields)
	value, _ = fields["order_id"].(string)
	if value == "" {
		value, _ = fields["order_ref"].(string)
	}
	return fields, value
}

// pmPublish publishes an event of a pm domain whose field holds value, numbered seq.
func pmPublish(tb testing.TB, b *RedisBroker, d *Domain, event, field, value string, seq int) {
	tb.Helper()
	data := fmt.Sprintf(`{%q:%q,"seq":%d}`, field, value, seq)
	if _, err := b.Publish(context.Background(), d, event, []byte(data), PublishOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// A process manager over order and payment correlated by order id,
// two instances, two correlation values with interleaved events: no two events of one
// value in the handler at once (cross-instance marker), the two values progress in
// parallel, and a category partition that appears after the lease joins the unit.
func TestProcessManagerOwnsCorrelationValue(t *testing.T) {
	onBoth(t, testProcessManagerOwnsCorrelationValue)
}

func testProcessManagerOwnsCorrelationValue(t *testing.T, tg redisTarget) {
	rdb, b := tg.broker(t)
	mk := func(id string) HandlerFunc {
		c := tg.client(t)
		return func(ctx context.Context, ev Event) error {
			m, value := pmEvent(ev)
			bg := context.Background()
			if !c.SetNX(bg, "t:pm:"+value, id, time.Minute).Val() {
				c.Incr(bg, "t:overlap")
			}
			now := strconv.FormatInt(time.Now().UnixNano(), 10)
			c.HSetNX(bg, "t:win:"+value, "first", now)
			time.Sleep(2 * time.Millisecond)
			c.HSet(bg, "t:win:"+value, "last", strconv.FormatInt(time.Now().UnixNano(), 10))
			c.RPush(bg, "t:pmlog:"+value, ev.Type+"/"+fmt.Sprint(m["seq"])+"/"+id)
			c.Del(bg, "t:pm:"+value)
			return nil
		}
	}
	d1 := pmDomain(t, mk("i1"))
	e1 := startEngineOn(t, tg, d1, "i1", func(c *EngineConfig) { c.Timing = fastTiming(time.Second) })
	startEngineOn(t, tg, pmDomain(t, mk("i2")), "i2", func(c *EngineConfig) { c.Timing = fastTiming(time.Second) })

	pub := func(event, field, value string, seq int) { pmPublish(t, b, d1, event, field, value, seq) }
	// First only order events: the lease is taken before any payment stream exists.
	for seq := 0; seq < 5; seq++ {
		pub("OrderPlaced", "order_id", "o-1", seq)
		pub("OrderPlaced", "order_id", "o-2", seq)
	}
	testkit.WaitFor(t, 10*time.Second, "order events handled", func() bool {
		return rdb.LLen(context.Background(), "t:pmlog:o-1").Val() == 5 && rdb.LLen(context.Background(), "t:pmlog:o-2").Val() == 5
	})
	for seq := 5; seq < 60; seq++ {
		pub("OrderPlaced", "order_id", "o-1", seq)
		pub("PaymentConfirmed", "order_ref", "o-1", seq)
		pub("OrderPlaced", "order_id", "o-2", seq)
		pub("PaymentConfirmed", "order_ref", "o-2", seq)
	}
	for _, v := range []string{"o-1", "o-2"} {
		testkit.WaitFor(t, 20*time.Second, v+" handled", func() bool { return rdb.LLen(context.Background(), "t:pmlog:"+v).Val() == 115 })
	}
	if n, _ := rdb.Get(context.Background(), "t:overlap").Int(); n != 0 {
		t.Errorf("%d events of one correlation value overlapped", n)
	}
	// Per category, per value: publish order.
	for _, v := range []string{"o-1", "o-2"} {
		var orders, payments []int
		owners := map[string]bool{}
		for _, s := range rdb.LRange(context.Background(), "t:pmlog:"+v, 0, -1).Val() {
			f := strings.Split(s, "/")
			n, _ := strconv.Atoi(f[1])
			owners[f[2]] = true
			if f[0] == "OrderPlaced" {
				orders = append(orders, n)
			} else {
				payments = append(payments, n)
			}
		}
		if diff := cmp.Diff(seqs(0, 60), orders); diff != "" {
			t.Errorf("%s order events (-want +got):\n%s", v, diff)
		}
		if diff := cmp.Diff(seqs(5, 60), payments); diff != "" {
			t.Errorf("%s payment events (-want +got):\n%s", v, diff)
		}
		if len(owners) != 1 {
			t.Errorf("%s was handled by %v; the payment partition should have joined the unit's owner", v, owners)
		}
	}
	w1 := rdb.HGetAll(context.Background(), "t:win:o-1").Val()
	w2 := rdb.HGetAll(context.Background(), "t:win:o-2").Val()
	if !(w1["first"] < w2["last"] && w2["first"] < w1["last"]) {
		t.Errorf("the two correlation values did not progress in parallel: %v %v", w1, w2)
	}
	_ = e1
}
