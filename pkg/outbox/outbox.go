package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/seqctl/seqctl/pkg/engine"
)

// DefaultTable is the outbox table name when WithTable is not given. Migrate also creates
// DefaultTable+"_lease" (the relay's category leases) and DefaultTable+"_meta" (schema
// version and the backfill suffix the CHECK constraint was generated from).
const DefaultTable = "seqctl_outbox"

// Status is the state of an outbox row.
type Status string

// Row states. A row starts PENDING; the relay moves it to PUBLISHED, or to FAILED after a
// publish error (it is retried with backoff and stays unpublished), or to ABANDONED when it
// can never be published (an invalid partition key, an event type the domain does not
// declare). PUBLISHED and ABANDONED are final.
const (
	StatusPending   Status = "PENDING"
	StatusFailed    Status = "FAILED"
	StatusPublished Status = "PUBLISHED"
	StatusAbandoned Status = "ABANDONED"
)

// Outbox writes outbox rows in the caller's transactions and reads the table for the relay
// and for Status. It is safe for concurrent use; it holds no connection of its own (the
// caller owns the *sql.DB).
type Outbox struct {
	db      *sql.DB
	dialect Dialect
	dom     *engine.Domain
	table   string
	suffix  string            // backfill suffix the keys are validated against
	keys    map[string]string // category -> partition-key field, whatever the broker
	q       queries
}

// Option configures New.
type Option func(*Outbox)

// WithTable names the outbox table (default DefaultTable). The name must be a lower-case
// SQL identifier of at most 40 bytes ([a-z_][a-z0-9_]*), since the lease and meta tables,
// indexes, the trigger and the constraints are named after it. On PostgreSQL the table is
// created in the connection's current schema (the first schema of search_path).
func WithTable(name string) Option { return func(o *Outbox) { o.table = name } }

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// New returns an Outbox over db for the initialized domain d. It does not touch the
// database: call Migrate once (it is idempotent) before the first Enqueue.
//
// The partition-key rules come from d: the categories d partitions (Domain.PartitionKeys,
// whether or not the broker applies partitioning) and its backfill suffix
// (Domain.BackfillSuffix, default engine.DefaultBackfillSuffix).
func New(db *sql.DB, dialect Dialect, d *engine.Domain, opts ...Option) (*Outbox, error) {
	o := &Outbox{db: db, dialect: dialect, dom: d, table: DefaultTable}
	for _, opt := range opts {
		opt(o)
	}
	switch {
	case db == nil:
		return nil, errors.New("outbox: no database: open one with outbox.Open")
	case dialect != Postgres && dialect != SQLite:
		return nil, fmt.Errorf("outbox: unknown dialect %v: use outbox.Postgres or outbox.SQLite", dialect)
	case d == nil || !d.Initialized():
		return nil, errors.New("outbox: the domain is not initialized: call Domain.Init before outbox.New")
	case !tableName.MatchString(o.table):
		return nil, fmt.Errorf("outbox: table name %q is not a lower-case SQL identifier of at most 40 bytes ([a-z_][a-z0-9_]*)", o.table)
	}
	o.suffix = d.BackfillSuffix
	if o.suffix == "" {
		o.suffix = engine.DefaultBackfillSuffix
	}
	o.keys = d.PartitionKeys()
	o.q = newQueries(dialect, o.table)
	return o, nil
}

// Table returns the outbox table name.
func (o *Outbox) Table() string { return o.table }

// Dialect returns the database dialect.
func (o *Outbox) Dialect() Dialect { return o.dialect }

// DB returns the database the outbox was created with.
func (o *Outbox) DB() *sql.DB { return o.db }

// Event is an event to enqueue.
type Event struct {
	// ID is the event id, unique in the table; a random UUID (engine.NewEventID) when
	// empty. Reusing an id fails the insert, which makes a retried application operation
	// that enqueues under a deterministic id idempotent.
	ID string
	// Type is a declared event type name; its category comes from the domain.
	Type string
	// Data is the JSON payload. For a partitioned category the partition key is read
	// from its top-level field named by sequential_by.
	Data []byte
	// Priority is the lane priority (default 0). With priority lanes enabled, a row below
	// the lanes threshold is published to its partition's backfill lane.
	Priority int
}

// Enqueued describes the row Enqueue wrote.
type Enqueued struct {
	RowID    int64  `json:"row_id"`
	EventID  string `json:"event_id"`
	Category string `json:"category"`
	Key      string `json:"key,omitempty"`
}

// Enqueue writes one outbox row inside the caller's transaction, so the event is recorded
// if and only if tx commits. For a partitioned category the key is extracted from the
// payload and validated first, whatever the broker: a bad key returns the
// *engine.InvalidKeyError (its Rule says which rule, its Category and Field where) and
// nothing is written, so the caller rolls back and its operation fails. Other errors: an
// undeclared event type (matches engine.ErrUnknownEvent), a payload that is not JSON (or,
// for a partitioned category, not a JSON object), and database errors, wrapped.
//
// On PostgreSQL the insert takes a transaction-level advisory lock on (category, key)
// (see docs/outbox.md): a second transaction enqueueing the same key waits until this one
// commits or rolls back, which keeps same-key rows in commit order. Enqueue keys in a
// consistent order when one transaction enqueues several keys, or two such transactions
// can deadlock (PostgreSQL then aborts one of them).
//
// When ctx carries a valid span context (OpenTelemetry), the row stores it as W3C trace
// context, and the relay publishes the event with it.
//
// Enqueue is safe for concurrent use with different transactions.
func (o *Outbox) Enqueue(ctx context.Context, tx *sql.Tx, ev Event) (Enqueued, error) {
	if tx == nil {
		return Enqueued{}, errors.New("outbox: Enqueue needs the caller's transaction (tx is nil)")
	}
	et, ok := o.dom.Event(ev.Type)
	if !ok {
		return Enqueued{}, fmt.Errorf("outbox: %w %q: declare it in the domain", engine.ErrUnknownEvent, ev.Type)
	}
	if !json.Valid(ev.Data) {
		return Enqueued{}, fmt.Errorf("outbox: the payload of %s is not valid JSON", ev.Type)
	}
	var key sql.NullString
	if field, partitioned := o.keys[et.Category]; partitioned {
		k, err := engine.ExtractKey(ev.Data, field, o.suffix)
		if err != nil {
			var ike *engine.InvalidKeyError
			if errors.As(err, &ike) {
				ike.Category = et.Category
				return Enqueued{}, ike
			}
			return Enqueued{}, fmt.Errorf("outbox: %s of category %q: %w", ev.Type, et.Category, err)
		}
		key = sql.NullString{String: k, Valid: true}
	}
	id := ev.ID
	if id == "" {
		id = engine.NewEventID()
	}
	tp, ts := engine.TraceHeaders(ctx)
	var rowID int64
	err := tx.QueryRowContext(ctx, o.q.insert, id, ev.Type, et.Category, key, string(ev.Data), ev.Priority,
		nullString(tp), nullString(ts)).Scan(&rowID)
	if err != nil {
		return Enqueued{}, fmt.Errorf("outbox: insert %s into %s (did Migrate run?): %w", ev.Type, o.table, err)
	}
	return Enqueued{RowID: rowID, EventID: id, Category: et.Category, Key: key.String}, nil
}

// nullString is s, or NULL when empty.
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
