package engine

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// A lease this instance still holds after its worker exited without giving it back (a
// release that timed out under load) is taken up again, even when the instance has
// no room below its share and learns that lease's owner while sorting candidates: no
// other instance can take it while this session lives, so leaving it strands the
// partition for good.
func TestLeaseLeftBySelfIsReadopted(t *testing.T) {
	const parts = 40
	srv, rdb, d := startBacklog(t, parts)
	var es []*Engine
	for _, id := range []string{"a", "b"} {
		es = append(es, startEngineWith(t, srv, d, id, func(c *EngineConfig) {
			c.Timing = fastTiming(time.Second)
			c.DiscoveryInterval = 100 * time.Millisecond
		}))
	}
	testkit.WaitFor(t, 10*time.Second, "shares settled", func() bool {
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
	testkit.WaitFor(t, 5*time.Second, "the leases left behind taken up again", func() bool {
		return len(a.Owned())+len(es[1].Owned()) == parts
	})
	for _, w := range left {
		if lv := rdb.Get(context.Background(), w.leaseKey).Val(); ownerOf(lv) == "" {
			t.Errorf("lease %s is gone: %q", w.leaseKey, lv)
		}
	}
}

// A worker that ends without giving its lease back (a fair-share handoff whose release
// got no answer, a worker cancelled) leaves its handled event unacknowledged; when the
// same session takes the lease up again, that event runs again under a higher
// generation, so that a sink fencing on the generation sees an ownership change, never
// the same owner running one event twice.
func TestReadoptedLeaseRunsUnderANewGeneration(t *testing.T) {
	srv, _, b := startNode(t)
	type run struct {
		seq int
		gen int64
	}
	var mu sync.Mutex
	var runs []run
	started, release := make(chan struct{}), make(chan struct{})
	d := testDomain(t, func(ctx context.Context, ev Event) error {
		dl, _ := DeliveryFrom(ctx)
		var p testPayload
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			return err
		}
		mu.Lock()
		runs = append(runs, run{p.Seq, dl.Generation})
		first := len(runs) == 1
		mu.Unlock()
		if first {
			close(started)
			<-release
		}
		return nil
	}, nil)
	e := startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(time.Second)
		c.DiscoveryInterval = 100 * time.Millisecond
	})
	publish(t, b, d, "client-1", 0, false)
	publish(t, b, d, "client-1", 1, false)
	<-started
	e.mu.Lock()
	var w *worker
	for _, x := range e.workers {
		w = x
	}
	e.mu.Unlock()
	w.cancel() // it ends without releasing; its handler finishes after that
	close(release)
	<-w.done
	testkit.WaitFor(t, 5*time.Second, "both events handled after the lease was taken up again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if runs[1].seq != 0 || runs[2].seq != 1 {
		t.Fatalf("runs %v: want event 0, event 0 again, then event 1", runs)
	}
	if runs[1].gen <= runs[0].gen {
		t.Errorf("event 0 ran again under generation %d after running under %d: the re-run must carry a higher generation", runs[1].gen, runs[0].gen)
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
