package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a private redis-server replicating primary (--replicaof) and waits
// until its link is up (master_link_status:up in INFO replication), so that a write to
// the primary followed by WAIT 1 is acknowledged. The primary's diskless-sync delay is
// set to 0 first, or the first full sync would wait 5 s. Stop and StartAgain the
// returned server to take the replica away and bring it back (then call WaitLinkUp).
func StartReplica(tb testing.TB, primary *Server) *Server {
	tb.Helper()
	if primary.external {
		tb.Skipf("a replica needs a private primary; unset %s to run this test", EnvURL)
	}
	pc := primary.Client(tb)
	if err := pc.ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		tb.Fatalf("config set repl-diskless-sync-delay on the primary: %v", err)
	}
	r := StartWith(tb, Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())}})
	r.WaitLinkUp(tb)
	return r
}

// WaitLinkUp waits up to 10 s for the server, a replica, to report its link to the
// primary up.
func (s *Server) WaitLinkUp(tb testing.TB) {
	tb.Helper()
	c := s.Client(tb)
	deadline := time.Now().Add(10 * time.Second)
	var info string
	for time.Now().Before(deadline) {
		info, _ = c.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("replica %s: link to the primary not up within 10s:\n%s", s.Addr, info)
}

// CommandCalls returns how many times the server has run a command since it started
// (the calls of cmdstat_NAME in INFO commandstats; 0 when it never ran). name is lower
// case, e.g. "wait".
func CommandCalls(tb testing.TB, c redis.UniversalClient, name string) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	prefix := "cmdstat_" + name + ":calls="
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
			return n
		}
	}
	return 0
}
