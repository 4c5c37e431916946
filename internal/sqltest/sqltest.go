// Package sqltest gives tests a private database: a SQLite file in the test's temporary
// directory, or a PostgreSQL schema of their own on the server SEQCTL_TEST_POSTGRES_URL
// names (default: the local server, database test, user postgres). Without a reachable
// PostgreSQL the PostgreSQL tests skip, except under CI=true, where they fail.
package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"github.com/seqctl/seqctl/pkg/redact"
)

// The PostgreSQL server of the tests.
const (
	EnvPostgresURL     = "SEQCTL_TEST_POSTGRES_URL"
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// PostgresURL returns the server's URL: $SEQCTL_TEST_POSTGRES_URL, or the default.
func PostgresURL() string {
	if u := os.Getenv(EnvPostgresURL); u != "" {
		return u
	}
	return DefaultPostgresURL
}

var (
	pgOnce sync.Once
	pgErr  error
)

// RequirePostgres skips (or, with CI=true, fails) the test when PostgreSQL is not
// reachable. The probe runs once per test binary.
func RequirePostgres(tb testing.TB) {
	tb.Helper()
	pgOnce.Do(func() {
		db, err := sql.Open("pgx", PostgresURL())
		if err != nil {
			pgErr = err
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		pgErr = db.PingContext(ctx)
	})
	if pgErr == nil {
		return
	}
	msg := fmt.Sprintf("PostgreSQL is not reachable at %s (%v). Run these tests against a server where the user may CREATE SCHEMA: "+
		"set %s=postgres://USER@HOST:5432/DB?sslmode=disable (default %s); on Debian: "+
		"apt-get install postgresql && pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
		redact.URL(PostgresURL()), pgErr, EnvPostgresURL, DefaultPostgresURL)
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg + " [CI=true: PostgreSQL is required]")
	}
	tb.Skip(msg)
}

// SQLiteDSN returns the DSN of a fresh SQLite file in the test's temporary directory.
func SQLiteDSN(tb testing.TB, name string) string {
	tb.Helper()
	return "sqlite://" + filepath.Join(tb.TempDir(), name)
}

// PostgresDSN returns the DSN of a fresh PostgreSQL schema of the test's own (dropped at
// cleanup), made the first schema of search_path.
func PostgresDSN(tb testing.TB) string {
	tb.Helper()
	RequirePostgres(tb)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "seqctl_test_" + hex.EncodeToString(b)
	exec := func(q string) error {
		admin, err := sql.Open("pgx", PostgresURL())
		if err != nil {
			return err
		}
		defer admin.Close()
		_, err = admin.Exec(q)
		return err
	}
	if err := exec("CREATE SCHEMA " + schema); err != nil {
		tb.Fatalf("create schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		if err := exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(PostgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// PostgresAddr returns the host:port of the test server.
func PostgresAddr() string {
	u, err := url.Parse(PostgresURL())
	if err != nil {
		return ""
	}
	return u.Host
}
