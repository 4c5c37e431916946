package engine_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
)

// The usage the package doc shows: a domain with one handler sequential by client_id,
// initialized against the Redis broker, an engine running it, and a publish.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	project := func(ctx context.Context, ev engine.Event, generation int64) error {
		fmt.Println(ev.Type, ev.Key, generation)
		return nil
	}
	dom := engine.NewDomain("shop").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "client_id"}}).
		AddHandler(engine.Handler{
			Name: "OrderProjector", Kind: engine.EventHandlerKind, PartOf: "order",
			Handles: []string{"OrderPlaced"}, SequentialBy: "client_id",
			Func: func(ctx context.Context, ev engine.Event) error {
				d, _ := engine.DeliveryFrom(ctx) // d.Generation is the fencing token
				return project(ctx, ev, d.Generation)
			},
		})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	broker := engine.NewRedisBroker(rdb)
	if err := dom.Init(broker); err != nil {
		log.Fatal(err)
	}
	eng, err := engine.New(engine.EngineConfig{Domain: dom, Client: rdb})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = eng.Run(ctx) }() // a graceful shutdown when ctx ends
	payload := []byte(`{"order_id":"o-1","client_id":"c-9"}`)
	if _, err := broker.Publish(ctx, dom, "OrderPlaced", payload, engine.PublishOptions{}); err != nil {
		log.Fatal(err)
	}
}
