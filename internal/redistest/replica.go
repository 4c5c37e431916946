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

// WaitLinkUp waits up to 10 s until the server, a replica, reports its link to the
// primary up and the primary counts it in WAIT. (After a sync the primary starts the
// replica's command stream only at the replica's first acknowledgement, up to a second
// later, so "link up" alone is not enough.) The probe is a PUBLISH and a WAIT 1 on the
// primary: tests that count WAIT calls take their baseline after this returns.
func (s *Server) WaitLinkUp(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	c := s.Client(tb)
	deadline := time.Now().Add(10 * time.Second)
	var info string
	for time.Now().Before(deadline) {
		info, _ = c.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			p := redis.NewClient(&redis.Options{Addr: infoField(info, "master_host") + ":" + infoField(info, "master_port")})
			conn := p.Conn()
			n, err := int64(0), conn.Publish(ctx, "redistest:probe", "").Err()
			if err == nil {
				n, err = conn.Wait(ctx, 1, 100*time.Millisecond).Result()
			}
			_ = conn.Close()
			_ = p.Close()
			if err == nil && n >= 1 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("replica %s: not acknowledging the primary within 10s:\n%s", s.Addr, info)
}

// infoField returns the value of "name:value" in an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
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
