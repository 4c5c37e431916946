package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// row is one unpublished outbox row as the relay reads it. During the publish phase each
// row is touched by exactly one goroutine (the one publishing its unit).
type row struct {
	id       int64
	eventID  string
	typ      string
	category string
	key      sql.NullString
	payload  string
	priority int
	status   Status
	attempts int
	nextMs   int64         // next_attempt_ms: a FAILED row is not retried before (Unix ms)
	seq      sql.NullInt64 // publish_seq: the dedupe sequence, once assigned
	stream   sql.NullString
	trace    [2]sql.NullString // traceparent, tracestate of the enqueuer, when it had one
	fresh    bool              // the sequence was assigned in this round (so never used for an append before)

	route engine.Route
	event engine.Event
	// unit is the row's ordering unit: "k:"+key when the key is applied (its primary and
	// backfill lanes), else "s:"+stream (a shared stream: the base category). A unit is
	// published strictly in order and stops at its first failure.
	unit string

	out outcome
}

type outcomeKind int

const (
	notTried    outcomeKind = iota // no publish was started
	published                      // appended now
	duplicate                      // found appended already (the dedupe mark)
	failed                         // the publish failed: retried with backoff
	interrupted                    // ctx ended during the publish: it may or may not have happened
)

type outcome struct {
	kind    outcomeKind
	entryID string
	err     error
}

// plan is what one round does in one category.
type plan struct {
	ready     []*row // in publish order: sequenced rows by sequence, then the rest by id
	abandon   []*row // rows that can never be published, with their reasons below
	reasons   map[int64]string
	more      bool      // more rows are ready than one batch
	nextRetry time.Time // earliest backoff expiry of a held-back unit
}

// relayCategory relays one batch of one category, taking its lease first if needed.
func (r *Relay) relayCategory(ctx context.Context, cat string) (roundResult, error) {
	now := time.Now()
	l := r.leases[cat]
	if l == nil {
		if until, refused := r.refusedUntil[cat]; refused && now.Before(until) {
			return roundResult{}, nil
		}
		var has bool
		if err := r.o.db.QueryRowContext(ctx, r.o.q.hasWork, cat).Scan(&has); err != nil {
			return roundResult{}, fmt.Errorf("outbox: look for rows of category %q: %w", cat, err)
		}
		if !has {
			return roundResult{}, nil
		}
		var ok bool
		var err error
		if l, ok, err = r.acquire(ctx, cat); err != nil || !ok {
			// Held by another relay: look again soon, not on every poll.
			r.refusedUntil[cat] = now.Add(min(r.cfg.LeaseTTL/10, time.Second))
			return roundResult{}, err
		}
		delete(r.refusedUntil, cat)
		r.leases[cat] = l
		r.log.Debug("outbox relay: lease acquired", "category", cat, "generation", l.generation, "owner", r.cfg.Owner)
	} else if !l.valid(now) {
		if _, err := r.fence(ctx, nil, l, 0); err != nil {
			return roundResult{}, r.lost(l, err)
		}
	}

	p, err := r.plan(ctx, cat)
	if err != nil {
		return roundResult{}, err
	}
	res := roundResult{nextRetry: p.nextRetry}
	if len(p.ready) == 0 && len(p.abandon) == 0 {
		if time.Since(l.renewedAt) > r.cfg.LeaseTTL/2 {
			if _, err := r.fence(ctx, nil, l, 0); err != nil {
				return res, r.lost(l, err)
			}
		}
		return res, nil
	}
	if err := r.prepare(ctx, l, &p); err != nil {
		return res, r.lost(l, err)
	}
	res.abandoned = len(p.abandon)
	r.count(func(s *RelayStats) { s.Abandoned += uint64(len(p.abandon)) })
	for _, rw := range p.abandon {
		r.log.Warn("outbox relay: row abandoned", "category", cat, "row", rw.id, "event_id", rw.eventID, "reason", p.reasons[rw.id])
	}

	r.publish(ctx, l, p.ready)
	short := r.confirmReplicated(ctx, cat, p.ready)

	if err := r.mark(ctx, l, p.ready); err != nil {
		return res, r.lost(l, err)
	}
	for _, rw := range p.ready {
		switch rw.out.kind {
		case published:
			res.published++
		case duplicate:
			res.duplicates++
		case failed:
			res.failed++
			at := time.Now().Add(r.backoff(rw.attempts + 1))
			if res.nextRetry.IsZero() || at.Before(res.nextRetry) {
				res.nextRetry = at
			}
		}
	}
	r.count(func(s *RelayStats) {
		s.Published += uint64(res.published)
		s.Duplicates += uint64(res.duplicates)
		s.Failures += uint64(res.failed)
	})
	res.more = p.more && res.published+res.duplicates+res.abandoned > 0
	return res, short
}

// lost handles an error of a leased step: on ErrFenced the lease is dropped (another relay
// owns the category now) and the round goes on; other errors are returned.
func (r *Relay) lost(l *lease, err error) error {
	if !errors.Is(err, ErrFenced) {
		return err
	}
	delete(r.leases, l.category)
	r.count(func(s *RelayStats) { s.LeasesLost++ })
	r.log.Warn("outbox relay: lease lost to another relay; stopped publishing the category",
		"category", l.category, "generation", l.generation, "owner", r.cfg.Owner)
	return nil
}

// plan reads the category's unpublished rows and decides which are ready: rows already
// given a dedupe sequence first (in sequence order), then the others in id order, which is
// commit order for the rows of one key. A row is held back when an earlier row of its unit
// is held back or waits for a retry; rows whose route is invalid are to be abandoned and
// hold nothing back.
func (r *Relay) plan(ctx context.Context, cat string) (plan, error) {
	p := plan{reasons: map[int64]string{}}
	nowMs := time.Now().UnixMilli()
	blocked := map[string]bool{}
	consider := func(rw *row) {
		if err := r.routeRow(rw); err != nil {
			p.abandon = append(p.abandon, rw)
			p.reasons[rw.id] = err.Error()
			return
		}
		if blocked[rw.unit] {
			return
		}
		if rw.status == StatusFailed && rw.nextMs > nowMs {
			blocked[rw.unit] = true
			if at := time.UnixMilli(rw.nextMs); p.nextRetry.IsZero() || at.Before(p.nextRetry) {
				p.nextRetry = at
			}
			return
		}
		if rw.seq.Valid && rw.stream.String != rw.route.Stream {
			// The route changed since the sequence was given (lanes or partitioning were
			// reconfigured): a sequence only orders rows within one stream, so take a new one.
			rw.seq.Valid = false
		}
		p.ready = append(p.ready, rw)
	}

	limit := 4 * r.cfg.BatchSize
	seqd, err := r.selectRows(ctx, r.o.q.selectSequenced, cat, limit)
	if err != nil {
		return p, err
	}
	for _, rw := range seqd {
		consider(rw)
	}
	if len(seqd) == limit {
		// Rows beyond the limit may be heads of units we have not seen; a row of such a
		// unit must not get a sequence before them. Finish the sequenced rows first.
		p.more = true
		return p, nil
	}
	_, keyed := r.o.dom.PartitionField(cat)
	var after int64
	for scanned := 0; len(p.ready) < r.cfg.BatchSize && scanned < limit; {
		if !keyed && len(blocked) > 0 {
			return p, nil // one unit for the whole category, and it is held back
		}
		page, err := r.selectRows(ctx, r.o.q.selectUnsequence, cat, after, r.heldBack(blocked), r.cfg.BatchSize)
		if err != nil {
			return p, err
		}
		for _, rw := range page {
			consider(rw)
			after = rw.id
		}
		scanned += len(page)
		if len(page) < r.cfg.BatchSize {
			return p, nil
		}
	}
	p.more = true
	return p, nil
}

// heldBack renders the held-back keys as the parameter of queries.selectUnsequence.
func (r *Relay) heldBack(blocked map[string]bool) any {
	keys := []string{}
	for u := range blocked {
		if k, ok := strings.CutPrefix(u, "k:"); ok {
			keys = append(keys, k)
		}
	}
	if r.o.dialect == Postgres {
		return keys
	}
	b, _ := json.Marshal(keys)
	return string(b)
}

func (r *Relay) selectRows(ctx context.Context, query string, args ...any) ([]*row, error) {
	out, err := queryRows(ctx, r.o.db, query, func(rows *sql.Rows) (*row, error) {
		rw := &row{}
		var status string
		err := rows.Scan(&rw.id, &rw.eventID, &rw.typ, &rw.category, &rw.key, &rw.payload, &rw.priority,
			&status, &rw.attempts, &rw.nextMs, &rw.seq, &rw.stream, &rw.trace[0], &rw.trace[1])
		rw.status = Status(status)
		return rw, err
	}, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: read unpublished rows of %s: %w", r.o.table, err)
	}
	return out, nil
}

// routeRow computes the row's stream as the router does, from the key stored on the row:
// {category}:{key} for a partitioned category when the broker applies partitioning, plus
// :{backfill_suffix} below the lanes threshold; else the base category. An error means the
// row can never be published (the reason is recorded when it is abandoned).
func (r *Relay) routeRow(rw *row) error {
	et, ok := r.o.dom.Event(rw.typ)
	if !ok {
		return fmt.Errorf("%w %q: the domain does not declare it; declare it and enqueue the event again", engine.ErrUnknownEvent, rw.typ)
	}
	if et.Category != rw.category {
		return fmt.Errorf("outbox: the row's category %q is not %q, the category the domain declares for %s", rw.category, et.Category, rw.typ)
	}
	d := r.o.dom
	rt := engine.Route{Category: rw.category, Stream: keyspace.SingleNode.CategoryStream(rw.category)}
	if field, partitioned := r.o.keys[rw.category]; partitioned {
		if err := engine.ValidateKey(rw.key.String, r.o.suffix); err != nil {
			var ike *engine.InvalidKeyError
			if errors.As(err, &ike) {
				ike.Category, ike.Field = rw.category, field
			}
			return err
		}
		if _, active := d.PartitionField(rw.category); active {
			key := rw.key.String
			rt.Key, rt.Index, rt.Stream = key, keyspace.SingleNode.PartitionIndex(rw.category), keyspace.SingleNode.PartitionStream(rw.category, key)
			if d.LanesEnabled && rw.priority < d.LanesThreshold {
				rt.Backfill, rt.Suffix, rt.Stream = true, r.o.suffix, keyspace.SingleNode.LaneStream(rw.category, key, r.o.suffix)
			}
		}
	}
	if kp, ok := r.cfg.Publisher.(interface{ Keys() keyspace.Keys }); ok {
		rt = rt.In(kp.Keys()) // the stream names of the server it writes to
	}
	rw.route = rt
	rw.event = engine.Event{ID: rw.eventID, Type: rw.typ, Category: rt.Category, Key: rt.Key, Data: []byte(rw.payload), Priority: rw.priority,
		TraceParent: rw.trace[0].String, TraceState: rw.trace[1].String}
	if rt.Key != "" {
		rw.unit = "k:" + rt.Key
	} else {
		rw.unit = "s:" + rt.Stream
	}
	return nil
}

// prepare runs the first leased transaction of a round: it fences, abandons the rows with
// an invalid route, and gives each ready row without one its dedupe sequence (in publish
// order) and records its stream, so that a relay that crashes after the append retries
// with the same sequence and the same stream.
func (r *Relay) prepare(ctx context.Context, l *lease, p *plan) error {
	var need []*row
	for _, rw := range p.ready {
		if !rw.seq.Valid {
			need = append(need, rw)
		}
	}
	tx, err := r.o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	last, err := r.fence(ctx, tx, l, len(need))
	if err != nil {
		return err
	}
	first := last - int64(len(need)) + 1
	for i, rw := range need {
		rw.seq = sql.NullInt64{Int64: first + int64(i), Valid: true}
		rw.fresh = true
	}
	if err := r.assign(ctx, tx, need); err != nil {
		return err
	}
	for _, rw := range p.abandon {
		if _, err := tx.ExecContext(ctx, r.o.q.markAbandoned, p.reasons[rw.id], rw.id); err != nil {
			return fmt.Errorf("outbox: abandon row %d: %w", rw.id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: commit the dedupe sequences: %w", err)
	}
	return nil
}

// column returns one value of each row, for an array parameter of a PostgreSQL batch
// statement.
func column[T any](rows []*row, value func(*row) T) []T {
	out := make([]T, len(rows))
	for i, rw := range rows {
		out[i] = value(rw)
	}
	return out
}

func rowID(rw *row) int64      { return rw.id }
func rowStream(rw *row) string { return rw.route.Stream }

// eachRow prepares query and runs exec with the statement for each row, stopping at the
// first error; a failed prepare is wrapped with what the statement does. It is the form of
// a batch write where there is no batch statement over arrays (SQLite).
func eachRow(ctx context.Context, tx *sql.Tx, query, does string, rows []*row, exec func(*sql.Stmt, *row) error) error {
	stmt, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return fmt.Errorf("outbox: %s: %w", does, err)
	}
	defer stmt.Close()
	for _, rw := range rows {
		if err := exec(stmt, rw); err != nil {
			return err
		}
	}
	return nil
}

// errRowsChanged: a row the relay read changed under it (an operator edited the table).
var errRowsChanged = errors.New("outbox: unpublished rows changed while the relay held the lease; planning again")

func (r *Relay) assign(ctx context.Context, tx *sql.Tx, need []*row) error {
	if len(need) == 0 {
		return nil
	}
	if r.o.dialect == Postgres {
		res, err := tx.ExecContext(ctx, r.o.q.assignSeqBatch,
			column(need, rowID), column(need, func(rw *row) int64 { return rw.seq.Int64 }), column(need, rowStream))
		if err != nil {
			return fmt.Errorf("outbox: assign dedupe sequences: %w", err)
		}
		if n, _ := res.RowsAffected(); n != int64(len(need)) {
			return errRowsChanged
		}
		return nil
	}
	return eachRow(ctx, tx, r.o.q.assignSeq, "assign dedupe sequences", need, func(stmt *sql.Stmt, rw *row) error {
		res, err := stmt.ExecContext(ctx, rw.seq.Int64, rw.route.Stream, rw.id)
		if err != nil {
			return fmt.Errorf("outbox: assign dedupe sequences: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errRowsChanged
		}
		return nil
	})
}

// publish appends the ready rows: units in parallel (at most Concurrency at once), the rows
// of one unit in order, each unit stopping at its first failure. No publish starts once the
// lease's local deadline has passed or ctx is done; such rows are simply left for the next
// round (they keep their sequence).
func (r *Relay) publish(ctx context.Context, l *lease, ready []*row) {
	deadline := l.deadline
	var units [][]*row
	index := map[string]int{}
	for _, rw := range ready {
		i, ok := index[rw.unit]
		if !ok {
			i = len(units)
			index[rw.unit] = i
			units = append(units, nil)
		}
		units[i] = append(units[i], rw)
	}
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, unit := range units {
		sem <- struct{}{}
		wg.Add(1)
		go func(unit []*row) {
			defer func() { <-sem; wg.Done() }()
			for _, rw := range unit {
				if ctx.Err() != nil || !time.Now().Before(deadline) {
					return
				}
				ev, span := r.traced(ctx, rw)
				p, err := r.cfg.Publisher.PublishRouted(ctx, rw.route, ev, rw.seq.Int64)
				endSpan(span, err)
				if err != nil {
					rw.out = outcome{kind: failed, err: err}
					if ctx.Err() != nil {
						rw.out = outcome{kind: interrupted}
					}
					return
				}
				if r.afterPublish != nil {
					r.afterPublish(rw.event, p)
				}
				if p.Duplicate {
					rw.out = outcome{kind: duplicate, entryID: r.findEntry(ctx, rw, p.EntryID)}
				} else {
					rw.out = outcome{kind: published, entryID: p.EntryID}
				}
			}
		}(unit)
	}
	wg.Wait()
}

// streamClient is implemented by publishers that expose their Redis client
// (*engine.RedisBroker), which lets the relay find the entry id of a deduplicated row.
type streamClient interface {
	Client() redis.UniversalClient
}

// findEntry returns the entry id of a row whose append was found already done. The dedupe
// mark records the id of the last row appended to the stream, which may be a later row of
// the same stream; the row's own entry is at or before it, so the relay searches backwards
// from there for the entry carrying the row's event id. "" when it cannot be found.
func (r *Relay) findEntry(ctx context.Context, rw *row, markID string) string {
	sc, ok := r.cfg.Publisher.(streamClient)
	if !ok || markID == "" {
		return ""
	}
	msgs, err := sc.Client().XRevRangeN(ctx, rw.route.Stream, markID, "-", int64(4*r.cfg.BatchSize)).Result()
	if err != nil {
		return ""
	}
	for _, m := range msgs {
		if id, _ := m.Values[keyspace.FieldID].(string); id == rw.eventID {
			return m.ID
		}
	}
	return ""
}

// mark runs the second leased transaction of a round: it records what publish did. It
// runs even when ctx was cancelled during the publish (with a short deadline of its own),
// so a shutting-down relay leaves as little as possible for the next owner to deduplicate.
func (r *Relay) mark(ctx context.Context, l *lease, ready []*row) error {
	var done, bad, unused []*row
	for _, rw := range ready {
		switch rw.out.kind {
		case published, duplicate:
			done = append(done, rw)
		case failed:
			bad = append(bad, rw)
		case notTried:
			if rw.fresh {
				unused = append(unused, rw)
			}
		}
	}
	if len(done)+len(bad)+len(unused) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	tx, err := r.o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := r.fence(ctx, tx, l, 0); err != nil {
		return err
	}
	if err := r.markDone(ctx, tx, done); err != nil {
		return err
	}
	if err := r.releaseUnused(ctx, tx, unused); err != nil {
		return err
	}
	for _, rw := range bad {
		next := time.Now().Add(r.backoff(rw.attempts + 1)).UnixMilli()
		if _, err := tx.ExecContext(ctx, r.o.q.markFailed, rw.out.err.Error(), next, rw.id); err != nil {
			return fmt.Errorf("outbox: record the failure of row %d: %w", rw.id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: commit the published rows: %w", err)
	}
	return nil
}

// releaseUnused takes back the sequences given this round to rows that were never
// attempted (they waited behind a failure, or the round stopped at the lease deadline).
// Safe because no append with those sequences was ever started; it keeps the set of
// sequenced rows, which every round reads first, down to the rows actually attempted.
func (r *Relay) releaseUnused(ctx context.Context, tx *sql.Tx, unused []*row) error {
	if len(unused) == 0 {
		return nil
	}
	if r.o.dialect == Postgres {
		if _, err := tx.ExecContext(ctx, r.o.q.releaseSeqBatch, column(unused, rowID)); err != nil {
			return fmt.Errorf("outbox: release unused dedupe sequences: %w", err)
		}
		return nil
	}
	for _, rw := range unused {
		if _, err := tx.ExecContext(ctx, r.o.q.releaseSeq, rw.id); err != nil {
			return fmt.Errorf("outbox: release the dedupe sequence of row %d: %w", rw.id, err)
		}
	}
	return nil
}

func (r *Relay) markDone(ctx context.Context, tx *sql.Tx, done []*row) error {
	if len(done) == 0 {
		return nil
	}
	if r.o.dialect == Postgres {
		if _, err := tx.ExecContext(ctx, r.o.q.markPublishedBatch,
			column(done, rowID), column(done, rowStream), column(done, func(rw *row) string { return rw.out.entryID })); err != nil {
			return fmt.Errorf("outbox: mark rows published: %w", err)
		}
		return nil
	}
	return eachRow(ctx, tx, r.o.q.markPublished, "mark rows published", done, func(stmt *sql.Stmt, rw *row) error {
		if _, err := stmt.ExecContext(ctx, rw.route.Stream, rw.out.entryID, rw.id); err != nil {
			return fmt.Errorf("outbox: mark row %d published: %w", rw.id, err)
		}
		return nil
	})
}
