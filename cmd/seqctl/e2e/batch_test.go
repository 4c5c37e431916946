package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
	"github.com/seqctl/seqctl/pkg/outbox"
)

// TestBatchPoisonInTheMiddleOfARun: 'seqctl run' projects runs of up to 10 events of one
// key (batch_max = 10, max_retries = 2) into PostgreSQL through the SQL sink, each run in
// one transaction. Key k0's nine events are published before the worker starts, so they
// form one run, and its fifth breaks a CHECK constraint: the run fails as a whole twice,
// then its events run one at a time. Afterwards the four events before the poison are
// applied exactly once, nothing after it is, and k0 halts at the poison's entry with the
// run's two attempts ('head show', 'partitions list'); k1, whose run has no poison, is
// applied whole. 'head skip' resumes k0: the four events after the poison are applied
// exactly once, in order, and the poison never is. The engine's counters show each event
// ran no more often than that.
func TestBatchPoisonInTheMiddleOfARun(t *testing.T) {
	const perKey, poison = 9, 5
	dsn := sqltest.PostgresDSN(t)
	db, _, err := outbox.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE steps (n bigserial PRIMARY KEY, key text NOT NULL, seq int NOT NULL, entry text NOT NULL, generation bigint NOT NULL,
		CONSTRAINT no_poison CHECK (key <> 'k0' OR seq <> 5))`); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, "batch.domain.toml", nil)
	env := []string{"E2E_DB=" + dsn}
	if out, code, _ := seqctlCmd(t, env, "inbox", "migrate", "--config", f.config); code != 0 {
		t.Fatalf("inbox migrate: exit %d\n%s", code, out)
	}
	f.publish(steps([]string{"k0", "k1"}, 1, perKey))
	entries := f.entriesOf("k0")
	if len(entries) != perKey {
		t.Fatalf("k0's stream holds %d entries, want %d", len(entries), perKey)
	}

	a := f.run("a", env, "--metrics-addr", "127.0.0.1:0")
	metrics := metricsAddr(t, a) + "/metrics"
	a.waitReady(20 * time.Second)
	halt := f.waitHalt("k0")
	testkit.WaitFor(t, 15*time.Second, "k1's run applied", func() bool { return len(appliedSeqs(t, db, "k1")) == perKey })

	// The halt names the poison's entry, with the run's attempts and the database's error.
	if halt.EntryID != entries[poison-1] || halt.Attempts != 2 || !strings.Contains(halt.Error, "no_poison") {
		t.Errorf("halt at %s after %d attempts (%q); want the poison's entry %s after 2 attempts, the CHECK constraint's error",
			halt.EntryID, halt.Attempts, halt.Error, entries[poison-1])
	}
	checkApplied(t, db, "k0", []int{1, 2, 3, 4})
	checkApplied(t, db, "k1", []int{1, 2, 3, 4, 5, 6, 7, 8, 9})
	// The poison's run was one batch of all nine: the worker split it on its last attempt.
	split := a.waitLog("a batch failed its last attempt", 5*time.Second)
	if !strings.Contains(split, `"events":9`) || !strings.Contains(split, entries[0]) {
		t.Errorf("the split of k0's run: %s; want a run of 9 events from %s", split, entries[0])
	}

	// What the operator sees. (head show's attempts is the entry's own delivery count
	// while it is pending, 1 for an entry that was not the head of its run; the halt
	// record holds the run's.)
	var head struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		LastError string `json:"last_error"`
	}
	out := f.mustSeqctl("head", "show", "step:k0", "--handler", "Stepper", "-o", "json")
	if err := json.Unmarshal([]byte(out), &head); err != nil {
		t.Fatalf("head show -o json: %v\n%s", err, out)
	}
	if head.ID != entries[poison-1] || head.Status != "halted" || !strings.Contains(head.LastError, "no_poison") {
		t.Errorf("head show: %+v; want the poison's entry %s, halted with the constraint's error", head, entries[poison-1])
	}
	var inspected struct {
		Handlers []struct {
			Handler string             `json:"handler"`
			Halt    *engine.HaltRecord `json:"halt"`
		} `json:"handlers"`
	}
	out = f.mustSeqctl("partitions", "inspect", "step:k0", "-o", "json")
	if err := json.Unmarshal([]byte(out), &inspected); err != nil {
		t.Fatalf("partitions inspect -o json: %v\n%s", err, out)
	}
	if len(inspected.Handlers) != 1 || inspected.Handlers[0].Halt == nil || inspected.Handlers[0].Halt.EntryID != entries[poison-1] || inspected.Handlers[0].Halt.Attempts != 2 {
		t.Errorf("partitions inspect: %s; want Stepper's halt record at %s after 2 attempts", out, entries[poison-1])
	}
	var rows []listedPartition
	out = f.mustSeqctl("partitions", "list", "-o", "json")
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("partitions list -o json: %v\n%s", err, out)
	}
	states := map[string]string{}
	for _, r := range rows {
		s := r.State
		if r.HaltedEntryID != nil {
			s += " at " + *r.HaltedEntryID
		}
		states[r.Stream] = s
	}
	if want := "halted at " + entries[poison-1]; states["step:k0"] != want || strings.HasPrefix(states["step:k1"], "halted") {
		t.Errorf("partitions list: %v; want step:k0 %s and step:k1 not halted", states, want)
	}

	// Skipping the poison resumes the key after it.
	f.mustSeqctl("head", "skip", "step:k0", "--handler", "Stepper", "--expect-id", entries[poison-1], "--yes")
	testkit.WaitFor(t, 15*time.Second, "k0's events after the poison applied", func() bool { return len(appliedSeqs(t, db, "k0")) == perKey-1 })
	time.Sleep(500 * time.Millisecond) // a late duplicate would land now
	checkApplied(t, db, "k0", []int{1, 2, 3, 4, 6, 7, 8, 9})
	checkApplied(t, db, "k1", []int{1, 2, 3, 4, 5, 6, 7, 8, 9})
	if h, err := engine.NewRedisBroker(f.rdb).Halt(context.Background(), engine.HeadRef{Group: "Stepper", Category: "step", Key: "k0"}); err != nil || h != nil {
		t.Errorf("k0 after the skip: halt %+v, %v; want none", h, err)
	}
	// Each applied row carries its own event's entry ($4), in the stream's order.
	var wrong int
	if err := db.QueryRow(`SELECT count(*) FROM steps WHERE key = 'k0' AND entry <> ($1::text[])[seq]`, "{"+strings.Join(entries, ",")+"}").Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("%d of k0's rows carry another event's entry id", wrong)
	}
	// The engine ran each event no more than this, whatever the inbox would have absorbed:
	// k1's 9 and k0's 8 handled once each; k0's run failed twice as a whole (9 events each
	// time, the first retried), and its poison once alone.
	_, body := get(t, metrics)
	for _, want := range []string{
		`seqctl_events_processed_total{category="step",handler="Stepper"} 17`,
		`seqctl_events_failed_total{category="step",handler="Stepper"} 19`,
		`seqctl_events_retried_total{category="step",handler="Stepper"} 9`,
		`seqctl_partition_halts_total{category="step",handler="Stepper"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("the metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grepLines([]byte(body), "seqctl_events_", "seqctl_partition_halts"))
	}
	a.stop(syscall.SIGTERM, 15*time.Second)
}

// entriesOf returns the entry ids of key's partition stream of category step, in order.
func (f *fixture) entriesOf(key string) []string {
	f.t.Helper()
	msgs, err := f.rdb.XRange(context.Background(), keyspace.For(f.rdb).PartitionStream("step", key), "-", "+").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// appliedSeqs returns key's seqs in the steps table in the order they were applied (the
// bigserial n), duplicates included.
func appliedSeqs(t *testing.T, db *sql.DB, key string) []int {
	t.Helper()
	rows, err := db.Query("SELECT seq FROM steps WHERE key = $1 ORDER BY n", key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var s int
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// checkApplied fails unless key's rows are exactly want: each seq once, in that order.
func checkApplied(t *testing.T, db *sql.DB, key string, want []int) {
	t.Helper()
	if got := appliedSeqs(t, db, key); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("key %s: applied seqs %v (in the order applied), want %v: each once, in order", key, got, want)
	}
}
