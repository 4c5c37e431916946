package outbox

import (
	"database/sql"

	"github.com/seqctl/seqctl/pkg/sqldb"
)

// Dialect is the SQL database the outbox lives in (package sqldb, which the inbox shares).
type Dialect = sqldb.Dialect

// The dialects, as package sqldb names them.
const (
	// Postgres: the relay is woken by LISTEN/NOTIFY on commit.
	Postgres = sqldb.Postgres
	// SQLite: the relay polls at RelayConfig.PollInterval.
	SQLite = sqldb.SQLite
)

// ErrBadDSN is matched by every error Open returns for a DSN it cannot use.
var ErrBadDSN = sqldb.ErrBadDSN

// Open opens the database named by dsn and reports its dialect: sqldb.Open, which tells
// the DSN forms and the settings a SQLite file gets.
func Open(dsn string) (*sql.DB, Dialect, error) { return sqldb.Open(dsn) }
