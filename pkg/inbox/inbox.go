package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
	"github.com/seqctl/seqctl/pkg/sqldb"
)

// DefaultTable is the inbox table's name unless WithTable gives another.
const DefaultTable = "seqctl_inbox"

// ErrStale is returned (wrapping engine.ErrFenced) when the inbox row of the partition holds
// a higher generation than the delivery's: a newer owner has applied effects already, so
// this owner's lease is gone. Nothing was applied. The engine treats it as a lost lease,
// never as a failed attempt: the partition does not halt.
var ErrStale = fmt.Errorf("inbox: a newer owner of the partition applied its effects first: %w", engine.ErrFenced)

// Outcome says what Apply did.
type Outcome int

const (
	// Applied: fn ran and its effects committed with the delivery's entry id.
	Applied Outcome = iota + 1
	// Duplicate: the entry id was at or below the one applied: fn did not run, nothing
	// changed. The engine acknowledges the entry.
	Duplicate
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Inbox applies events exactly once, in stream order, into the database it lives in.
type Inbox struct {
	db      *sql.DB
	dialect sqldb.Dialect
	table   string
	q       queries

	// seen remembers, per handler and stream, the row as this inbox last read or wrote
	// it, so that an owner going on under the same generation skips reading the row
	// (see Apply).
	mu   sync.Mutex
	seen map[rowKey]rowState
}

type rowKey struct{ handler, stream string }

type rowState struct {
	entry keyspace.StreamID
	gen   int64
}

// seenLimit bounds the remembered rows; past it they are forgotten (and read again).
const seenLimit = 100_000

// Option configures New.
type Option func(*Inbox)

// WithTable names the inbox table (default DefaultTable): a lower-case SQL identifier of
// at most 40 bytes ([a-z_][a-z0-9_]*). On PostgreSQL it is created in the connection's
// current schema.
func WithTable(name string) Option { return func(i *Inbox) { i.table = name } }

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// New returns an Inbox over db (opened with sqldb.Open, or any *sql.DB of the dialect:
// with SQLite, transactions must take the write lock up front, as sqldb.Open's
// _txlock=immediate does). It does not touch the database: call Migrate once.
func New(db *sql.DB, dialect sqldb.Dialect, opts ...Option) (*Inbox, error) {
	i := &Inbox{db: db, dialect: dialect, table: DefaultTable, seen: map[rowKey]rowState{}}
	for _, opt := range opts {
		opt(i)
	}
	switch {
	case db == nil:
		return nil, errors.New("inbox: no database: open one with sqldb.Open")
	case dialect != sqldb.Postgres && dialect != sqldb.SQLite:
		return nil, fmt.Errorf("inbox: unknown dialect %v: use sqldb.Postgres or sqldb.SQLite", dialect)
	case !tableName.MatchString(i.table):
		return nil, fmt.Errorf("inbox: table name %q is not a lower-case SQL identifier of at most 40 bytes ([a-z_][a-z0-9_]*)", i.table)
	}
	i.q = newQueries(dialect, i.table)
	return i, nil
}

// Table returns the inbox table's name.
func (i *Inbox) Table() string { return i.table }

// DB returns the database the inbox was created with.
func (i *Inbox) DB() *sql.DB { return i.db }

// Apply applies one delivery in one transaction of the inbox's database. It reads the
// inbox row of (d.Handler, d.Stream), then
//
//   - refuses the delivery with ErrStale when the row holds a higher generation than
//     d.Generation: nothing runs;
//   - reports Duplicate when d.EntryID is at or below the row's entry id: nothing runs,
//     the effects were applied by an earlier delivery;
//   - otherwise runs fn in the transaction, then records d.EntryID and d.Generation in the
//     row, compare-and-set and locked until the commit, and commits: Applied.
//
// The row is checked again when it is written, just before the commit: an owner that
// stalled inside fn while a newer owner applied the entry has its transaction rolled back
// (ErrStale when the newer owner's generation is higher, Duplicate when the same entry
// was applied meanwhile), so effects commit once, in stream order per lane.
//
// An error of fn rolls everything back and is returned as it is (the attempt failed). A
// failed commit is returned too: whether it committed is then unknown, and the next
// delivery of the entry finds out.
func (i *Inbox) Apply(ctx context.Context, d engine.Delivery, fn func(ctx context.Context, tx *sql.Tx) error) (Outcome, error) {
	if d.Handler == "" || d.Stream == "" || d.EntryID == "" {
		return 0, fmt.Errorf("inbox: the delivery names no handler, stream or entry id (%+v): run the handler under the engine", d)
	}
	id := keyspace.ParseStreamID(d.EntryID)
	key := rowKey{d.Handler, d.Stream}
	// Under the generation that wrote the remembered row, nobody else can have written
	// it since (a newer owner holds a higher generation, and the claim below refuses this
	// one then): an entry at or below it is a duplicate, and a later one needs no read.
	known, sure := i.remembered(key, d.Generation)
	if sure && !known.entry.Less(id) {
		return Duplicate, nil
	}
	tx, err := i.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if !sure {
		if out, _, err := i.check(ctx, tx, d, id); out != 0 || err != nil {
			i.forget(key)
			return i.settle(ctx, tx, d, out, err)
		}
	}
	if err := fn(ctx, tx); err != nil {
		i.forget(key)
		return 0, err
	}
	res, err := tx.ExecContext(ctx, i.q.claim, d.Handler, d.Stream, int64(id.MS), int64(id.Seq), d.Generation, floorOf(d.Stream))
	if err != nil {
		return 0, fmt.Errorf("inbox: record %s of %s on %s: %w", d.EntryID, d.Handler, d.Stream, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("inbox: record %s of %s on %s: %w", d.EntryID, d.Handler, d.Stream, err)
	} else if n == 0 {
		i.forget(key)
		// Applied or superseded while fn ran: the row is locked now, read it again. fn's
		// effects go with the rollback.
		out, _, err := i.check(ctx, tx, d, id)
		if out == 0 && err == nil {
			err = fmt.Errorf("inbox: the row of %s on %s refused %s for no reason it shows", d.Handler, d.Stream, d.EntryID)
		}
		if err == nil {
			return out, nil
		}
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		i.forget(key)
		return 0, fmt.Errorf("inbox: commit the effects of %s on %s: %w", d.EntryID, d.Stream, err)
	}
	i.remember(key, rowState{entry: id, gen: d.Generation})
	return Applied, nil
}

// remembered returns the row of key as this inbox last wrote it, and whether it was
// written under generation gen.
func (i *Inbox) remembered(key rowKey, gen int64) (rowState, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	r, ok := i.seen[key]
	return r, ok && r.gen == gen
}

func (i *Inbox) remember(key rowKey, r rowState) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if len(i.seen) >= seenLimit {
		clear(i.seen)
	}
	i.seen[key] = r
}

func (i *Inbox) forget(key rowKey) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.seen, key)
}

// settle ends a transaction that runs nothing: a duplicate delivered by a newer owner
// than the one that applied the entry raises the row's generation, so that the older
// owner is refused from now on, even before the newer one applies an entry of its own.
func (i *Inbox) settle(ctx context.Context, tx *sql.Tx, d engine.Delivery, out Outcome, err error) (Outcome, error) {
	if err != nil || out != Duplicate {
		return out, err
	}
	res, err := tx.ExecContext(ctx, i.q.raise, d.Handler, d.Stream, d.Generation)
	if err != nil {
		return 0, fmt.Errorf("inbox: raise the generation of %s on %s: %w", d.Handler, d.Stream, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		if err := tx.Commit(); err != nil {
			return 0, fmt.Errorf("inbox: raise the generation of %s on %s: %w", d.Handler, d.Stream, err)
		}
	}
	return Duplicate, nil
}

// check reads the row of the delivery's handler and stream: ErrStale when a newer
// generation applied, Duplicate when entry id was applied, 0 when it may be applied;
// applied is the row's entry (the zero id when there is no row).
func (i *Inbox) check(ctx context.Context, tx *sql.Tx, d engine.Delivery, id keyspace.StreamID) (out Outcome, applied keyspace.StreamID, err error) {
	var ms, seq, gen int64
	err = tx.QueryRowContext(ctx, i.q.read, d.Handler, d.Stream).Scan(&ms, &seq, &gen)
	applied = keyspace.StreamID{MS: uint64(ms), Seq: uint64(seq)}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		out, err = i.checkFloor(ctx, tx, d)
		return out, keyspace.StreamID{}, err
	case err != nil:
		return 0, applied, fmt.Errorf("inbox: read the row of %s on %s: %w", d.Handler, d.Stream, err)
	case gen > d.Generation:
		return 0, applied, fmt.Errorf("%w (the row holds generation %d, this delivery %d)", ErrStale, gen, d.Generation)
	case !applied.Less(id):
		return Duplicate, applied, nil
	}
	return 0, applied, nil
}

// checkFloor checks a delivery to a stream without a row against the floor of its hash
// slot: the rows Prune removed there held generations up to it, so a lower generation may
// be an owner that a newer one superseded before the partition was reaped (ErrStale). An
// owner of another stream of the slot whose lease is older than a prune and whose stream
// has no row yet is refused too, once: it takes its lease again under a new generation,
// above the floor (the slot's generations come from one master's clock).
func (i *Inbox) checkFloor(ctx context.Context, tx *sql.Tx, d engine.Delivery) (Outcome, error) {
	var floor int64
	err := tx.QueryRowContext(ctx, i.q.floor, d.Handler, floorOf(d.Stream)).Scan(&floor)
	switch {
	case err != nil:
		return 0, fmt.Errorf("inbox: read the floor of %s: %w", d.Handler, err)
	case floor > d.Generation:
		return 0, fmt.Errorf("%w (%s has no row, and rows pruned before held generations up to %d, this delivery %d)", ErrStale, d.Stream, floor, d.Generation)
	}
	return 0, nil
}

// TxFunc applies an event's effects in the inbox's transaction. It must not commit or
// roll back tx.
type TxFunc func(ctx context.Context, tx *sql.Tx, ev engine.Event) error

// Handler returns an engine handler that applies each event through the inbox: fn runs
// at most once per entry with effects that commit, in stream order per lane.
func (i *Inbox) Handler(fn TxFunc) engine.HandlerFunc {
	return func(ctx context.Context, ev engine.Event) error {
		d, ok := engine.DeliveryFrom(ctx)
		if !ok {
			return errors.New("inbox: the context carries no delivery: the handler runs outside the engine")
		}
		_, err := i.Apply(ctx, d, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx, ev) })
		return err
	}
}
