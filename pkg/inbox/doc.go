// Package inbox applies events exactly once, in stream order, into a SQL database, under
// seqctl's fence.
//
// The engine delivers each event at least once: after a crash, a pause or a lost reply
// the event in flight runs again, and an owner that stalled past its lease may still be
// running when the next owner starts. The inbox turns that into exactly-once effects for
// whatever a handler writes in the inbox's own transaction: one row per handler and lane
// stream records the last entry applied and the generation (fencing token) of the owner
// that applied it.
//
//   - An entry at or below the applied one is a duplicate: it is acknowledged without
//     running.
//   - A delivery from an older generation than the row's is refused with ErrStale (an
//     engine.ErrFenced): a newer owner has the partition; the engine gives it up as a lost
//     lease, and the partition does not halt.
//   - Otherwise the handler runs in the transaction, and the row is compare-and-set to
//     the entry and the generation just before the commit, so an owner that stalled inside
//     its transaction while a newer owner applied the entry is rolled back.
//
// A handler that takes runs of a key's events (engine.Handler.BatchFunc) applies each run
// in one transaction with ApplyBatch (or BatchHandler): the events an earlier delivery
// applied are skipped, the others run in order, and one claim records the run's last
// entry, so the run's effects commit together, once.
//
// Effects outside the transaction (an e-mail, a call to another service, a write to
// another database) are not covered: they run at least once, as before.
//
// Typical use, with the databases package sqldb opens (PostgreSQL through pgx, SQLite
// through modernc.org/sqlite), as the outbox does:
//
//	db, dialect, err := sqldb.Open("postgres://app@db/app")
//	ib, err := inbox.New(db, dialect)
//	err = ib.Migrate(ctx) // or: seqctl inbox migrate
//
//	handler := ib.Handler(func(ctx context.Context, tx *sql.Tx, ev engine.Event) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO orders(id, client) VALUES ($1, $2)", ...)
//		return err
//	})
//	// engine.Handler{Name: "OrderProjector", ..., Func: handler}
//
// docs/concepts.md ("Exactly-once effects") tells what holds and what does not.
package inbox
