package deliver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/engine"
)

// Delivery throughput. Run with
//
//	go test ./pkg/deliver -run '^$' -bench . -benchtime 2000x
//
// BenchmarkExec and BenchmarkHTTP measure one handler call (the delivery alone: fork+exec
// or one keep-alive POST); BenchmarkEngine measures events through Redis, the engine and
// the delivery, over 16 partitions on one instance. Every benchmark reports events/s.

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkExec(b *testing.B) {
	for _, bc := range []struct {
		name string
		argv []string
	}{
		{"sh-cat-devnull", []string{"sh", "-c", "cat >/dev/null"}},
		{"cat", []string{"cat"}},
	} {
		fn, err := Exec(ExecConfig{Argv: bc.argv})
		if err != nil {
			b.Fatal(err)
		}
		ctx, ev := testEvent(b, `{"order_id":"o-1","client_id":"client-7","total":12.5}`)
		b.Run(bc.name+"/serial", func(b *testing.B) {
			for b.Loop() {
				if err := fn(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b)
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := fn(ctx, ev); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportRate(b)
		})
	}
}

func BenchmarkHTTP(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	client := NewHTTPClient()
	defer client.CloseIdleConnections()
	fn, err := HTTP(HTTPConfig{URL: srv.URL, Client: client, Keys: [][]byte{[]byte("s3cret")}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, ev := testEvent(b, `{"order_id":"o-1","client_id":"client-7","total":12.5}`)
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := fn(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b)
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := fn(ctx, ev); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportRate(b)
	})
}

// BenchmarkEngine publishes b.N events over 16 keys (untimed), then times one engine
// instance draining them through the delivery.
func BenchmarkEngine(b *testing.B) {
	const keys = 16
	srv := redistest.Start(b)
	rdb := srv.Client(b)

	httpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer httpSrv.Close()
	client := NewHTTPClient()
	defer client.CloseIdleConnections()

	execFn, _ := Exec(ExecConfig{Argv: []string{"sh", "-c", "cat >/dev/null"}})
	httpFn, _ := HTTP(HTTPConfig{URL: httpSrv.URL, Client: client})
	for _, bc := range []struct {
		name string
		fn   engine.HandlerFunc
	}{{"exec-sh-cat-devnull", execFn}, {"http", httpFn}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			if err := rdb.FlushDB(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			var handled atomic.Int64
			done := make(chan struct{})
			n := int64(b.N)
			dom := engine.NewDomain("bench").
				AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "seq"}}).
				AddHandler(engine.Handler{
					Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
					SequentialBy: "client_id",
					Func: func(ctx context.Context, ev engine.Event) error {
						if err := bc.fn(ctx, ev); err != nil {
							return err
						}
						if handled.Add(1) == n {
							close(done)
						}
						return nil
					},
				})
			broker := engine.NewRedisBroker(rdb)
			if err := dom.Init(broker); err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				data := fmt.Appendf(nil, `{"client_id":"c-%d","seq":%d}`, i%keys, i)
				if _, err := broker.Publish(ctx, dom, "OrderPlaced", data, engine.PublishOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			eng, err := engine.New(engine.EngineConfig{
				Domain: dom, Client: rdb, BatchSize: 64, DiscoveryInterval: 200 * time.Millisecond,
				Logger: discardLogger(),
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := eng.Start(ctx); err != nil {
				b.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				b.Fatalf("handled %d of %d events", handled.Load(), b.N)
			}
			b.StopTimer()
			reportRate(b)
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = eng.Shutdown(sctx)
		})
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
