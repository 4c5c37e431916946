package engine

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
)

// restartParts is how many partitions TestCrashWithManyPartitionsLosesNothing gives the
// instance it crashes: 5,000 in `make test`; SEQCTL_TEST_RESTART_PARTS=100000 for the
// figure of docs/benchmarks.md ("The engine at a million keys").
func restartParts() int { return envInt("SEQCTL_TEST_RESTART_PARTS", 5_000) }

// applied records, in memory, each key's applications in the order they ran: n counts
// them, distinct the events that ran at least once.
type applied struct {
	mu          sync.Mutex
	byKey       map[string][]int
	n, distinct atomic.Int64
}

func (a *applied) handle(_ context.Context, ev Event) error {
	var p testPayload
	if err := json.Unmarshal(ev.Data, &p); err != nil {
		return err
	}
	a.mu.Lock()
	if !slices.Contains(a.byKey[ev.Key], p.Seq) {
		a.distinct.Add(1)
	}
	a.byKey[ev.Key] = append(a.byKey[ev.Key], p.Seq)
	a.mu.Unlock()
	a.n.Add(1)
	return nil
}

// An instance that holds every one of many partitions (restartParts) and is half way
// through their backlogs crashes: no acknowledgement flushed, no lease released. A new
// instance takes every partition over once the sessions expire: every event runs, in
// publish order per key, and only an event in flight at the crash runs twice (one per
// key at most: max_unacked is 1).
func TestCrashWithManyPartitionsLosesNothing(t *testing.T) {
	skipShort(t)
	parts, perKey := restartParts(), 3
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	rec := &applied{byKey: map[string][]int{}}
	d := testDomain(t, rec.handle, nil)
	keys := keysOf(parts)
	var ps []testPayload
	for seq := range perKey {
		for _, k := range keys {
			ps = append(ps, testPayload{Client: k, Seq: seq})
		}
	}
	bulkPublish(t, NewRedisBroker(rdb), d, ps)
	total := int64(len(ps))

	ttl := 2 * time.Second
	a := startEngine(t, srv, d, "a", ttl)
	budget := time.Duration(parts/500+30) * time.Second // about 1,000 events a second at least
	testkit.WaitFor(t, budget, "a owns every partition, a third of the events handled", func() bool {
		return len(a.Owned()) == parts && rec.distinct.Load() >= total/3
	})
	crashedAt := rec.distinct.Load()
	crash(a)
	t.Logf("a crashed holding %d partitions, %d of %d events handled", parts, crashedAt, total)

	b := startEngine(t, srv, d, "b", ttl)
	testkit.WaitFor(t, budget, "every event handled after the takeover", func() bool { return rec.distinct.Load() == total })
	time.Sleep(ttl) // what else would run (it must not)
	if n := len(b.Owned()); n != parts {
		t.Errorf("b owns %d partitions, want %d", n, parts)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	reruns, rerunKeys := 0, 0
	for _, k := range keys {
		got := rec.byKey[k]
		first, dups := dedupFirst(got)
		if !slices.Equal(first, seqs(0, perKey)) {
			t.Fatalf("key %s ran %v: want every event once in publish order (%v), re-runs next to their first run", k, got, seqs(0, perKey))
		}
		if !isRerunOfPrevious(got) {
			t.Fatalf("key %s ran %v: a re-run that is not the event just before it", k, got)
		}
		if dups > 1 {
			t.Errorf("key %s ran %v: %d re-runs, want at most 1 (the event in flight at the crash)", k, got, dups)
		}
		reruns += dups
		if dups > 0 {
			rerunKeys++
		}
	}
	t.Logf("after the takeover: %d events handled in all for %d published; %d re-runs over %d keys", rec.n.Load(), total, reruns, rerunKeys)
	if rec.n.Load() != total+int64(reruns) {
		t.Errorf("%d applications for %d events and %d re-runs", rec.n.Load(), total, reruns)
	}
}

// isRerunOfPrevious reports whether every repeated value of xs repeats the value right
// before it (a re-run of the event in flight, never of an older one).
func isRerunOfPrevious(xs []int) bool {
	seen := map[int]bool{}
	for i, x := range xs {
		if seen[x] && xs[i-1] != x {
			return false
		}
		seen[x] = true
	}
	return true
}
