package outbox

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/keyspace"
	"github.com/seqctl/seqctl/pkg/outbox"
)

// migrate, enqueue in the application's transaction, relay --once, status: the rows are
// on their partition streams and the status counts them as published.
func TestOutboxCommandsSQLite(t *testing.T) {
	t.Run("node", func(t *testing.T) {
		srv := redistest.Start(t)
		outboxCommands(t, srv.URL, srv.Client(t))
	})
	// seqctl relay --cluster on a 3-master Redis Cluster.
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3)
		outboxCommands(t, c.URL, c.Client(t), "--cluster")
	})
}

func outboxCommands(t *testing.T, url string, rdb redis.UniversalClient, global ...string) {
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "outbox.db")
	cfgPath := cmdtest.WriteDomain(t, "outbox", "DSN", dsn)
	if r := cmdtest.RunCLI(t, false, "outbox", "migrate", "--config", cfgPath); r.Code != 0 {
		t.Fatalf("migrate: %d %s", r.Code, r.Stderr)
	}
	if r := cmdtest.RunCLI(t, false, "outbox", "migrate", "--config", cfgPath); r.Code != 0 {
		t.Fatalf("migrate is idempotent: %d %s", r.Code, r.Stderr)
	}

	enqueueOrders(t, cfgPath, dsn, "a", "b", "a")

	if r := cmdtest.RunCLI(t, false, append([]string{"relay", "--once", "--config", cfgPath, "--redis-url", url}, global...)...); r.Code != 0 {
		t.Fatalf("relay --once: %d %s", r.Code, r.Stderr)
	}
	ks := keyspace.For(rdb)
	sa, sb := ks.PartitionStream("order", "a"), ks.PartitionStream("order", "b")
	if a, b := rdb.XLen(context.Background(), sa).Val(), rdb.XLen(context.Background(), sb).Val(); a != 2 || b != 1 {
		t.Fatalf("streams: %s=%d %s=%d, want 2 and 1", sa, a, sb, b)
	}
	if members := ks.IndexMembers(context.Background(), rdb, "order").Val(); len(members) != 2 {
		t.Fatalf("partition index of order: %v, want a and b", members)
	}
	r := cmdtest.RunCLI(t, false, "outbox", "status", "--config", cfgPath, "-o", "json")
	if r.Code != 0 {
		t.Fatalf("status: %d %s", r.Code, r.Stderr)
	}
	var rep outbox.StatusReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, r.Stdout)
	}
	if rep.Counts.Published != 3 || rep.Backlog.Rows != 0 {
		t.Fatalf("status = %+v", rep.Counts)
	}
	if r := cmdtest.RunCLI(t, false, "outbox", "status", "--config", cfgPath); r.Code != 0 || !strings.Contains(r.Stdout, "published 3") {
		t.Fatalf("status table: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// Without an [outbox] table the commands say what to add and exit 2.
func TestOutboxCommandsNeedTheTable(t *testing.T) {
	r := cmdtest.RunCLI(t, false, "outbox", "status", "--config", "../../../../testdata/demo/domain.toml")
	if r.Code != cmdutil.ExitUsage || !strings.Contains(r.Stderr, "no [outbox] table") {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// [broker] min_replicas reaches the relay: with the replica stopped, relay --once appends
// but marks nothing PUBLISHED, exits 1 and says why; with the replica back it marks the rows
// after one WAIT on the primary, without appending them again.
func TestRelayOnceMinReplicas(t *testing.T) {
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "outbox.db")
	cfgPath := cmdtest.WriteDomain(t, "outbox-replicas", "DSN", dsn)
	if r := cmdtest.RunCLI(t, false, "outbox", "migrate", "--config", cfgPath); r.Code != 0 {
		t.Fatalf("migrate: %d %s", r.Code, r.Stderr)
	}
	enqueueOrders(t, cfgPath, dsn, "a", "b")
	published := func() int {
		t.Helper()
		r := cmdtest.RunCLI(t, false, "outbox", "status", "--config", cfgPath, "-o", "json")
		var rep outbox.StatusReport
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
			t.Fatalf("status JSON: %v\n%s%s", err, r.Stdout, r.Stderr)
		}
		return int(rep.Counts.Published)
	}
	rdb := srv.Client(t)

	replica.Stop()
	r := cmdtest.RunCLI(t, false, "relay", "--once", "--config", cfgPath, "--redis-url", srv.URL)
	t.Logf("relay --once with the replica down: exit %d\n%s", r.Code, r.Stderr)
	if r.Code != cmdutil.ExitFailure || !strings.Contains(r.Stderr, "appended but left unpublished") || !strings.Contains(r.Stderr, "0 of the 1 required replicas") {
		t.Fatalf("relay --once with the replica down: exit %d, stderr:\n%s\nwant exit 1 saying why", r.Code, r.Stderr)
	}
	if n := published(); n != 0 {
		t.Fatalf("%d rows published with the replica down, want 0", n)
	}

	replica.StartAgain()
	replica.WaitLinkUp(t)
	before := redistest.CommandCalls(t, rdb, "wait")
	time.Sleep(300 * time.Millisecond) // the rows' retry backoff
	if r := cmdtest.RunCLI(t, false, "relay", "--once", "--config", cfgPath, "--redis-url", srv.URL); r.Code != 0 {
		t.Fatalf("relay --once with the replica back: %d %s", r.Code, r.Stderr)
	}
	if n := redistest.CommandCalls(t, rdb, "wait") - before; n != 1 {
		t.Errorf("WAIT calls = %d, want 1", n)
	}
	if n := published(); n != 2 {
		t.Fatalf("%d rows published with the replica back, want 2", n)
	}
	if a, b := rdb.XLen(context.Background(), "order:a").Val(), rdb.XLen(context.Background(), "order:b").Val(); a != 1 || b != 1 {
		t.Fatalf("streams: order:a=%d order:b=%d, want each row appended once", a, b)
	}
}

// enqueueOrders enqueues an OrderPlaced event for each client, in one transaction of the
// application, in the outbox at dsn of the domain at cfgPath.
func enqueueOrders(t *testing.T, cfgPath, dsn string, clients ...string) {
	t.Helper()
	_, dom := cmdtest.LoadDomain(t, cfgPath)
	db, dialect, err := outbox.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ob, err := outbox.New(db, dialect, dom)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		if _, err := ob.Enqueue(context.Background(), tx, outbox.Event{Type: "OrderPlaced", Data: []byte(`{"client_id":"` + c + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
