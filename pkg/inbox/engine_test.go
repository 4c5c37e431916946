package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/enginetest"
	"github.com/seqctl/seqctl/internal/faultproxy"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/inbox"
	"github.com/seqctl/seqctl/pkg/sqldb"
)

type order struct {
	Client string `json:"client_id"`
	Seq    int    `json:"seq"`
}

// orderDomain is a domain whose Projector handles OrderPlaced events with fn, one
// partition per client_id.
func orderDomain(t testing.TB, fn engine.HandlerFunc) *engine.Domain {
	t.Helper()
	d := engine.NewDomain("shop").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "seq"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order",
			Handles: []string{"OrderPlaced"}, SequentialBy: "client_id", Func: fn})
	if err := d.Init(engine.NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	return d
}

// An owner frozen past its lease TTL while it handles an event loses the partition; the
// new owner applies the event through the inbox, and when the frozen owner goes on, its
// commit is refused (even sent with a context its engine has not cancelled yet): the new
// owner's effects are the only ones. On PostgreSQL the owner stalls inside its
// transaction, after its effects are written and before the commit; on SQLite, where a
// transaction in progress holds every other writer off, it stalls before its transaction.
func TestFrozenOwnersCommitIsRefused(t *testing.T) {
	for _, dialect := range []string{"postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			dsn := sqltest.SQLiteDSN(t, "effects.db")
			if dialect == "postgres" {
				dsn = sqltest.PostgresDSN(t)
			}
			frozenOwnerRun(t, dsn)
		})
	}
}

func frozenOwnerRun(t *testing.T, dsn string) {
	db, dialect, err := sqldb.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ib, err := inbox.New(db, dialect)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ddl := "CREATE TABLE effects (n INTEGER PRIMARY KEY AUTOINCREMENT, client text, seq INTEGER, generation INTEGER)"
	if dialect == sqldb.Postgres {
		ddl = "CREATE TABLE effects (n bigserial PRIMARY KEY, client text, seq int, generation bigint)"
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}

	inside, release := make(chan struct{}), make(chan struct{})
	stalled := make(chan error, 1)
	var stalledOnce atomic.Bool
	effect := func(stall bool) inbox.TxFunc {
		return func(ctx context.Context, tx *sql.Tx, ev engine.Event) error {
			var o order
			if err := json.Unmarshal(ev.Data, &o); err != nil {
				return err
			}
			d, _ := engine.DeliveryFrom(ctx)
			if _, err := tx.ExecContext(ctx, "INSERT INTO effects (client, seq, generation) VALUES ($1, $2, $3)", o.Client, o.Seq, d.Generation); err != nil {
				return err
			}
			if stall {
				close(inside)
				<-release
			}
			return nil
		}
	}
	// Owner a stalls on A's second event, once, and then sends its commit with a context
	// that its engine's lease deadline does not cancel.
	handlerA := func(ctx context.Context, ev engine.Event) error {
		var o order
		_ = json.Unmarshal(ev.Data, &o)
		if o.Client != "A" || o.Seq != 1 || stalledOnce.Swap(true) {
			return ib.Handler(effect(false))(ctx, ev)
		}
		d, _ := engine.DeliveryFrom(ctx)
		ctx = context.WithoutCancel(ctx)
		fn := effect(dialect == sqldb.Postgres)
		if dialect == sqldb.SQLite {
			close(inside)
			<-release
		}
		_, err := ib.Apply(ctx, d, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx, ev) })
		stalled <- err
		return err
	}

	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = viaProxy.Close() })
	rdb := srv.Client(t)
	dom := orderDomain(t, nil)
	enginetest.Start(t, engine.EngineConfig{Domain: orderDomain(t, handlerA), Client: viaProxy, InstanceID: "a"})
	broker := engine.NewRedisBroker(rdb)
	for seq := 0; seq < 3; seq++ {
		for _, c := range []string{"A", "B"} {
			data, _ := json.Marshal(order{Client: c, Seq: seq})
			if _, err := broker.Publish(ctx, dom, "OrderPlaced", data, engine.PublishOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-inside:
	case <-time.After(20 * time.Second):
		t.Fatal("owner a never reached A's second event")
	}
	proxy.Freeze()
	defer proxy.Thaw()
	enginetest.Start(t, engine.EngineConfig{Domain: orderDomain(t, ib.Handler(effect(false))), Client: rdb, InstanceID: "b"})
	testkit.WaitFor(t, 30*time.Second, "owner b applies A's last event", func() bool {
		var n int
		_ = db.QueryRow("SELECT count(*) FROM effects WHERE client = 'A' AND seq = 2").Scan(&n)
		return n == 1
	})
	close(release)
	select {
	case err := <-stalled:
		if !errors.Is(err, inbox.ErrStale) {
			t.Fatalf("the frozen owner's commit: %v, want inbox.ErrStale", err)
		}
		t.Logf("the frozen owner's commit was refused: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the frozen owner's Apply never returned")
	}
	proxy.Thaw()
	testkit.WaitFor(t, 30*time.Second, "every event applied", func() bool {
		var n int
		_ = db.QueryRow("SELECT count(*) FROM effects").Scan(&n)
		return n >= 6
	})
	checkEffects(t, db)
}

// checkEffects: one row per event, applied per client in publish order, and A's second
// event applied by a newer owner than its first.
func checkEffects(t *testing.T, db *sql.DB) {
	t.Helper()
	rows, err := db.Query("SELECT client, seq, generation FROM effects ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seqs := map[string][]int{}
	gens := map[string][]int64{}
	for rows.Next() {
		var c string
		var s int
		var g int64
		if err := rows.Scan(&c, &s, &g); err != nil {
			t.Fatal(err)
		}
		seqs[c] = append(seqs[c], s)
		gens[c] = append(gens[c], g)
	}
	for _, c := range []string{"A", "B"} {
		if got := fmt.Sprint(seqs[c]); got != "[0 1 2]" {
			t.Errorf("client %s: effects %s, want [0 1 2] once each, in order", c, got)
		}
	}
	if g := gens["A"]; len(g) == 3 && g[1] <= g[0] {
		t.Errorf("A's second event applied at generation %d, not above the frozen owner's %d", g[1], g[0])
	}
}
