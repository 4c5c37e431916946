package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/testkit"
)

func granted(t *slotTicket) bool {
	select {
	case <-t.ready:
		return true
	default:
		return false
	}
}

// TestSlotsFirstComeFirstServed checks the semaphore's fairness: a partition that waits
// gets a slot before one that arrived later, a handler at its limit does not hold up
// another handler, and the instance cap bounds them all.
func TestSlotsFirstComeFirstServed(t *testing.T) {
	t.Run("one handler", func(t *testing.T) {
		s := newSlots(0, map[string]int{"a": 1}, []string{"a"})
		first := s.enqueue("a", "")
		early, late := s.enqueue("a", ""), s.enqueue("a", "")
		if !granted(first) || granted(early) || granted(late) {
			t.Fatal("want only the first granted")
		}
		s.done(first)
		if !granted(early) || granted(late) {
			t.Fatal("the earlier waiter must be served first")
		}
		s.done(early)
		if !granted(late) {
			t.Fatal("the later waiter must be served once the slot is free")
		}
		s.done(late)
	})
	t.Run("a handler at its limit does not hold up another", func(t *testing.T) {
		s := newSlots(3, map[string]int{"a": 1}, []string{"a", "b"})
		a1, a2 := s.enqueue("a", ""), s.enqueue("a", "")
		b1 := s.enqueue("b", "")
		if !granted(a1) || granted(a2) || !granted(b1) {
			t.Fatal("want a1 and b1 granted, a2 waiting on a's limit")
		}
		s.done(a1)
		s.done(a2)
		s.done(b1)
	})
	t.Run("instance cap: earliest arrival first across handlers", func(t *testing.T) {
		s := newSlots(2, map[string]int{"a": 1}, []string{"a", "b"})
		a1, b1 := s.enqueue("a", ""), s.enqueue("b", "") // the instance is full
		a2, b2 := s.enqueue("a", ""), s.enqueue("b", "")
		if granted(a2) || granted(b2) {
			t.Fatal("want a2 and b2 waiting on the instance cap")
		}
		s.done(b1) // one slot free: a is at its limit, so b2 gets it although a2 came first
		if granted(a2) || !granted(b2) {
			t.Fatal("want b2 granted: a2 is held by a's own limit")
		}
		b3 := s.enqueue("b", "")
		s.done(a1) // a2 arrived before b3
		if !granted(a2) || granted(b3) {
			t.Fatal("want a2 granted before the later b3")
		}
		total, per := s.stats()
		if diff := cmp.Diff(SlotStats{InUse: 2, Limit: 2, Waiting: 1}, total); diff != "" {
			t.Errorf("instance stats (-want +got):\n%s", diff)
		}
		wantPer := []HandlerSlotStats{
			{Handler: "a", SlotStats: SlotStats{InUse: 1, Limit: 1}},
			{Handler: "b", SlotStats: SlotStats{InUse: 1, Waiting: 1}},
		}
		if diff := cmp.Diff(wantPer, per); diff != "" {
			t.Errorf("handler stats (-want +got):\n%s", diff)
		}
		for _, tk := range []*slotTicket{a2, b2, b3} {
			s.done(tk)
		}
	})
	t.Run("a waiter that gives up leaves the line", func(t *testing.T) {
		s := newSlots(1, nil, []string{"a"})
		first := s.enqueue("a", "")
		quitter, next := s.enqueue("a", ""), s.enqueue("a", "")
		s.done(quitter)
		s.done(quitter) // idempotent
		s.done(first)
		if granted(quitter) || !granted(next) {
			t.Fatal("want the slot passed to the next waiter, not the one that left")
		}
		s.done(next)
		if total, _ := s.stats(); total != (SlotStats{Limit: 1}) {
			t.Errorf("stats after everything was given back: %+v", total)
		}
	})
}

// TestWaitingForASlotIsNotAnAttempt runs six partitions through a handler limited to one
// call at a time, for longer than the lease TTL in total: every event runs once, at
// attempt 1, never two at once, and the waiting partitions keep their leases.
func TestWaitingForASlotIsNotAnAttempt(t *testing.T) {
	srv, _, b := startNode(t)
	var mu sync.Mutex
	attempts := map[string][]int{}
	running, most := 0, 0
	d := testDomain(t, func(ctx context.Context, ev Event) error {
		dl, _ := DeliveryFrom(ctx)
		mu.Lock()
		attempts[ev.Key] = append(attempts[ev.Key], dl.Attempt)
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(250 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}, nil)
	keys := keysOf(6)
	e := startEngineWith(t, srv, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(time.Second)
		c.HandlerLimits = map[string]int{"Projector": 1}
	})
	for _, k := range keys {
		publish(t, b, d, k, 1, false)
	}
	sawWaiting := false
	testkit.WaitFor(t, 10*time.Second, "every event handled", func() bool {
		if st := e.Stats(); st.Slots.Waiting > 0 {
			sawWaiting = true
		}
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == len(keys) && running == 0
	})
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]int{}
	for _, k := range keys {
		want[k] = []int{1}
	}
	if diff := cmp.Diff(want, attempts); diff != "" {
		t.Errorf("attempts per key (-want +got):\n%s", diff)
	}
	if most != 1 {
		t.Errorf("%d handler calls ran at once, want at most 1", most)
	}
	if !sawWaiting {
		t.Error("Stats never showed a partition waiting for a slot")
	}
}

// TestShutdownEndsSlotWaitsWithoutAnAttempt stops an instance while partitions wait for
// a slot: the waits end at once, and the next owner delivers their events at attempt 1.
func TestShutdownEndsSlotWaitsWithoutAnAttempt(t *testing.T) {
	srv, _, b := startNode(t)
	release := make(chan struct{})
	started := make(chan string, 8)
	d1 := testDomain(t, func(ctx context.Context, ev Event) error {
		started <- ev.Key
		<-release
		return nil
	}, nil)
	e1 := startEngineWith(t, srv, d1, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(2 * time.Second)
		c.HandlerLimits = map[string]int{"Projector": 1}
	})
	keys := keysOf(4)
	for _, k := range keys {
		publish(t, b, d1, k, 1, false)
	}
	first := <-started
	testkit.WaitFor(t, 5*time.Second, "three partitions waiting", func() bool { return e1.Stats().Slots.Waiting == 3 })
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	if err := e1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(started) != 0 {
		t.Fatalf("a waiting partition started its handler during shutdown: %s", <-started)
	}
	attempts := nextOwnerAttempts(t, srv, 3, "the waiting partitions handled by i2", func(ev Event) string { return ev.Key })
	want := map[string]int{}
	for _, k := range keys {
		if k != first {
			want[k] = 1
		}
	}
	if diff := cmp.Diff(want, attempts); diff != "" {
		t.Errorf("attempt numbers after waiting for a slot (-want +got):\n%s", diff)
	}
}

// The lines of a handler's limit values take turns: a value with a backlog of waiting
// partitions does not keep another value's partition waiting behind all of them, and a
// partition that leaves its line keeps the line's place.
func TestSlotsTakeTurnsAcrossLimitValues(t *testing.T) {
	s := newSlots(0, map[string]int{"a": 1}, []string{"a"})
	running := s.enqueue("a", "acme")
	acme := []*slotTicket{s.enqueue("a", "acme"), s.enqueue("a", "acme"), s.enqueue("a", "acme")}
	bolt := s.enqueue("a", "bolt")
	cove := s.enqueue("a", "cove")
	s.done(acme[1]) // leaves the acme line before its turn
	var order []string
	names := map[*slotTicket]string{acme[0]: "acme0", acme[2]: "acme2", bolt: "bolt", cove: "cove"}
	cur := running
	for range 4 {
		s.done(cur)
		cur = nil
		for tk, n := range names {
			if granted(tk) {
				order = append(order, n)
				delete(names, tk)
				cur = tk
			}
		}
		if cur == nil {
			t.Fatalf("nothing granted after %v", order)
		}
	}
	s.done(cur)
	if diff := cmp.Diff([]string{"acme0", "bolt", "cove", "acme2"}, order); diff != "" {
		t.Errorf("grant order (-want +got):\n%s", diff)
	}
	if st, _ := s.stats(); st.Waiting != 0 || st.InUse != 0 {
		t.Errorf("after every release: %+v", st)
	}
}
