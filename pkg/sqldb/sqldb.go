// Package sqldb opens the SQL databases seqctl writes to beside the application: the
// outbox (package outbox) and the inbox and SQL sink (package inbox). One DSN form names
// either dialect, PostgreSQL through pgx or SQLite through modernc.org/sqlite, and both
// packages take the *sql.DB and Dialect that Open returns.
package sqldb

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver (no cgo)

	"github.com/seqctl/seqctl/pkg/redact"
)

// Dialect is the SQL database an outbox or an inbox lives in: the application's own, so
// that their rows commit or roll back with the application's writes.
type Dialect int

const (
	// Postgres is PostgreSQL through github.com/jackc/pgx/v5/stdlib: the production
	// dialect. The outbox relay is woken by LISTEN/NOTIFY on commit.
	Postgres Dialect = iota + 1
	// SQLite is SQLite through modernc.org/sqlite (pure Go, no cgo): the embedded default.
	// The outbox relay polls at its RelayConfig.PollInterval.
	SQLite
)

// String returns "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// driverName is the database/sql driver registered for the dialect.
func (d Dialect) driverName() string {
	if d == Postgres {
		return "pgx"
	}
	return "sqlite"
}

// sqliteDefaults are the connection settings Open adds to a SQLite DSN unless the DSN sets
// them itself: WAL so the outbox relay reads while the application writes, a 5 s busy timeout so
// concurrent writers wait for the write lock instead of failing with SQLITE_BUSY, and
// BEGIN IMMEDIATE so a transaction takes the write lock up front and never fails to upgrade
// a read lock halfway through (SQLITE_BUSY_SNAPSHOT).
var sqliteDefaults = []struct {
	key, value string
	aliases    []string // DSN keys that set the same thing
}{
	{"_pragma", "journal_mode(WAL)", []string{"_journal_mode", "_journal"}},
	{"_pragma", "busy_timeout(5000)", []string{"_busy_timeout", "_timeout"}},
	{"_txlock", "immediate", nil},
}

// ErrBadDSN is matched by every error Open returns for a DSN it cannot use.
var ErrBadDSN = errors.New("sqldb: unusable DSN")

// Open opens the database named by dsn and reports its dialect. Accepted forms:
//
//	postgres://user@host:5432/db?sslmode=disable   (also postgresql://)
//	sqlite://relative/path/to/file.db               (sqlite:///absolute/path.db for an absolute path)
//	sqlite::memory:                                 (a private in-memory database, for tests)
//
// A SQLite file DSN gets WAL journaling, a 5000 ms busy timeout and BEGIN IMMEDIATE
// transactions, each unless its query string sets that itself (_pragma=journal_mode(...),
// _pragma=busy_timeout(...) or their shorthands, _txlock=...); the query string is passed
// to modernc.org/sqlite. An in-memory database lives in one connection, so Open
// limits that pool to one connection: a caller holding a transaction then blocks every
// other user of the pool (the outbox relay, the sink) until it commits. A PostgreSQL DSN is passed to pgx unchanged (query parameters pgx does
// not know, such as search_path, become session parameters).
//
// Open does not connect; the first query does. The caller owns and closes the *sql.DB.
func Open(dsn string) (*sql.DB, Dialect, error) {
	dialect, driverDSN, err := parseDSN(dsn)
	if err != nil {
		return nil, 0, err
	}
	db, err := sql.Open(dialect.driverName(), driverDSN)
	if err != nil {
		return nil, 0, fmt.Errorf("sqldb: open %s database: %w", dialect, err)
	}
	if dialect == SQLite && isMemory(driverDSN) {
		db.SetMaxOpenConns(1)
		db.SetConnMaxIdleTime(0)
		db.SetConnMaxLifetime(0)
	}
	return db, dialect, nil
}

// parseDSN maps a seqctl DSN to a dialect and the DSN its driver expects.
func parseDSN(dsn string) (Dialect, string, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if _, err := url.Parse(dsn); err != nil {
			return 0, "", fmt.Errorf("%w: %v", ErrBadDSN, redact.Error(err, dsn))
		}
		return Postgres, dsn, nil
	case dsn == "sqlite::memory:", dsn == "sqlite://:memory:":
		return SQLite, ":memory:", nil
	case strings.HasPrefix(dsn, "sqlite://"):
		rest := strings.TrimPrefix(dsn, "sqlite://")
		path, query, _ := strings.Cut(rest, "?")
		if path == "" {
			return 0, "", fmt.Errorf("%w: %q names no file: use sqlite://path/to/file.db, sqlite:///absolute/path.db or sqlite::memory:", ErrBadDSN, redact.URL(dsn))
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return 0, "", fmt.Errorf("%w: query string of %q: %v", ErrBadDSN, redact.URL(dsn), redact.Error(err, dsn))
		}
	defaults:
		for _, def := range sqliteDefaults {
			for _, a := range def.aliases {
				if q.Has(a) {
					continue defaults
				}
			}
			switch {
			case def.key == "_pragma" && hasPragma(q["_pragma"], def.value):
			case def.key != "_pragma" && q.Has(def.key):
			default:
				q.Add(def.key, def.value)
			}
		}
		return SQLite, "file:" + path + "?" + q.Encode(), nil
	}
	return 0, "", fmt.Errorf("%w: %q: want postgres://..., sqlite://path/to/file.db or sqlite::memory:", ErrBadDSN, redact.URL(dsn))
}

// hasPragma reports whether the caller's _pragma list already sets the pragma that def
// sets (compared by name, so "busy_timeout(100)" overrides "busy_timeout(5000)").
func hasPragma(list []string, def string) bool {
	name, _, _ := strings.Cut(def, "(")
	for _, p := range list {
		n, _, _ := strings.Cut(strings.TrimSpace(p), "(")
		n, _, _ = strings.Cut(n, "=")
		if strings.EqualFold(strings.TrimSpace(n), name) {
			return true
		}
	}
	return false
}

func isMemory(driverDSN string) bool {
	return driverDSN == ":memory:" || strings.Contains(driverDSN, "mode=memory")
}
