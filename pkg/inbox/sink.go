package inbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"

	"github.com/seqctl/seqctl/internal/ctxwait"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/redact"
	"github.com/seqctl/seqctl/pkg/sqldb"
)

// DefaultConns is a sink's connections when SinkConfig.Conns is not set: the default
// concurrency of a SQL handler.
const DefaultConns = 16

// SinkConfig configures a SQL sink: one statement run per event, exactly once, through
// the inbox (the [handlers.deliver.sql] table of domain.toml).
type SinkConfig struct {
	// Handler is the handler's name, for messages.
	Handler string
	// DSN returns the database's DSN (read when the sink starts: from an environment
	// variable or a file, never from domain.toml). Its error is the sink's start error.
	DSN func() (string, error)
	// Statement runs once per event with $1 the event data (JSON text), $2 the event id,
	// $3 the partition key, $4 the stream entry id and $5 the lease generation (int64); it
	// uses the ones it needs, from $1 up to the highest it names.
	Statement string
	// Table is the inbox table (default DefaultTable).
	Table string
	// Timeout bounds one attempt (0: no bound but the engine's).
	Timeout time.Duration
	// Conns is the most connections the sink opens, and keeps open between events: the
	// handler's concurrency limit (default DefaultConns). With fewer kept idle than
	// events in flight, most transactions would open a connection of their own.
	Conns int
	// Logger receives one line per change of the database's reachability.
	Logger *slog.Logger
}

// Sink is a started SQL sink.
type Sink struct {
	cfg    SinkConfig
	params int    // how many of the five parameters the statement takes
	sql    string // the statement as prepared (see typedParams)

	mu     sync.Mutex
	ib     *Inbox
	stmt   *sql.Stmt
	db     *sql.DB
	dsn    string
	reason string // why the database is unusable now, "" when it is
}

// NewSink returns a sink that Start connects; its Handler may be registered at once.
func NewSink(cfg SinkConfig) (*Sink, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Conns <= 0 {
		cfg.Conns = DefaultConns
	}
	n, err := highestParam(cfg.Statement)
	if err != nil {
		return nil, fmt.Errorf("handler %s: statement: %w", cfg.Handler, err)
	}
	return &Sink{cfg: cfg, params: n, sql: cfg.Statement, reason: "not started"}, nil
}

// Start opens the database, waits while it cannot be reached (one log line per cause,
// Ready false meanwhile), prepares the statement and checks the inbox table. A problem
// that waiting cannot fix (the DSN unset or unusable, refused credentials, a database that
// does not exist, a statement the database refuses, a missing inbox table) returns an
// error naming the handler; ctx ending returns ctx.Err().
func (s *Sink) Start(ctx context.Context) error {
	dsn, err := s.cfg.DSN()
	if err != nil {
		return fmt.Errorf("handler %s: %w", s.cfg.Handler, err)
	}
	db, dialect, err := sqldb.Open(dsn)
	if err != nil {
		return fmt.Errorf("handler %s: %s", s.cfg.Handler, redact.Error(err, dsn))
	}
	ib, err := New(db, dialect, WithTable(s.cfg.Table))
	if err != nil {
		_ = db.Close()
		return fmt.Errorf("handler %s: %w", s.cfg.Handler, err)
	}
	if dialect == sqldb.Postgres {
		db.SetMaxOpenConns(s.cfg.Conns)
		db.SetMaxIdleConns(s.cfg.Conns)
		if typed, ok := typedParams(s.cfg.Statement); ok {
			s.sql, s.params = typed, 5
		}
	}
	s.mu.Lock()
	s.ib, s.db, s.dsn = ib, db, dsn
	s.mu.Unlock()
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		err := s.prepare(ctx)
		switch {
		case err == nil:
			s.reachable()
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !transient(err) || authProblem(err):
			return fmt.Errorf("handler %s: %s", s.cfg.Handler, s.clean(err))
		}
		s.unreachable(err)
		if !ctxwait.Sleep(ctx, backoff) {
			return ctx.Err()
		}
	}
}

// prepare checks the connection, the inbox table and the statement.
func (s *Sink) prepare(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, "SELECT 1 FROM "+s.cfg.Table+" WHERE 1 = 0"); err != nil {
		if transient(err) {
			return err
		}
		return fmt.Errorf("the inbox table %s cannot be read (%w): create it with 'seqctl inbox migrate --config FILE'", s.cfg.Table, err)
	}
	stmt, err := s.db.PrepareContext(ctx, s.sql)
	if err != nil {
		if transient(err) {
			return err
		}
		return fmt.Errorf("the database refused the statement: %w", err)
	}
	s.mu.Lock()
	s.stmt = stmt
	s.mu.Unlock()
	return nil
}

// Handler returns the handler: each event runs the statement once, in the inbox's
// transaction. While the database cannot be reached the handler waits and tries again,
// without returning (the attempt is not counted); an error the statement raises fails the
// attempt (retried, then the partition halts as configured).
func (s *Sink) Handler() engine.HandlerFunc {
	return func(ctx context.Context, ev engine.Event) error {
		d, ok := engine.DeliveryFrom(ctx)
		if !ok {
			return errors.New("inbox: the context carries no delivery: the handler runs outside the engine")
		}
		args := s.args(ev, d)
		return s.retrying(ctx, func(ctx context.Context, ib *Inbox, stmt *sql.Stmt) error {
			_, err := ib.Apply(ctx, d, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
				return err
			})
			return err
		})
	}
}

// BatchHandler returns the handler of a handler that takes runs of events (batch_max
// above 1, engine.Handler.BatchFunc): a run runs the statement once per event, in order,
// in one transaction with one inbox claim, for the run's last entry (Inbox.ApplyBatch),
// so its effects commit all together or not at all; events of the run that an earlier
// delivery applied are skipped. $4 is each event's own entry id. The database being
// unreachable is waited out as by Handler; an error the statement raises for any event
// fails the attempt of the whole run, naming the event.
func (s *Sink) BatchHandler() engine.BatchFunc {
	return func(ctx context.Context, evs []engine.Event) error {
		d, ok := engine.DeliveryFrom(ctx)
		if !ok {
			return errors.New("inbox: the context carries no delivery: the handler runs outside the engine")
		}
		return s.retrying(ctx, func(ctx context.Context, ib *Inbox, stmt *sql.Stmt) error {
			_, err := ib.ApplyBatch(ctx, d, evs, func(ctx context.Context, tx *sql.Tx, ev engine.Event) error {
				one, _ := engine.DeliveryFrom(ctx) // the event's own delivery (ApplyBatch)
				_, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, s.args(ev, one)...)
				return err
			})
			return err
		})
	}
}

// args returns the statement's parameters for ev delivered with d, as many as it names.
func (s *Sink) args(ev engine.Event, d engine.Delivery) []any {
	return []any{string(ev.Data), ev.ID, ev.Key, d.EntryID, d.Generation}[:s.params]
}

// retrying runs apply, each try within the sink's timeout, until it succeeds or fails
// for a reason other than reaching the database: while the database cannot be reached it
// waits and tries again (the attempt is not counted).
func (s *Sink) retrying(ctx context.Context, apply func(ctx context.Context, ib *Inbox, stmt *sql.Stmt) error) error {
	s.mu.Lock()
	ib, stmt := s.ib, s.stmt
	s.mu.Unlock()
	if ib == nil || stmt == nil {
		return fmt.Errorf("handler %s: the SQL sink is not started", s.cfg.Handler)
	}
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		err := s.attempt(ctx, ib, stmt, apply)
		switch {
		case err == nil:
			s.reachable()
			return nil
		case ctx.Err() != nil || !transient(err):
			return s.cleanErr(err)
		}
		s.unreachable(err)
		if !ctxwait.Sleep(ctx, backoff) {
			return ctx.Err()
		}
	}
}

// attempt makes one try of apply, within the sink's timeout.
func (s *Sink) attempt(ctx context.Context, ib *Inbox, stmt *sql.Stmt, apply func(ctx context.Context, ib *Inbox, stmt *sql.Stmt) error) error {
	if s.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	return apply(ctx, ib, stmt)
}

// Ready reports whether the database answers; reason says why not.
func (s *Sink) Ready() (ok bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason == "", s.reason
}

// Close closes the database.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	return s.db.Close()
}

// unreachable records and logs (once per cause) that the database cannot be used.
func (s *Sink) unreachable(err error) {
	reason := "the database of handler " + s.cfg.Handler + " cannot be reached: " + s.clean(err)
	s.mu.Lock()
	changed := s.reason == "" || cause(s.reason) != cause(reason)
	s.reason = reason
	s.mu.Unlock()
	if changed {
		s.cfg.Logger.Warn("database unreachable: waiting for it; events of this handler wait too", "handler", s.cfg.Handler, "err", s.clean(err))
	}
}

// reachable records that the database answers again.
func (s *Sink) reachable() {
	s.mu.Lock()
	was := s.reason
	s.reason = ""
	s.mu.Unlock()
	if was != "" && was != "not started" {
		s.cfg.Logger.Info("database reachable again", "handler", s.cfg.Handler)
	}
}

// cause is the part of a reason that names its kind (the text before a first colon of
// the error), so that one cause is logged once.
func cause(reason string) string {
	if i := strings.Index(reason, ": "); i >= 0 {
		rest := reason[i+2:]
		if j := strings.Index(rest, ": "); j >= 0 {
			return reason[:i+2+j]
		}
	}
	return reason
}

// clean words err without the DSN's secrets.
func (s *Sink) clean(err error) string { return s.cleanErr(err).Error() }

// cleanErr returns err, or when its text holds a secret of the DSN, the same text with
// the secret masked (an error a handler returns may end up in a halt record and logs).
func (s *Sink) cleanErr(err error) error {
	s.mu.Lock()
	dsn := s.dsn
	s.mu.Unlock()
	if dsn == "" {
		return err
	}
	if masked := redact.Error(err, dsn); masked.Error() != err.Error() {
		return masked
	}
	return err
}

// transient reports whether err is about reaching the database (connecting, a lost
// connection, the server shutting down or out of connections, a lock it could not
// get), rather than something the statement did.
func transient(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false // the attempt's timeout, or the engine ending it: not the database's state
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "57014":
			return false // query_canceled: the attempt's timeout, sent to the server
		case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "53"), strings.HasPrefix(pe.Code, "57"):
			return true // connection exception, insufficient resources, operator intervention
		case pe.Code == "40001" || pe.Code == "40P01":
			return true // serialization failure, deadlock: the same work may succeed again
		}
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff
		return code == 5 || code == 6 // SQLITE_BUSY, SQLITE_LOCKED
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err)
}

// authProblem reports a refusal that waiting does not fix: bad credentials, or a
// database that does not exist.
func authProblem(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "28") || pe.Code == "3D000")
}

// typedParams gives a PostgreSQL statement a type for each of the five parameters, in a
// common table expression it never reads, so that the statement may name any of them:
// PostgreSQL infers a parameter's type from where it is used, and refuses a statement
// that leaves one unused below the highest it names. A parameter the statement casts
// (such as $1::jsonb) is cast from that type. It reports false for a statement it cannot
// prefix (one that opens with neither INSERT, UPDATE, DELETE, SELECT nor WITH), which
// then must name $1 up to the highest parameter it uses.
func typedParams(stmt string) (string, bool) {
	const cte = "seqctl_parameters AS (SELECT $1::text AS data, $2::text AS event_id, $3::text AS partition_key, $4::text AS entry_id, $5::bigint AS generation)"
	body := skipComments(stmt)
	end := 0
	for end < len(body) && (body[end] >= 'a' && body[end] <= 'z' || body[end] >= 'A' && body[end] <= 'Z') {
		end++
	}
	switch strings.ToUpper(body[:end]) {
	case "INSERT", "UPDATE", "DELETE", "SELECT":
		return "WITH " + cte + " " + stmt, true
	case "WITH":
		rest := skipComments(body[end:])
		if len(rest) > len("RECURSIVE") && strings.EqualFold(rest[:len("RECURSIVE")], "RECURSIVE") {
			return "WITH RECURSIVE " + cte + ", " + rest[len("RECURSIVE"):], true
		}
		return "WITH " + cte + ", " + rest, true
	}
	return "", false
}

// skipComments drops the white space and comments that open s.
func skipComments(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		switch {
		case strings.HasPrefix(s, "--"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i+1:]
			} else {
				return ""
			}
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s, "*/"); i >= 0 {
				s = s[i+2:]
			} else {
				return ""
			}
		default:
			return s
		}
	}
}

// highestParam returns the highest $n the statement names (outside string literals,
// quoted identifiers, dollar-quoted strings and comments), 0 for none, and an error for
// $n above 5.
func highestParam(stmt string) (int, error) {
	if strings.TrimSpace(stmt) == "" {
		return 0, errors.New("is empty")
	}
	high := 0
	for i := 0; i < len(stmt); i++ {
		switch c := stmt[i]; {
		case c == '\'' || c == '"':
			i = skipQuoted(stmt, i, c)
		case c == '-' && strings.HasPrefix(stmt[i:], "--"):
			for i < len(stmt) && stmt[i] != '\n' {
				i++
			}
		case c == '/' && strings.HasPrefix(stmt[i:], "/*"):
			if j := strings.Index(stmt[i+2:], "*/"); j >= 0 {
				i += j + 3
			} else {
				i = len(stmt)
			}
		case c == '$':
			j := i + 1
			for j < len(stmt) && stmt[j] >= '0' && stmt[j] <= '9' {
				j++
			}
			if j > i+1 {
				n, _ := strconv.Atoi(stmt[i+1 : j])
				if n < 1 || n > 5 {
					return 0, fmt.Errorf("names $%d; the parameters are $1 the event data, $2 the event id, $3 the partition key, $4 the entry id and $5 the generation", n)
				}
				high = max(high, n)
				i = j - 1
			} else if tag := dollarTag(stmt[i:]); tag != "" {
				if k := strings.Index(stmt[i+len(tag):], tag); k >= 0 {
					i += len(tag) + k + len(tag) - 1
				} else {
					i = len(stmt)
				}
			}
		}
	}
	return high, nil
}

// skipQuoted returns the index of the quote that closes the literal opened at i (a
// doubled quote is part of it).
func skipQuoted(s string, i int, q byte) int {
	for j := i + 1; j < len(s); j++ {
		if s[j] == q {
			if j+1 < len(s) && s[j+1] == q {
				j++
				continue
			}
			return j
		}
	}
	return len(s)
}

// dollarTag returns the opening tag of a dollar-quoted string at the start of s ($$ or
// $name$), or "".
func dollarTag(s string) string {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1]
		case c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (j > 1 && c >= '0' && c <= '9'):
		default:
			return ""
		}
	}
	return ""
}
