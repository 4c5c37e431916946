package engine

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// publisher publishes perKey events for each key, round-robin, one every gap, in the
// background; wait returns when all are published.
func backgroundPublish(t *testing.T, b *RedisBroker, d *Domain, keys []string, perKey int, gap time.Duration) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 0; seq < perKey; seq++ {
			for _, k := range keys {
				publish(t, b, d, k, seq, false)
			}
			time.Sleep(gap)
		}
	}()
	return wg.Wait
}

func checkLogs(t *testing.T, srv *redistest.Server, keys []string, perKey int) (dups int) {
	t.Helper()
	return checkLogsOn(t, srv.Client(t), keys, perKey)
}

func checkLogsOn(t *testing.T, rdb redis.UniversalClient, keys []string, perKey int) (dups int) {
	t.Helper()
	for _, k := range keys {
		testkit.WaitFor(t, 30*time.Second, "key "+k+" complete", func() bool {
			got, _ := dedupFirst(logOf(t, rdb, k))
			return len(got) >= perKey
		})
		got, d := dedupFirst(logOf(t, rdb, k))
		dups += d
		if diff := cmp.Diff(seqs(0, perKey), got); diff != "" {
			t.Errorf("key %s: committed order (first occurrences) differs from publish order (-want +got):\n%s", k, diff)
		}
	}
	return dups
}

// leaseGen returns the generation of the lease Projector holds on key's partition.
func leaseGen(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	k := keyspace.For(rdb)
	v := rdb.Get(context.Background(), k.LeaseKey(k.PartitionStream("order", key), "Projector")).Val()
	l, ok := keyspace.ParseLease(v)
	if !ok {
		t.Fatalf("lease of %s = %q, not a lease value", key, v)
	}
	return l.Generation
}

// failover is how the failover tests begin: an engine process p1 owns keysOf(4) on a
// target, its sink working work per event, while perKey events per key are published in
// the background, a round every gap.
type failover struct {
	tg   redisTarget
	rdb  redis.UniversalClient
	keys []string
	ttl  time.Duration // the lease TTL of both instances
	p1   *proc
	done func() // returns once every event is published
}

func startFailover(t *testing.T, tg redisTarget, perKey int, ttl, work, gap time.Duration) *failover {
	t.Helper()
	rdb, b := tg.broker(t)
	f := &failover{tg: tg, rdb: rdb, keys: keysOf(4), ttl: ttl}
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	f.p1 = startProcOn(t, tg, "p1", ttl, work)
	f.done = backgroundPublish(t, b, d, f.keys, perKey, gap)
	return f
}

// waitP1OwnsEveryKey waits until p1 committed five events of every key.
func (f *failover) waitP1OwnsEveryKey(t *testing.T) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, "p1 owns every key", func() bool {
		for _, k := range f.keys {
			if f.rdb.LLen(context.Background(), sinkKey("log", k)).Val() < 5 {
				return false
			}
		}
		return true
	})
}

// startP2 starts the instance p2 in this process, with p1's lease TTL, its sink working
// work per event.
func (f *failover) startP2(t *testing.T, work time.Duration, fenced bool) *Engine {
	t.Helper()
	s2 := &sink{rdb: f.tg.client(t), instance: "p2", work: work, fenced: fenced}
	return startEngineOn(t, f.tg, testDomain(t, s2.handle, nil), "p2", func(c *EngineConfig) { c.Timing = fastTiming(f.ttl) })
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault test: skipped with -short")
	}
}

// The owner runs as a separate process and is killed with SIGKILL
// mid-stream; another instance takes over at a higher generation, reclaims the pending
// entries and resumes: no event lost, per-key order kept (an event may run twice).
func TestCrashFailoverLosesNothing(t *testing.T) {
	skipShort(t)
	onBoth(t, testCrashFailoverLosesNothing)
}

func testCrashFailoverLosesNothing(t *testing.T, tg redisTarget) {
	const perKey = 200
	f := startFailover(t, tg, perKey, time.Second, 2*time.Millisecond, time.Millisecond)
	rdb, keys := f.rdb, f.keys
	testkit.WaitFor(t, 20*time.Second, "p1 handling", func() bool { return rdb.LLen(context.Background(), "t:starts:p1").Val() > 150 })
	genBefore := leaseGen(t, rdb, keys[0])
	f.p1.signal(syscall.SIGKILL)
	<-f.p1.exited

	f.startP2(t, 2*time.Millisecond, true)
	f.done()
	dups := checkLogsOn(t, rdb, keys, perKey)
	if genAfter := leaseGen(t, rdb, keys[0]); genAfter <= genBefore {
		t.Errorf("generation after takeover %d is not above %d", genAfter, genBefore)
	}
	if rdb.LLen(context.Background(), "t:starts:p2").Val() == 0 {
		t.Error("the surviving instance handled nothing")
	}
	t.Logf("events re-run after the crash: %d", dups)
	if dups > len(keys)*16 {
		t.Errorf("%d re-runs: more than one batch per key", dups)
	}
}

// The owner is frozen with SIGSTOP past its lease TTL, another instance
// takes over, then SIGCONT: the stale owner never starts another event, and the committed
// order stays intact (its late write, if any, is rejected by the generation-fenced sink).
func TestStallFailoverFenceHolds(t *testing.T) {
	skipShort(t)
	onBoth(t, testStallFailoverFenceHolds)
}

func testStallFailoverFenceHolds(t *testing.T, tg redisTarget) {
	const perKey = 150
	const ttl = time.Second
	f := startFailover(t, tg, perKey, ttl, 5*time.Millisecond, 2*time.Millisecond)
	rdb, keys, p1 := f.rdb, f.keys, f.p1
	f.waitP1OwnsEveryKey(t)
	p1.signal(syscall.SIGSTOP)
	frozenAt := time.Now()
	e2 := f.startP2(t, time.Millisecond, true)
	testkit.WaitFor(t, 20*time.Second, "p2 owns every key", func() bool { return len(e2.Owned()) == len(keys) })
	// The session expires one TTL after the last heartbeat before the freeze, which came
	// at most one heartbeat interval (TTL/5) before it.
	if took := time.Since(frozenAt); took < ttl-ttl/5 {
		t.Fatalf("takeover %v after the freeze, before the frozen owner's session could expire", took)
	}
	startsFrozen := rdb.LLen(context.Background(), "t:starts:p1").Val()
	staleGen := map[string]string{} // key -> the generation p1 held when frozen
	for _, s := range rdb.LRange(context.Background(), "t:starts:p1", 0, -1).Val() {
		f := strings.Split(s, "/")
		staleGen[f[0]] = f[2]
	}
	p1.signal(syscall.SIGCONT)
	f.done()
	checkLogsOn(t, rdb, keys, perKey)
	time.Sleep(500 * time.Millisecond)
	// Under its stale generation, the woken owner may finish the one event per key it was
	// running when frozen (its commit is then refused by the generation-fenced sink, or
	// re-run by the new owner), but must not start another: such a start must be the very
	// event the new owner reclaimed first for that key. Fair share may later hand it
	// partitions back; those run under new, higher generations.
	firstOfP2 := map[string]string{}
	for _, s := range rdb.LRange(context.Background(), "t:starts:p2", 0, -1).Val() {
		f := strings.Split(s, "/")
		if _, ok := firstOfP2[f[0]]; !ok {
			firstOfP2[f[0]] = f[1]
		}
	}
	var late []string
	perKeyLate := map[string]int{}
	for _, s := range rdb.LRange(context.Background(), "t:starts:p1", startsFrozen, -1).Val() {
		f := strings.Split(s, "/")
		if f[2] != staleGen[f[0]] {
			continue // a later, legitimate lease
		}
		late = append(late, s)
		perKeyLate[f[0]]++
		if f[1] != firstOfP2[f[0]] || perKeyLate[f[0]] > 1 {
			t.Errorf("the stale owner started %s under its old generation after it woke (the new owner's first event for %s was seq %s)", s, f[0], firstOfP2[f[0]])
		}
	}
	t.Logf("in-flight events the stale owner finished after waking: %v", late)
	testkit.WaitFor(t, 5*time.Second, "the stale owner notices", func() bool {
		s := p1.stderr.String()
		return strings.Contains(s, "session over") || strings.Contains(s, "fenced")
	})
}

// SIGTERM to the owner: it finishes in-flight work, releases its leases,
// and another instance owns its partitions within 2 s, with nothing lost.
func TestGracefulShutdownHandsOver(t *testing.T) {
	skipShort(t)
	onBoth(t, testGracefulShutdownHandsOver)
}

func testGracefulShutdownHandsOver(t *testing.T, tg redisTarget) {
	const perKey = 150
	const ttl = 15 * time.Second // a crash would take 15 s to fail over; a release must not
	f := startFailover(t, tg, perKey, ttl, 2*time.Millisecond, time.Millisecond)
	rdb, keys, p1 := f.rdb, f.keys, f.p1
	f.waitP1OwnsEveryKey(t)
	e2 := f.startP2(t, time.Millisecond, false)
	testkit.WaitFor(t, 10*time.Second, "p2 takes its fair share", func() bool { return len(e2.Owned()) == len(keys)/2 })
	term := time.Now()
	p1.signal(syscall.SIGTERM)
	testkit.WaitFor(t, 10*time.Second, "p2 owns every key", func() bool { return len(e2.Owned()) == len(keys) })
	took := time.Since(term)
	t.Logf("hand-over after SIGTERM took %v", took)
	if took > 2*time.Second {
		t.Errorf("hand-over took %v, want at most 2s", took)
	}
	select {
	case err := <-p1.exited:
		if err != nil {
			t.Errorf("p1 exited with %v; stderr:\n%s", err, p1.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Error("p1 did not exit after SIGTERM")
	}
	f.done()
	if dups := checkLogsOn(t, rdb, keys, perKey); dups != 0 {
		t.Errorf("%d events ran twice across a graceful hand-over", dups)
	}
	if n := rdb.Get(context.Background(), "t:overlap").Val(); n != "" && n != "0" {
		t.Errorf("%s overlapping entries during the hand-over", n)
	}
}
