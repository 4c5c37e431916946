package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/enginetest"
	"github.com/seqctl/seqctl/internal/faultproxy"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/inbox"
	"github.com/seqctl/seqctl/pkg/sqldb"
)

// BenchmarkSQLSink drains events from Redis into PostgreSQL through the SQL sink (the
// inbox: exactly once) and through a plain at-least-once handler running the same INSERT
// in one transaction per event, side by side, at max_unacked 1 and 16. Each run
// publishes SEQCTL_BENCH_SINK_EVENTS events (default 6,400) over 64 keys, then starts
// one engine and times the drain. It reports events/s and the database round trips per
// event, counted by a proxy between the driver and PostgreSQL.
//
//	go test ./pkg/inbox -run '^$' -bench SQLSink -benchtime 1x
func BenchmarkSQLSink(b *testing.B) {
	events := 6400
	if v, err := strconv.Atoi(os.Getenv("SEQCTL_BENCH_SINK_EVENTS")); err == nil && v > 0 {
		events = v
	}
	for _, mu := range []int{1, 16} {
		for _, kind := range []string{"plain", "inbox"} {
			b.Run(fmt.Sprintf("%s/max_unacked=%d", kind, mu), func(b *testing.B) {
				for range b.N {
					sinkRun(b, kind, mu, events)
				}
			})
		}
	}
}

// benchStatement is the sink's statement ($1 the event's data, $3 its key); the plain
// handler runs plainStatement, the same INSERT with its two parameters numbered 1 and 2.
// sinkConns is both handlers' connections, and their events in flight (the default of
// a SQL handler's max_concurrent).
const sinkConns = inbox.DefaultConns

const (
	benchStatement = "INSERT INTO bench_orders(id, client) VALUES ($1::jsonb->>'order_id', $3)"
	plainStatement = "INSERT INTO bench_orders(id, client) VALUES ($1::jsonb->>'order_id', $2)"
)

func sinkRun(b *testing.B, kind string, maxUnacked, events int) {
	b.StopTimer()
	dsn := sqltest.PostgresDSN(b)
	setup, _, err := sqldb.Open(dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close()
	if _, err := setup.Exec("CREATE TABLE bench_orders (n bigserial PRIMARY KEY, id text NOT NULL, client text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	proxy := faultproxy.Start(b, sqltest.PostgresAddr())
	viaProxy := strings.Replace(dsn, sqltest.PostgresAddr(), proxy.Addr, 1)

	var handler engine.HandlerFunc
	switch kind {
	case "plain":
		db, _, err := sqldb.Open(viaProxy)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(sinkConns)
		db.SetMaxIdleConns(sinkConns)
		handler = func(ctx context.Context, ev engine.Event) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, plainStatement, string(ev.Data), ev.Key); err != nil {
				return err
			}
			return tx.Commit()
		}
	case "inbox":
		db, d, err := sqldb.Open(dsn)
		if err != nil {
			b.Fatal(err)
		}
		ib, err := inbox.New(db, d)
		if err != nil {
			b.Fatal(err)
		}
		if err := ib.Migrate(context.Background()); err != nil {
			b.Fatal(err)
		}
		db.Close()
		s, err := inbox.NewSink(inbox.SinkConfig{Handler: "Projector", DSN: func() (string, error) { return viaProxy, nil },
			Statement: benchStatement, Conns: sinkConns})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		handler = s.Handler()
	}

	srv := redistest.Start(b)
	rdb := srv.Client(b)
	dom := orderDomain(b, handler)
	publishAll(b, rdb, dom, events)
	trips := proxy.RoundTrips()
	start := time.Now()
	b.StartTimer()
	enginetest.Start(b, engine.EngineConfig{Domain: dom, Client: rdb, InstanceID: "bench", MaxUnacked: maxUnacked,
		MaxConcurrentHandlers: sinkConns, Timing: engine.LeaseTiming{LeaseTTL: 10 * time.Second}})
	for {
		var n int
		if err := setup.QueryRow("SELECT count(*) FROM bench_orders").Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n >= events {
			break
		}
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("%d of %d events in the table after 2 minutes", n, events)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(events)/took.Seconds(), "ev/s")
	b.ReportMetric(float64(proxy.RoundTrips()-trips)/float64(events), "db_round_trips/ev")
	b.ReportMetric(took.Seconds()*1e6/float64(events), "µs/ev")
}

// publishAll publishes events over 64 keys, one Publish each.
func publishAll(b *testing.B, rdb *redis.Client, dom *engine.Domain, events int) {
	br := engine.NewRedisBroker(rdb)
	ctx := context.Background()
	for i := range events {
		data, _ := json.Marshal(map[string]any{"order_id": fmt.Sprintf("o-%d", i), "client_id": fmt.Sprintf("c-%d", i%64), "seq": i / 64})
		if _, err := br.Publish(ctx, dom, "OrderPlaced", data, engine.PublishOptions{SkipReplicaWait: true}); err != nil {
			b.Fatal(err)
		}
	}
}
