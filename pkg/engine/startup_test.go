package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// leaseCounter counts the leases taken.
type leaseCounter struct {
	nopObserver
	n atomic.Int64
}

func (c *leaseCounter) LeaseAcquired(string) { c.n.Add(1) }

// Two instances started back to back share the partitions from their first passes: no
// instance takes everything and hands half over a discovery interval later.
func TestStartTogetherTakesFairShares(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	const parts = 64
	publishPayloads(t, rdb, d, keysOf(parts))
	var taken leaseCounter
	start := time.Now()
	var es []*Engine
	for _, id := range []string{"a", "b"} {
		es = append(es, startEngineWith(t, srv, d, id, func(c *EngineConfig) {
			c.DiscoveryInterval = 2 * time.Second // the default: start-up settle 125-250 ms
			c.Observer = &taken
		}))
	}
	balanced := func() bool {
		a, b := len(es[0].Owned()), len(es[1].Owned())
		return a+b == parts && a >= parts/2-1 && a <= parts/2+1
	}
	waitFor(t, 5*time.Second, "fair shares", balanced)
	t.Logf("balanced %v after the starts: owned %d and %d", time.Since(start).Round(time.Millisecond), len(es[0].Owned()), len(es[1].Owned()))
	time.Sleep(2 * es[0].cfg.DiscoveryInterval) // any hand-over would come within a pass or two
	moves := taken.n.Load() - parts
	t.Logf("%d leases taken for %d partitions: %d hand-overs", taken.n.Load(), parts, moves)
	if moves > 2 {
		t.Errorf("%d hand-overs after starting together; want at most 2", moves)
	}
	if !balanced() {
		t.Errorf("owned %d and %d, want %d each +/- 1", len(es[0].Owned()), len(es[1].Owned()), parts/2)
	}
}

// A lone instance owns every partition on its first pass, a start-up settle (at most
// 250 ms at the default 2 s interval) after Start.
func TestLoneInstanceOwnsAllOnFirstPass(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	publishPayloads(t, rdb, d, keysOf(64))
	start := time.Now()
	e := startEngineWith(t, srv, d, "alone", func(c *EngineConfig) { c.DiscoveryInterval = 2 * time.Second })
	waitFor(t, 2*time.Second, "every partition owned before a second pass", func() bool { return len(e.Owned()) == 64 })
	t.Logf("owned all 64 %v after Start", time.Since(start).Round(time.Millisecond))
}

// A lease this instance still holds after its worker exited without giving it back (a
// release that timed out under load) is taken up again, even when the instance has
// no room below its share and learns that lease's owner while sorting candidates: no
// other instance can take it while this session lives, so leaving it strands the
// partition for good.
func TestLeaseLeftBySelfIsReadopted(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	const parts = 40
	publishPayloads(t, rdb, d, keysOf(parts))
	var es []*Engine
	for _, id := range []string{"a", "b"} {
		es = append(es, startEngineWith(t, srv, d, id, func(c *EngineConfig) {
			c.Timing = fastTiming(time.Second)
			c.DiscoveryInterval = 100 * time.Millisecond
		}))
	}
	waitFor(t, 10*time.Second, "shares settled", func() bool {
		return len(es[0].Owned())+len(es[1].Owned()) == parts && len(es[0].Owned()) == parts/2
	})
	a := es[0]
	// Five of a's workers end without releasing their leases; a forgets what it knew of
	// the other owner, so its next pass has more candidates than room and reads every
	// candidate's lease (caching its own among them).
	a.mu.Lock()
	var left []*worker
	for _, w := range a.workers {
		if len(left) < 5 {
			left = append(left, w)
		}
	}
	a.mu.Unlock()
	for _, w := range left {
		w.cancel()
		<-w.done
	}
	a.mu.Lock()
	clear(a.knownOwner)
	a.mu.Unlock()
	waitFor(t, 5*time.Second, "the leases left behind taken up again", func() bool {
		return len(a.Owned())+len(es[1].Owned()) == parts
	})
	for _, w := range left {
		if lv := rdb.Get(context.Background(), w.leaseKey).Val(); ownerOf(lv) == "" {
			t.Errorf("lease %s is gone: %q", w.leaseKey, lv)
		}
	}
}

// A Start that fails after its session opened (here the doorbell cannot read the control
// stream) leaves nothing behind: the session key and the registry entry are removed at
// once, and the failed attempt's local deadline does not later mark the instance as
// without a session once a second Start succeeded.
func TestFailedStartLeavesNoSession(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	k := keyspace.For(rdb)
	if err := rdb.Set(ctx, k.ControlStream(), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	const ttl = time.Second
	e, err := New(EngineConfig{Domain: d, Client: srv.Client(t), InstanceID: "i1", Timing: fastTiming(ttl),
		DiscoveryInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err == nil {
		t.Fatal("Start succeeded with a control stream that is not a stream")
	}
	if n := len(rdb.Keys(ctx, k.SessionPrefix()+"*").Val()); n != 0 {
		t.Errorf("%d session keys left by the failed Start, want 0", n)
	}
	if n := rdb.HLen(ctx, k.InstancesKey()).Val(); n != 0 {
		t.Errorf("%d registry entries left by the failed Start, want 0", n)
	}
	if err := rdb.Del(ctx, k.ControlStream()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	time.Sleep(2 * ttl) // past the failed attempt's local lease deadline
	if ok, why := e.Health(); !ok {
		t.Errorf("not ready after a successful Start: %s", why)
	}
}
