package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the endpoints of 'seqctl run --metrics-addr':
//
//	/metrics  the Prometheus text (or OpenMetrics) exposition of the registry
//	/healthz  200 "ok" while the process serves requests (liveness)
//	/readyz   200 "ready" when the source's Ready() is true and every AddReadiness
//	          condition holds, else 503 "not ready: " and the reason (a condition's,
//	          or the source's Health(): no session, Redis unreachable, lease taking
//	          failing with NOSCRIPT / OOM / NOPERM, replicas short, shutting down)
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg, // counts its own scrape errors
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ok, why := m.ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + why + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}
