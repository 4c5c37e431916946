// Package engine is seqctl's runtime: per-key ordered event processing on Redis Streams.
//
// The promise, for every handler that declares sequential_by: two events of one key are
// never in a handler at once, and they run in publish order; events of different keys run
// in parallel, across every instance. Delivery is at least once: after a failure the event
// in flight of a partition runs again (up to max_unacked events with that setting), and
// nothing else. A handler that keeps failing halts its key, durably, until an operator
// resolves the head; other keys keep flowing. An operator can also pause one key, durably,
// for as long as it takes (RedisBroker.Pause). docs/concepts.md tells how each part is
// kept, and under which faults.
//
// Declare a domain, initialize it against a broker (every registration problem is
// reported together), start an engine, publish:
//
//	dom := engine.NewDomain("shop").
//		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "client_id"}}).
//		AddHandler(engine.Handler{
//			Name: "OrderProjector", Kind: engine.EventHandlerKind, PartOf: "order",
//			Handles: []string{"OrderPlaced"}, SequentialBy: "client_id",
//			Func: func(ctx context.Context, ev engine.Event) error {
//				d, _ := engine.DeliveryFrom(ctx) // d.Generation is the fencing token
//				return project(ctx, ev, d.Generation)
//			},
//		})
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	broker := engine.NewRedisBroker(rdb)
//	if err := dom.Init(broker); err != nil {
//		log.Fatal(err)
//	}
//	eng, err := engine.New(engine.EngineConfig{Domain: dom, Client: rdb})
//	go eng.Run(ctx) // a graceful shutdown when ctx ends
//	_, err = broker.Publish(ctx, dom, "OrderPlaced", payload, engine.PublishOptions{})
//
// Keys and the records stored in Redis are named and encoded by package keyspace; every
// Lua script has its Go wrapper in package scripts; domain.toml is decoded by package
// config. Its clients beside the CLI: the outbox and its relay (package outbox) and
// exactly-once effects in a handler's database, the inbox and the SQL sink (package
// inbox); both open their databases through package sqldb.
//
// Files, by what happens to a thing over its life:
//
//   - The domain: domain.go (the model), register.go (Domain.Init, every registration
//     rule), partitionkey.go (what a partition key may be, and reading it from a payload
//     in place), router.go (an event's route and envelope), groups.go (consumer
//     groups: registry, retiring one).
//   - Publishing: broker.go (the Redis broker), publishmany.go (many events in one round
//     trip), inline.go (the in-process broker), replicas.go (waiting for replicas after a
//     write).
//   - The engine: engineconfig.go (its settings and their defaults), engine.go (New,
//     Start, Run, Shutdown, health and stats), session.go (the instance's session and
//     heartbeat).
//   - Partitions: discovery.go (finding partitions and taking a fair share), owners.go
//     (the cache of who holds each lease), liveness.go (which other instances live),
//     indexview.go (the view of the partition index), lease.go (a lease taken, renewed,
//     made dormant, released), worker.go (one partition's owner: runs of events and
//     batches, retry, split, halt), drain.go (the fenced read), acker.go
//     (acknowledgements), rungate.go and slots.go (handler concurrency), limits.go (the
//     fleet-wide limit keys: permits, the fair line of waiting partitions), reap.go
//     (trimming and reaping cold partitions).
//   - Waking idle owners when an entry arrives: doorbell.go (the doorbell and its loop),
//     doorbell_lanes.go (lanes and the workers waiting on them), doorbell_pubsub.go (the
//     pub/sub shards and their subscriptions), doorbell_notices.go (the wake and control
//     streams), sweep.go (entries from other publishers: keyspace notifications and the
//     sweep).
//   - Operators: operator.go (inspect, skip, move to the DLQ, retry, DLQ replay, pause and
//     resume a key), limitops.go (limit overrides and their use).
//   - Around them: errors.go, redis.go (calls to Redis), noperm.go (ACL refusals),
//     health.go, observer.go, delivery.go, trace.go (W3C trace context from the
//     publisher to the handler, and the span of each handler run or batch).
package engine
