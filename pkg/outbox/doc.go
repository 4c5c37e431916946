// Package outbox is the transactional outbox of seqctl and its relay to Redis Streams.
//
// An application records an event in the same database transaction as the state change
// that caused it (Outbox.Enqueue), so the event exists if and only if the change committed.
// The partition key is extracted and validated right there: a bad key fails the caller's
// operation and writes nothing. A Relay then moves the rows to their streams in per-key
// commit order, exactly once per stream even across crashes, under a per-category lease so
// that several relays can run for availability.
//
// Two database/sql dialects are supported: PostgreSQL through pgx (production; the relay
// is woken by LISTEN/NOTIFY) and SQLite through modernc.org/sqlite (embedded, no cgo; the
// relay polls). docs/outbox.md describes the table, the insert an application in another
// language makes, and how ordering, leasing and deduplication work. A row keeps the
// enqueuer's trace context, and the relay publishes under it (trace.go).
//
// Typical use:
//
//	db, dialect, err := outbox.Open("postgres://app@db/app")
//	ob, err := outbox.New(db, dialect, dom) // dom initialized with the Redis broker
//	err = ob.Migrate(ctx)
//
//	tx, _ := db.BeginTx(ctx, nil)
//	// ... the application's own writes ...
//	if _, err := ob.Enqueue(ctx, tx, outbox.Event{Type: "OrderPlaced", Data: payload}); err != nil {
//		tx.Rollback() // e.g. *engine.InvalidKeyError: the operation fails, nothing is written
//	}
//	tx.Commit()
//
//	relay, err := outbox.NewRelay(ob, outbox.RelayConfig{Publisher: broker})
//	go relay.Run(ctx)
package outbox
