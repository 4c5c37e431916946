package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seqctl/seqctl/internal/enginetest"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("os/exec.(*Cmd).Wait"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("os.(*Process).blockUntilWaitable"),
	)
}

// payload is the test events' payload.
type payload struct {
	Client string `json:"client_id"`
	Seq    int    `json:"seq"`
	Poison bool   `json:"poison,omitempty"`
}

// poisonHandler is the test handler: it refuses a poison event until "t:cured:{client}"
// exists, and records the seq of what it handled in "t:log:{client}", in order (one key
// per client, so that each command has one slot on Redis Cluster).
func poisonHandler(rdb redis.UniversalClient) engine.HandlerFunc {
	return func(ctx context.Context, ev engine.Event) error {
		var p payload
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			return err
		}
		if p.Poison {
			if n, err := rdb.Exists(ctx, "t:cured:"+p.Client).Result(); err != nil || n == 0 {
				return fmt.Errorf("poison payload %s/%d refused", p.Client, p.Seq)
			}
		}
		return rdb.RPush(context.Background(), "t:log:"+p.Client, p.Seq).Err()
	}
}

// orderDomain declares OrderPlaced in "order", partitioned by client_id, handled by
// "Projector" (fn; 2 attempts, 10 ms apart).
func orderDomain(tb testing.TB, fn engine.HandlerFunc) *engine.Domain {
	tb.Helper()
	d := engine.NewDomain("test").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "seq", "poison"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", MaxRetries: 2, RetryDelay: 10 * time.Millisecond, Func: fn})
	if err := d.Init(engine.NewRedisBroker(nil)); err != nil {
		tb.Fatal(err)
	}
	return d
}

// startEngine runs an engine for the test with quick timing; it is shut down at cleanup.
func startEngine(tb testing.TB, srv *redistest.Server, d *engine.Domain, id string) *engine.Engine {
	tb.Helper()
	return startEngineOn(tb, srv.Client(tb), d, id)
}

// startEngineOn is startEngine over any client: one node or a Redis Cluster.
func startEngineOn(tb testing.TB, rdb redis.UniversalClient, d *engine.Domain, id string) *engine.Engine {
	tb.Helper()
	return enginetest.Start(tb, engine.EngineConfig{Domain: d, Client: rdb, InstanceID: id})
}

func publish(tb testing.TB, b *engine.RedisBroker, d *engine.Domain, key string, seq int, poison bool) engine.Published {
	tb.Helper()
	data, _ := json.Marshal(payload{Client: key, Seq: seq, Poison: poison})
	p, err := b.Publish(context.Background(), d, "OrderPlaced", data, engine.PublishOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// waitHalted waits until the Projector has halted on the partition key of "order".
func waitHalted(tb testing.TB, b *engine.RedisBroker, key string) {
	tb.Helper()
	ref := engine.HeadRef{Group: "Projector", Category: "order", Key: key}
	testkit.WaitFor(tb, 20*time.Second, "order:"+key+" halted", func() bool {
		h, err := b.Halt(context.Background(), ref)
		return err == nil && h != nil
	})
}

func logOf(tb testing.TB, rdb redis.UniversalClient, key string) []string {
	tb.Helper()
	v, err := rdb.LRange(context.Background(), "t:log:"+key, 0, -1).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// addEntry appends an OrderPlaced entry with the given id to a stream.
func addEntry(t *testing.T, rdb *redis.Client, stream, id string) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"type", "OrderPlaced"}}).Err(); err != nil {
		t.Fatal(err)
	}
}

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
	if err := w.rdb.SAdd(context.Background(), keyspace.SingleNode.GroupRegistry("order"), "Mailer").Err(); err != nil {
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
	testkit.WaitFor(t, 10*time.Second, "order:B drained", func() bool { return len(logOf(t, w.rdb, "B")) == 3 })
	return w
}
