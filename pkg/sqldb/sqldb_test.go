package sqldb

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDSN(t *testing.T) {
	tests := []struct {
		dsn     string
		dialect Dialect
		driver  string
		wantErr string
	}{
		{dsn: "postgres://u@h:5432/db?sslmode=disable", dialect: Postgres, driver: "postgres://u@h:5432/db?sslmode=disable"},
		{dsn: "postgresql://u@h/db", dialect: Postgres, driver: "postgresql://u@h/db"},
		{dsn: "sqlite::memory:", dialect: SQLite, driver: ":memory:"},
		{dsn: "sqlite://data/app.db", dialect: SQLite,
			driver: "file:data/app.db?_pragma=journal_mode%28WAL%29&_pragma=busy_timeout%285000%29&_txlock=immediate"},
		{dsn: "sqlite:///var/lib/app.db?_txlock=deferred&_pragma=busy_timeout(100)", dialect: SQLite,
			driver: "file:/var/lib/app.db?_pragma=busy_timeout%28100%29&_pragma=journal_mode%28WAL%29&_txlock=deferred"},
		{dsn: "sqlite://", wantErr: "names no file"},
		{dsn: "mysql://u:secret@h/db", wantErr: "u:xxxxx@h"},
		{dsn: "app.db", wantErr: "want postgres://"},
	}
	for _, tc := range tests {
		t.Run(tc.dsn, func(t *testing.T) {
			d, driver, err := parseDSN(tc.dsn)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "secret") {
					t.Fatalf("parseDSN = %v; want an error containing %q, without the password", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]any{tc.dialect, tc.driver}, []any{d, driver}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
