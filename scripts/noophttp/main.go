// Command noophttp is a no-op HTTP sink for benchmarks of `seqctl run`: it answers
// 204 No Content to every POST, counts the POSTs and records the arrival times of the
// first and the last one. GET /stats serves them as JSON:
//
//	{"count":20000,"first_ns":1738317600000000000,"last_ns":1738317601000000000}
//
// (unix nanoseconds, 0 before the first POST). It listens on -addr (default
// 127.0.0.1:0, a free port) and prints the address it listens on as the first line of
// stdout. Used by scripts/bench-engine-scale.sh.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

type stats struct {
	count, first, last atomic.Int64
}

func (s *stats) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost:
		now := time.Now().UnixNano()
		s.first.CompareAndSwap(0, now)
		s.last.Store(now)
		s.count.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // read the body so the connection is reused
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && r.URL.Path == "/stats":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{
			"count": s.count.Load(), "first_ns": s.first.Load(), "last_ns": s.last.Load(),
		})
	default:
		http.Error(w, "POST anything, or GET /stats", http.StatusMethodNotAllowed)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr().String())
	_ = os.Stdout.Sync()
	srv := &http.Server{Handler: &stats{}, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
