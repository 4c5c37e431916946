package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
)

// exclusive wraps a relay's publisher and records a violation when two relays publish
// into one category at the same time.
type exclusive struct {
	mu         sync.Mutex
	active     map[string]map[string]int // category -> relay -> publishes in flight; guarded by mu
	violations []string                  // guarded by mu
}

type exclusivePub struct {
	*engine.RedisBroker
	x     *exclusive
	relay string
}

func (p exclusivePub) PublishRouted(ctx context.Context, r engine.Route, ev engine.Event, seq int64) (engine.Published, error) {
	x := p.x
	x.mu.Lock()
	if x.active == nil {
		x.active = map[string]map[string]int{}
	}
	if x.active[r.Category] == nil {
		x.active[r.Category] = map[string]int{}
	}
	for other, n := range x.active[r.Category] {
		if other != p.relay && n > 0 {
			x.violations = append(x.violations, fmt.Sprintf("%s published %s while %s was publishing it", p.relay, r.Category, other))
		}
	}
	x.active[r.Category][p.relay]++
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		x.active[r.Category][p.relay]--
		x.mu.Unlock()
	}()
	time.Sleep(100 * time.Microsecond) // widen the window a violation would need
	return p.RedisBroker.PublishRouted(ctx, r, ev, seq)
}

// Two relays over one database, each with its own connections; writers
// commit concurrently (same keys from several writers); the first relay stops halfway.
// Every row is published exactly once, per-key order is commit order, and no category is
// ever published by both relays at once.
func TestTwoRelaysPublishEveryRowOnceInKeyOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		testTwoRelays(t, newEnv(t, d, domainOpts{}))
	})
	// On Redis Cluster, where a publish writes the stream and the category index in two
	// steps on different nodes.
	t.Run("cluster", func(t *testing.T) { testTwoRelays(t, newClusterEnv(t, SQLite, domainOpts{})) })
}

func testTwoRelays(t *testing.T, e *env) {
	db2, _ := openDB(t, e.dsn)
	ob2 := newOutbox(t, db2, e.dialect, e.dom)
	x := &exclusive{}
	r1 := e.relay(t, exclusivePub{RedisBroker: e.broker, x: x, relay: "r1"}, func(c *RelayConfig) { c.Owner = "r1"; c.BatchSize = 16 })
	r2, err := NewRelay(ob2, RelayConfig{
		Publisher: exclusivePub{RedisBroker: engine.NewRedisBroker(e.client(t)), x: x, relay: "r2"},
		Owner:     "r2", PollInterval: 10 * time.Millisecond, LeaseTTL: time.Second, BatchSize: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 4, 40
	keys := []string{"c-0", "c-1", "c-2"}
	// A first batch, so that r1, alone, takes both categories' leases.
	const early = 12
	for n := 1; n <= early; n++ {
		e.enqueue(t, Event{Type: "OrderPlaced", Data: []byte(fmt.Sprintf(`{"client_id":%q,"n":%d,"writer":"early"}`, keys[n%len(keys)], n))})
		if n%4 == 0 {
			e.enqueue(t, Event{Type: "AuditLogged", Data: []byte(fmt.Sprintf(`{"msg":"early-%d"}`, n))})
		}
	}
	stop1 := run(t, r1)
	testkit.WaitFor(t, 5*time.Second, "r1 to publish", func() bool { return r1.Stats().Published > 0 })
	run(t, r2)

	var wg sync.WaitGroup
	var progress sync.WaitGroup
	progress.Add(writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for n := 1; n <= perWriter; n++ {
				if n == perWriter/2 {
					progress.Done()
				}
				typ, data := "OrderPlaced", []byte(fmt.Sprintf(`{"client_id":%q,"n":%d,"writer":"w%d"}`, keys[(w+n)%len(keys)], n, w))
				if n%5 == 0 {
					typ, data = "AuditLogged", []byte(fmt.Sprintf(`{"msg":"w%d-%d"}`, w, n))
				}
				ctx := context.Background()
				tx, err := e.db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := e.ob.Enqueue(ctx, tx, Event{Type: typ, Data: data}); err != nil {
					_ = tx.Rollback()
					t.Error(err)
					return
				}
				if err := tx.Commit(); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	progress.Wait()
	stop1() // r2 takes over what r1 held
	wg.Wait()
	if t.Failed() {
		return
	}
	total := writers*perWriter + early + early/4
	testkit.WaitFor(t, 20*time.Second, "every row published", func() bool { return e.countStatus(t, StatusPublished) == total })

	rows := e.rows(t)
	byEvent := map[string]stored{}
	for _, r := range rows {
		byEvent[r.EventID] = r
	}
	seen := map[string]bool{}
	ks := e.broker.Keys()
	for _, stream := range []string{"audit", ks.PartitionStream("order", "c-0"), ks.PartitionStream("order", "c-1"), ks.PartitionStream("order", "c-2")} {
		lastRow := int64(0)
		lastN := map[string]int{}
		msgs, err := e.rdb.XRange(context.Background(), stream, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			ev, err := engine.EventFromMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			if seen[ev.ID] {
				t.Errorf("%s: event %s appended twice", stream, ev.ID)
			}
			seen[ev.ID] = true
			r := byEvent[ev.ID]
			if r.Stream != stream || r.EntryID != m.ID {
				t.Errorf("%s: row of %s records %s %s; want %s %s", stream, ev.ID, r.Stream, r.EntryID, stream, m.ID)
			}
			if stream == "audit" {
				continue
			}
			var p order
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				t.Fatal(err)
			}
			// Commit order: ids of one key increase in commit order (PostgreSQL: the
			// trigger's per-key lock; SQLite: one writer at a time), and each writer's
			// own events of a key are in its commit order.
			if r.ID <= lastRow {
				t.Errorf("%s: row %d after row %d: not in commit order", stream, r.ID, lastRow)
			}
			if p.N <= lastN[p.Writer] {
				t.Errorf("%s: %s's event %d after its event %d", stream, p.Writer, p.N, lastN[p.Writer])
			}
			lastRow, lastN[p.Writer] = r.ID, p.N
		}
	}
	if len(seen) != total {
		t.Errorf("%d distinct events in the streams; want %d", len(seen), total)
	}
	x.mu.Lock()
	if len(x.violations) > 0 {
		t.Errorf("lease exclusivity violated: %v", x.violations)
	}
	x.mu.Unlock()
	s1, s2 := r1.Stats(), r2.Stats()
	if s1.Published == 0 || s2.Published == 0 || s1.Published+s2.Published+s1.Duplicates+s2.Duplicates != uint64(total) {
		t.Errorf("r1 %+v, r2 %+v: want both to publish and the sum to be %d", s1, s2, total)
	}
	if ks.IsCluster() {
		for _, k := range keys {
			if !slices.Contains(ks.IndexMembers(context.Background(), e.rdb, "order").Val(), k) {
				t.Errorf("partition %s is not in the category index", k)
			}
		}
	}
}

// stalling blocks its first publish until released: a relay frozen past its lease.
type stalling struct {
	*engine.RedisBroker
	once    sync.Once
	stalled chan struct{}
	release chan struct{}
}

func (s *stalling) PublishRouted(ctx context.Context, r engine.Route, ev engine.Event, seq int64) (engine.Published, error) {
	s.once.Do(func() {
		close(s.stalled)
		<-s.release
	})
	return s.RedisBroker.PublishRouted(ctx, r, ev, seq)
}

// A relay that stalls past its lease while another takes over: the stale relay's late
// append is a no-op (dedupe), its row updates are fenced, and it stops the category.
func TestStalledRelayIsFenced(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{})
		var ids []string
		for n := 1; n <= 3; n++ {
			ids = append(ids, e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", n)}).EventID)
		}
		st := &stalling{RedisBroker: e.broker, stalled: make(chan struct{}), release: make(chan struct{})}
		stale := e.relay(t, st, func(c *RelayConfig) { c.Owner = "stale"; c.LeaseTTL = 200 * time.Millisecond })
		done := make(chan DrainResult, 1)
		go func() {
			res, err := stale.Drain(context.Background())
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		<-st.stalled

		fresh := e.relay(t, nil, func(c *RelayConfig) { c.Owner = "fresh" })
		testkit.WaitFor(t, 5*time.Second, "the fresh relay to take over and publish", func() bool {
			if _, err := fresh.Drain(context.Background()); err != nil {
				t.Fatal(err)
			}
			return e.countStatus(t, StatusPublished) == 3
		})
		close(st.release)
		res := <-done
		if diff := cmp.Diff(DrainResult{}, res); diff != "" {
			t.Errorf("stale relay's counted work (-want +got):\n%s", diff)
		}
		if got := stale.Stats().LeasesLost; got != 1 {
			t.Errorf("stale relay lost %d leases; want 1", got)
		}
		var got []string
		for _, en := range e.stream(t, "order:c-1") {
			got = append(got, en.EventID)
		}
		if diff := cmp.Diff(ids, got); diff != "" {
			t.Errorf("order:c-1 (-want +got):\n%s", diff)
		}
	})
}

// The lease: one owner at a time, a takeover only after expiry and at a higher generation,
// the old owner fenced, dedupe sequences never going back.
func TestLeaseGenerationsAndFence(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{})
		ctx := context.Background()
		mk := func(owner string) *Relay {
			return e.relay(t, nil, func(c *RelayConfig) { c.Owner = owner; c.LeaseTTL = 5 * time.Second })
		}
		a, b := mk("a"), mk("b")
		la, ok, err := a.acquire(ctx, "order")
		if err != nil || !ok || la.generation != 1 {
			t.Fatalf("a.acquire = %+v, %v, %v; want generation 1", la, ok, err)
		}
		if _, ok, err := b.acquire(ctx, "order"); ok || err != nil {
			t.Fatalf("b took a live lease (ok=%v, err=%v)", ok, err)
		}
		s1, err := a.fence(ctx, nil, la, 5)
		if err != nil {
			t.Fatal(err)
		}
		if min := time.Now().Add(-time.Minute).UnixMicro(); s1 < min {
			t.Errorf("sequence %d is below the clock floor %d", s1, min)
		}
		// a's lease expires (by the database clock; set here rather than waited for).
		if _, err := e.db.Exec("UPDATE seqctl_outbox_lease SET expires_ms = expires_ms - 10000"); err != nil {
			t.Fatal(err)
		}
		lb, ok, err := b.acquire(ctx, "order")
		if err != nil || !ok || lb.generation != 2 {
			t.Fatalf("b.acquire after expiry = %+v, %v, %v; want generation 2", lb, ok, err)
		}
		if _, err := a.fence(ctx, nil, la, 1); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale a.fence = %v; want ErrFenced", err)
		}
		a.release(ctx, la) // not a's any more: no effect
		if _, ok, _ := a.acquire(ctx, "order"); ok {
			t.Fatal("a's release of a lease it lost freed b's lease")
		}
		s2, err := b.fence(ctx, nil, lb, 1)
		if err != nil || s2 <= s1 {
			t.Fatalf("b.fence = %d, %v; want a sequence above %d", s2, err, s1)
		}
		b.release(ctx, lb)
		la, ok, err = a.acquire(ctx, "order")
		if err != nil || !ok || la.generation != 3 {
			t.Fatalf("a.acquire after release = %+v, %v, %v; want generation 3", la, ok, err)
		}
	})
}
