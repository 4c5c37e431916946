package outbox

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/sqltest"
	"github.com/seqctl/seqctl/internal/testkit"
)

// benchDialects runs fn per dialect; PostgreSQL skips (fails under CI=true) without a server.
func benchDialects(b *testing.B, fn func(b *testing.B, d Dialect)) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			if d == Postgres {
				sqltest.RequirePostgres(b)
			}
			fn(b, d)
		})
	}
}

// enqueueMany commits n order events over keys keys, rowsPerTx per transaction.
func (e *env) enqueueMany(tb testing.TB, n, keys, rowsPerTx int) {
	tb.Helper()
	ctx := context.Background()
	for i := 0; i < n; {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			tb.Fatal(err)
		}
		for j := 0; j < rowsPerTx && i < n; j, i = j+1, i+1 {
			if _, err := e.ob.Enqueue(ctx, tx, Event{Type: "OrderPlaced", Data: orderData(fmt.Sprintf("c-%d", i%keys), i)}); err != nil {
				tb.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkRelayThroughput measures how fast one relay drains a backlog: each iteration
// commits 2000 rows over 16 keys (not timed), then drains them (timed). Reported as
// rows/s.
func BenchmarkRelayThroughput(b *testing.B) {
	benchDialects(b, func(b *testing.B, d Dialect) {
		e := newEnv(b, d, domainOpts{})
		drainBacklog(b, e, e.relay(b, nil, func(c *RelayConfig) { c.BatchSize = DefaultBatchSize; c.LeaseTTL = DefaultLeaseTTL }))
	})
}

// BenchmarkRelayThroughputMinReplicas is BenchmarkRelayThroughput with a replica attached
// and MinReplicas 1 (one WAIT per round before the mark), on SQLite: the cost of
// [broker] min_replicas = 1 on loopback.
func BenchmarkRelayThroughputMinReplicas(b *testing.B) {
	e := newEnv(b, SQLite, domainOpts{})
	redistest.StartReplica(b, e.srv)
	drainBacklog(b, e, e.relay(b, nil, func(c *RelayConfig) {
		c.BatchSize, c.LeaseTTL, c.MinReplicas = DefaultBatchSize, DefaultLeaseTTL, 1
	}))
}

// drainBacklog runs the throughput loop: per iteration 2000 rows over 16 keys are
// committed (not timed) and drained (timed); it reports rows/s.
func drainBacklog(b *testing.B, e *env, r *Relay) {
	const rows, keys = 2000, 16
	var timed time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e.enqueueMany(b, rows, keys, 100)
		b.StartTimer()
		start := time.Now()
		res, err := r.Drain(context.Background())
		timed += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if res.Published != rows {
			b.Fatalf("drained %+v; want %d published", res, rows)
		}
	}
	b.ReportMetric(float64(rows*b.N)/timed.Seconds(), "rows/s")
}

// BenchmarkCommitToStreamLatency measures the time from a transaction's commit returning
// to its event being readable in the stream, with a running relay: SQLite polling at the
// default 50 ms, SQLite woken in-process by Relay.Wake after each commit, and PostgreSQL
// woken by LISTEN/NOTIFY. Before each commit the relay is left idle for a random 60-120 ms,
// longer than the SQLite poll and out of phase with it, so each sample is an isolated
// commit. Reported as p50/p99/max in ms.
func BenchmarkCommitToStreamLatency(b *testing.B) {
	const idle = 60 * time.Millisecond
	variants := []struct {
		name    string
		dialect Dialect
		wake    bool
	}{
		{"sqlite/poll", SQLite, false},
		{"sqlite/wake", SQLite, true},
		{"postgres/notify", Postgres, false},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			if v.dialect == Postgres {
				sqltest.RequirePostgres(b)
			}
			e := newEnv(b, v.dialect, domainOpts{})
			r := e.relay(b, nil, func(c *RelayConfig) { c.PollInterval = 0; c.LeaseTTL = DefaultLeaseTTL })
			run(b, r)
			if v.dialect == Postgres {
				testkit.WaitFor(b, 5*time.Second, "LISTEN", func() bool { return r.Stats().Listening })
			}
			ctx := context.Background()
			last := "0"
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Let the relay go idle first (sleeping in its poll, or waiting for NOTIFY):
				// the latency of an isolated commit, not of a burst.
				b.StopTimer()
				time.Sleep(idle + time.Duration(mrand.Int64N(int64(idle))))
				b.StartTimer()
				tx, err := e.db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.ob.Enqueue(ctx, tx, Event{Type: "OrderPlaced", Data: orderData("c-1", i)}); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				committed := time.Now()
				if v.wake {
					r.Wake()
				}
				res, err := e.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{"order:c-1", last}, Count: 1, Block: 10 * time.Second}).Result()
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(committed))
				last = res[0].Messages[0].ID
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(ms(0.5), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
			b.ReportMetric(ms(1), "max-ms")
		})
	}
}
