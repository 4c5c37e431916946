package engine

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// BenchmarkDiscoveryCost: what discovery costs Redis with many idle partitions (10,000 by
// default, SEQCTL_BENCH_PARTS to change) owned by two settled instances with the default
// timing: the calls per second of the commands discovery sends (the index reads, the
// registry read, the liveness checks, the control stream check) and the Redis time spent
// in them, over SEQCTL_BENCH_WINDOW seconds (default 30: two backstop periods of full
// reads between the two instances).

func BenchmarkDiscoveryCost(b *testing.B) {
	parts := 10_000
	if n, err := strconv.Atoi(os.Getenv("SEQCTL_BENCH_PARTS")); err == nil && n > 0 {
		parts = n
	}
	window := 30 * time.Second
	if n, err := strconv.Atoi(os.Getenv("SEQCTL_BENCH_WINDOW")); err == nil && n > 0 {
		window = time.Duration(n) * time.Second
	}
	t := startTarget(b, false)
	ip := startIdlePair(b, t, parts, 3*time.Minute)
	settled := ip.settled

	s0 := snapRedis(b, t)
	time.Sleep(window)
	s1 := snapRedis(b, t)
	win := s1.at.Sub(s0.at).Seconds()
	calls, _ := callsBetween(s0, s1)
	usec := usecBetween(s0, s1)
	disc := map[string]int64{}
	discUsec := map[string]int64{}
	var total, totalUsec int64
	for _, c := range []string{"sscan", "hgetall", "exists", "xinfo|stream", "xrevrange", "hget"} {
		if n := calls[c]; n > 0 {
			disc[c], discUsec[c] = n, usec[c]
			total += n
			totalUsec += usec[c]
		}
	}
	b.Logf("%d partitions; discovery's commands over %.1fs: %s", parts, win, breakdown(disc, win, "calls/s"))
	b.Logf("Redis time in them: %s", breakdown(discUsec, win, "µs/s"))
	b.Logf("every command: %s", breakdown(calls, win, "calls/s"))
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(total)/win, "disc_calls/s")
	b.ReportMetric(float64(totalUsec)/win, "disc_us/s")
	b.ReportMetric(float64(calls["sscan"])/win, "sscan/s")
	b.ReportMetric(settled, "settle_s")
}
