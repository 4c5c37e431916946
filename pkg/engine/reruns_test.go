package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The re-run promise under Redis faults: with max_unacked = N, after a failure at most N
// handled events of a partition run again, in order; with N = 1 only the event in flight.

// genSink is a sink that fences on the generation, as the docs tell users to build one:
// per key it refuses a write from a lower generation than one it applied. It records
// what it applied, in order.
type genSink struct {
	mu      sync.Mutex
	applied map[string][]appliedEv // key -> what was applied, in order
	maxGen  map[string]int64
	refused int
}

type appliedEv struct {
	seq int
	gen int64
}

func newGenSink() *genSink {
	return &genSink{applied: map[string][]appliedEv{}, maxGen: map[string]int64{}}
}

func (s *genSink) handle(ctx context.Context, ev Event) error {
	d, _ := DeliveryFrom(ctx)
	var p testPayload
	if err := json.Unmarshal(ev.Data, &p); err != nil {
		return err
	}
	time.Sleep(time.Millisecond) // the work
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.Generation < s.maxGen[ev.Key] {
		s.refused++
		return nil // a stale owner's late write: refused by the fence, not an error
	}
	s.maxGen[ev.Key] = d.Generation
	s.applied[ev.Key] = append(s.applied[ev.Key], appliedEv{p.Seq, d.Generation})
	return nil
}

// rerunStats analyses one key's applied sequence against its publish order 0..n-1.
type rerunStats struct {
	dups         int // applications of a seq that was applied before
	inversions   int // applications of a seq below the highest applied one that are not the latest re-run
	owners       int // distinct generations that applied something
	longestRerun int // the longest run of consecutive re-applications by one owner
	outOfOrder   int // re-runs by one owner that did not follow each other in order
	missing      int
}

func analyse(evs []appliedEv, n int) rerunStats {
	var st rerunStats
	seen := map[int]bool{}
	gens := map[int64]bool{}
	high := -1
	run := 0
	prev := -2
	var prevGen int64
	for _, e := range evs {
		gens[e.gen] = true
		if seen[e.seq] {
			st.dups++
			if e.seq < high {
				st.inversions++ // applied after a later event of the key
			}
			if e.gen != prevGen {
				run = 0 // a new owner starts its own re-run
			}
			run++
			if prev != -2 && e.seq != prev+1 && run > 1 {
				st.outOfOrder++
			}
		} else {
			run = 0
			if e.seq != high+1 {
				st.outOfOrder++
			}
		}
		st.longestRerun = max(st.longestRerun, run)
		seen[e.seq] = true
		high = max(high, e.seq)
		prev, prevGen = e.seq, e.gen
	}
	for i := 0; i < n; i++ {
		if !seen[i] {
			st.missing++
		}
	}
	st.owners = len(gens)
	return st
}

// faultRun publishes keys x n events, breaks Redis with fault once a third is applied,
// and checks the re-runs against maxUnacked.
func faultRun(t *testing.T, tg redisTarget, maxUnacked int, fault func()) {
	t.Helper()
	runFault(t, tg, maxUnacked, true, fault)
}

// runFault is faultRun; with bounded false, the fault may lose writes Redis confirmed (a
// failover to a replica that had not received them), so an acknowledged event may run
// again: only completeness and order are checked, and the re-runs are logged.
func runFault(t *testing.T, tg redisTarget, maxUnacked int, bounded bool, fault func()) {
	t.Helper()
	b := NewRedisBroker(tg.client(t))
	keys := keysOf(20)
	const n = 60
	const ttl = time.Second
	sink := newGenSink()
	for _, id := range []string{"i1", "i2"} {
		startEngineOn(t, tg, testDomain(t, sink.handle, nil), id, func(c *EngineConfig) {
			c.Timing, c.MaxUnacked = fastTiming(ttl), maxUnacked
		})
	}
	d := testDomain(t, nil, nil)
	var events []testPayload
	for seq := 0; seq < n; seq++ {
		for _, k := range keys {
			events = append(events, testPayload{Client: k, Seq: seq})
		}
	}
	bulkPublish(t, b, d, events)
	count := func() int {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		c := 0
		for _, evs := range sink.applied {
			c += len(evs)
		}
		return c
	}
	testkit.WaitFor(t, 20*time.Second, "a third applied", func() bool { return count() >= len(events)/3 })
	fault()
	testkit.WaitFor(t, 30*time.Second, "every event applied", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, k := range keys {
			if st := analyse(sink.applied[k], n); st.missing > 0 {
				return false
			}
		}
		return true
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var totalDups, totalInv, maxRun int
	var report []string
	for _, k := range keys {
		st := analyse(sink.applied[k], n)
		totalDups += st.dups
		totalInv += st.inversions
		maxRun = max(maxRun, st.longestRerun)
		changes := st.owners - 1
		if st.outOfOrder > 0 {
			t.Errorf("key %s: %d applications out of publish order: %v", k, st.outOfOrder, sink.applied[k])
		}
		if !bounded {
			// nothing more to check
		} else if maxUnacked == 1 {
			if st.dups > changes {
				t.Errorf("key %s: %d duplicates over %d ownership changes (max_unacked = 1 allows one each): %v", k, st.dups, changes, sink.applied[k])
			}
			if st.inversions > 0 {
				t.Errorf("key %s: %d inversions: %v", k, st.inversions, sink.applied[k])
			}
		} else if st.longestRerun > maxUnacked {
			t.Errorf("key %s: a run of %d re-applied events, more than max_unacked = %d", k, st.longestRerun, maxUnacked)
		}
		if st.dups > 0 {
			report = append(report, fmt.Sprintf("%s:%d", k, st.dups))
		}
	}
	sort.Strings(report)
	t.Logf("max_unacked %d: %d events, %d duplicates (%d inversions, longest re-run %d, %d stale writes refused); per key %s",
		maxUnacked, len(events), totalDups, totalInv, maxRun, sink.refused, strings.Join(report, " "))
}

// CLIENT PAUSE for 2.5 x TTL in the middle of a 20-key stream, two
// engines, a generation-fenced sink. max_unacked = 1: at most one duplicate per key per
// ownership change and no inversion, in 5 runs; max_unacked = 16: re-runs in order, at
// most 16 in a row.
func TestClientPauseReruns(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		maxUnacked, runs int
	}{{1, 5}, {16, 2}} {
		for run := 1; run <= tc.runs; run++ {
			t.Run(fmt.Sprintf("max_unacked=%d/run%d", tc.maxUnacked, run), func(t *testing.T) {
				srv := redistest.Start(t)
				admin := srv.Client(t)
				faultRun(t, redisTarget{srv: srv}, tc.maxUnacked, func() {
					if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 2500, "ALL").Err(); err != nil {
						t.Fatal(err)
					}
				})
			})
		}
	}
	// Every master of a 3-master Redis Cluster paused at once: the leases, which carry
	// their own expiry there, lapse while their renewals cannot run.
	for _, maxUnacked := range []int{1, 16} {
		t.Run(fmt.Sprintf("cluster/max_unacked=%d", maxUnacked), func(t *testing.T) {
			cl := redistest.StartCluster(t, 3)
			faultRun(t, redisTarget{cl: cl}, maxUnacked, func() {
				for _, n := range cl.Nodes {
					if err := n.Client(t).Do(context.Background(), "CLIENT", "PAUSE", 2500, "ALL").Err(); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}
}

// The same with a Redis restart (AOF, appendfsync always), down for 1.5 x TTL.
func TestRedisRestartReruns(t *testing.T) {
	skipShort(t)
	for _, maxUnacked := range []int{1, 16} {
		t.Run(fmt.Sprintf("max_unacked=%d", maxUnacked), func(t *testing.T) {
			srv := redistest.StartWith(t, redistest.Options{AOF: true})
			faultRun(t, redisTarget{srv: srv}, maxUnacked, func() {
				srv.Stop()
				time.Sleep(1500 * time.Millisecond)
				srv.StartAgain()
			})
		})
	}
	// On a 3-master Redis Cluster: every master down for 1.5 x TTL and started again
	// from its AOF (a whole-cluster restart), and the master serving the sessions, the
	// instance registry and the control stream alone.
	for _, maxUnacked := range []int{1, 16} {
		for _, which := range []string{"every master", "the sessions' master"} {
			t.Run(fmt.Sprintf("cluster/%s/max_unacked=%d", which, maxUnacked), func(t *testing.T) {
				cl := redistest.StartClusterWith(t, 3, redistest.Options{AOF: true})
				nodes := cl.Nodes
				if which != "every master" {
					nodes = []*redistest.Server{cl.Nodes[cl.NodeOf(t, keyspace.Cluster.SessionKey("x"))]}
				}
				faultRun(t, redisTarget{cl: cl}, maxUnacked, func() {
					for _, n := range nodes {
						n.Stop()
					}
					time.Sleep(1500 * time.Millisecond)
					for _, n := range nodes {
						n.StartAgain()
					}
				})
			})
		}
	}
}

// A failover on a 3-master Redis Cluster with a replica per master: the master serving
// the sessions, the registry and the control stream, and some partitions, is killed in
// the middle of the stream; its replica takes over after the node timeout. Every event is
// applied, in publish order; the generations stay above the old ones (the sink refuses
// a lower one). Writes the old master confirmed but had not passed on are lost, so an
// acknowledged event may run again; the test logs how many did.
func TestClusterFailoverReruns(t *testing.T) {
	skipShort(t)
	for _, maxUnacked := range []int{1, 16} {
		t.Run(fmt.Sprintf("max_unacked=%d", maxUnacked), func(t *testing.T) {
			cl := redistest.StartClusterReplicated(t, 3, redistest.Options{})
			probe := keyspace.Cluster.SessionKey("x")
			old := cl.Nodes[cl.NodeOf(t, probe)]
			runFault(t, redisTarget{cl: cl}, maxUnacked, false, func() {
				old.Stop()
				now := cl.WaitFailover(t, probe, old)
				t.Logf("%s took over from %s", now.Addr, old.Addr)
				old.StartAgain() // it rejoins as a replica of the new master
			})
		})
	}
}
