package e2e

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/outbox"
)

// TestRunSQLSinkExactlyOnce: three 'seqctl run' instances project 20 keys x 100 events
// into a PostgreSQL table through the SQL sink, while for 30 s an instance is SIGKILLed
// and restarted every 2 s, one instance is SIGSTOPped past the lease TTL and resumed, and
// Redis (appendfsync always) is restarted from its AOF. Afterwards the table holds
// exactly one row per event, and per key the rows were applied in publish order (the
// bigserial column n is the order of application). The table has no unique constraint:
// the inbox alone keeps the duplicates out.
func TestRunSQLSinkExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s fault run: skipped with -short")
	}
	const keys, perKey, ttl = 20, 100, time.Second
	dsn := sqltest.PostgresDSN(t)
	db, _, err := outbox.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE steps (n bigserial PRIMARY KEY, key text NOT NULL, seq int NOT NULL, generation bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, "sqlsink.domain.toml", nil, redistest.Options{AOF: true})
	env := []string{"E2E_DB=" + dsn}
	if out, code, _ := seqctlCmd(t, env, "inbox", "migrate", "--config", f.config); code != 0 {
		t.Fatalf("inbox migrate: exit %d\n%s", code, out)
	}
	names := []string{"a", "b", "c"}
	procs := map[string]*proc{}
	var all []*proc
	starts := map[string]int{}
	start := func(name string) {
		starts[name]++
		p := f.start(fmt.Sprintf("%s-%d", name, starts[name]), env, "run", "--instance-id", name, "--log-format", "json", "--shutdown-timeout", "5s")
		procs[name] = p
		all = append(all, p)
	}
	for _, n := range names {
		start(n)
	}
	for _, n := range names {
		procs[n].waitReady(20 * time.Second)
	}

	ks := keyNames("k", keys)
	// The events go out in ten batches, one every 3 s, while the faults run.
	published := make(chan struct{})
	go func() {
		defer close(published)
		for b := 0; b < 10; b++ {
			f.publish(steps(ks, b*perKey/10+1, (b+1)*perKey/10))
			time.Sleep(3 * time.Second)
		}
	}()
	begin := time.Now()
	kills := 0
	for tick := 1; time.Since(begin) < 30*time.Second; tick++ {
		time.Sleep(2*time.Second - time.Since(begin)%(2*time.Second))
		victim := names[rand.IntN(len(names))]
		procs[victim].signal(syscall.SIGKILL)
		<-procs[victim].done
		start(victim)
		kills++
		switch tick {
		case 5: // an owner frozen past the lease TTL: the others take its partitions
			frozen := names[(slices.Index(names, victim)+1)%len(names)]
			procs[frozen].signal(syscall.SIGSTOP)
			time.Sleep(ttl * 5 / 2)
			procs[frozen].signal(syscall.SIGCONT)
		case 10: // Redis restarted from its AOF
			f.srv.Stop()
			time.Sleep(ttl)
			f.srv.StartAgain()
		}
	}
	<-published
	t.Logf("faults over %v: %d SIGKILLs and restarts, one SIGSTOP of %v, one Redis restart", time.Since(begin).Round(time.Second), kills, ttl*5/2)

	testkit.WaitFor(t, 90*time.Second, "every event applied", func() bool {
		var n int
		_ = db.QueryRow("SELECT count(DISTINCT (key, seq)) FROM steps").Scan(&n)
		return n == keys*perKey
	})
	time.Sleep(2 * time.Second) // a late duplicate would land now
	checkAppliedOnceInOrder(t, db, ks, perKey)

	refused, lost := 0, 0
	for _, p := range all {
		refused += strings.Count(p.logText(), "a newer owner of the partition applied its effects first")
		lost += strings.Count(p.logText(), "lease lost: stopping this partition")
	}
	t.Logf("stale commits refused by the inbox: %d (of %d partitions given up on a lost lease)", refused, lost)
	for _, n := range names {
		procs[n].stop(syscall.SIGTERM, 15*time.Second)
	}
}

// checkAppliedOnceInOrder: one row per event, and per key the seqs 1..perKey in the order
// of application.
func checkAppliedOnceInOrder(t *testing.T, db *sql.DB, keys []string, perKey int) {
	t.Helper()
	var total, dups int
	if err := db.QueryRow("SELECT count(*) FROM steps").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT count(*) FROM (SELECT key, seq FROM steps GROUP BY key, seq HAVING count(*) > 1) d").Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if total != len(keys)*perKey || dups != 0 {
		t.Errorf("%d rows, %d events applied more than once; want %d rows, none twice", total, dups, len(keys)*perKey)
	}
	for _, k := range keys {
		rows, err := db.Query("SELECT seq FROM steps WHERE key = $1 ORDER BY n", k)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		for rows.Next() {
			var s int
			_ = rows.Scan(&s)
			if s != want {
				t.Errorf("key %s: applied seq %d where %d was due", k, s, want)
				break
			}
			want++
		}
		rows.Close()
	}
}
