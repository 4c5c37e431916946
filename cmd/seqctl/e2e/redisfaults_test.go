package e2e

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// allOwned reports whether every stream's Stepper lease is held by an owner whose session
// lives.
func (f *fixture) allOwned(streams []string) bool {
	ctx := context.Background()
	for _, s := range streams {
		v, err := f.rdb.Get(ctx, keyspace.SingleNode.LeaseKey(s, "Stepper")).Result()
		if err != nil {
			return false
		}
		owner := v[:strings.LastIndexByte(v, ':')]
		if f.rdb.Exists(ctx, keyspace.SingleNode.SessionKey(owner)).Val() != 1 {
			return false
		}
	}
	return true
}

// TestRunSurvivesRedisRestartsWithAOF: Redis with appendfsync always is stopped for
// longer than the lease TTL, twice, while two 'seqctl run' processes have events in
// flight. Each time, every partition is owned again within 2 x TTL after Redis is back,
// without restarting seqctl; no event is lost, no two events of one key run at once, and
// per-key order holds (the HTTP sink also refuses a generation lower than one it saw).
func TestRunSurvivesRedisRestartsWithAOF(t *testing.T) {
	const secret = "aof"
	const ttl = time.Second // lease_ttl_ms of http.domain.toml
	s := newSink(t, secret, 20*time.Millisecond)
	hs := httptest.NewServer(s)
	defer hs.Close()
	f := newFixtureWith(t, "http.domain.toml", map[string]string{"URL": hs.URL}, redistest.Options{AOF: true})
	env := []string{"E2E_SECRET=" + secret}
	keys := keyNames("r", 8)
	streams := f.streamsOf(keys)
	a, b := f.runTwo(env)

	const perRound = 20 // 20 x 20 ms per key: still in flight when Redis stops
	for round := 0; round < 2; round++ {
		from := round*perRound + 1
		f.publish(steps(keys, from, from+perRound-1))
		testkit.WaitFor(t, 15*time.Second, "delivery under way", func() bool {
			log, _, _ := s.snapshot()
			return lineCount(log) >= len(keys)*(from+2)
		})
		f.srv.Stop()
		time.Sleep(ttl + ttl/2) // down longer than the lease TTL
		f.srv.StartAgain()
		back := time.Now()
		testkit.WaitFor(t, 10*time.Second, "every partition owned again", func() bool { return f.allOwned(streams) })
		took := time.Since(back)
		t.Logf("restart %d: every partition owned again %v after Redis was back", round+1, took.Round(time.Millisecond))
		if took > 2*ttl {
			t.Errorf("restart %d: partitions owned again after %v, want at most %v", round+1, took, 2*ttl)
		}
	}
	f.publish(steps(keys, 2*perRound+1, 3*perRound))
	testkit.WaitFor(t, 30*time.Second, "every event delivered", func() bool {
		log, _, _ := s.snapshot()
		return complete(log, keys, 3*perRound)
	})
	log, violations, _ := s.snapshot()
	checkOrder(t, log, keys, 3*perRound)
	for _, v := range violations {
		t.Error(v)
	}
	t.Logf("%d deliveries for %d events", lineCount(log), len(keys)*3*perRound)
	for _, p := range []*proc{a, b} {
		select {
		case <-p.done:
			t.Fatalf("%s exited (code %d) during the restarts", p.name, p.code)
		default:
		}
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
}

// TestRunPermanentRedisErrorsExit: a Redis problem that waiting cannot fix ends
// 'seqctl run' with exit 1 within 5 s and a message naming the setting to fix; it is
// never retried as "unreachable".
func TestRunPermanentRedisErrorsExit(t *testing.T) {
	f := newFixture(t, "http.domain.toml", map[string]string{"URL": "http://127.0.0.1:9/"})
	protected := redistest.StartWith(t, redistest.Options{Args: []string{"--requirepass", "right"}})
	cases := []struct {
		name, url string
		want      []string
	}{
		{"bad port", "redis://127.0.0.1:99999/0", []string{"99999", "not a valid host:port", "--redis-url"}},
		{"database out of range", strings.TrimSuffix(f.srv.URL, "/0") + "/99", []string{"no database 99", "/99", "--redis-url"}},
		{"wrong password", "redis://:wrong@" + protected.Addr + "/0", []string{"refused the credentials", "password", "--redis-url"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code, took := seqctlCmdWithin(t, 10*time.Second, []string{"E2E_SECRET=x"},
				"run", "--config", f.config, "--redis-url", c.url, "--instance-id", "x")
			checkQuickExit1(t, out, code, took, c.want)
			if strings.Contains(out, "wrong") && c.name == "wrong password" {
				t.Errorf("the password appears in the output:\n%s", out)
			}
		})
	}
}

func runWithTimeout(cmd *exec.Cmd, d time.Duration) (string, error) {
	var b strings.Builder
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return b.String(), err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return b.String(), context.DeadlineExceeded
	}
}

// checkQuickExit1 fails the test unless a seqctl command exited 1 within 5 s with an
// output that mentions each of want, and logs how it ended.
func checkQuickExit1(t *testing.T, out string, code int, took time.Duration, want []string) {
	t.Helper()
	if code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, out)
	}
	if took > 5*time.Second {
		t.Errorf("took %v to exit, want at most 5s", took)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output does not mention %q:\n%s", w, out)
		}
	}
	t.Logf("exit 1 after %v: %s", took.Round(time.Millisecond), lastLine(out))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
