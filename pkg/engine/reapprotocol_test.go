package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// startReaper starts the instance i1 on a 3-master Redis Cluster, its Projector a sink,
// reaping partitions idle for 300 ms; it returns a client of the cluster, the domain and
// the engine.
func startReaper(t *testing.T) (redis.UniversalClient, *Domain, *Engine) {
	t.Helper()
	tg := redisTarget{cl: redistest.StartCluster(t, 3)}
	d := sinkDomain(t, tg.client(t), "i1", nil)
	e := startEngineOn(t, tg, d, "i1", func(c *EngineConfig) {
		c.Timing = fastTiming(time.Second)
		c.Timing.ReapIdle = 300 * time.Millisecond
	})
	return tg.client(t), d, e
}

// holdReap stops the reaps of stream at each of their points: reached receives the
// point (0 once the reaper read the index value, 1 once it deleted the partition, 2 once
// it unindexed the key), and the reap goes on when resume is sent true (false stops it
// there). Reaps of other partitions go on.
func holdReap(e *Engine, stream string) (reached <-chan int, resume chan<- bool) {
	point := map[string]int{"read-index": 0, "reaped": 1, "done": 2}
	at := make(chan int)
	goOn := make(chan bool)
	hook := func(step, unit string) bool {
		if unit != stream {
			return true // another partition's reap
		}
		at <- point[step]
		return <-goOn
	}
	e.reapHook.Store(&hook)
	return at, goOn
}

// On Redis Cluster a publish (append; index write; indexed mark) and a
// reap (read the index value; delete the idle partition; compare-and-remove it from the
// index) are separate calls on different nodes. Every interleaving of the two is forced,
// step by step, through the steps' hooks, along with a publisher that stops after its
// append and a reaper that stops after its delete (as crashes would). In every case the
// racing event is handled, and once everything settles a partition stream that exists is
// in the index and marked.
func TestReapNeverStrandsAPublishOnCluster(t *testing.T) {
	rdb, d, e := startReaper(t)
	ks := keyspace.For(rdb)
	ctx := context.Background()

	// Points of the reap the publisher's steps are placed at: after the reaper read the
	// index value (0), after it deleted the partition (1), after it unindexed it (2).
	type tcase struct {
		at        [3]int // where append, index write and mark happen
		pubStops  bool   // the publisher stops after its append (then retries)
		reapStops bool   // the reaper stops after its delete
	}
	var cases []tcase
	for x := 0; x < 3; x++ {
		for a := x; a < 3; a++ {
			for m := a; m < 3; m++ {
				cases = append(cases, tcase{at: [3]int{x, a, m}})
			}
		}
		cases = append(cases, tcase{at: [3]int{x, 3, 3}, pubStops: true})
		cases = append(cases, tcase{at: [3]int{x, x, x}, reapStops: true})
	}
	reapedCases := 0
	for i, tc := range cases {
		key := fmt.Sprintf("c%d", i)
		name := fmt.Sprintf("%s append@%d index@%d mark@%d pubStops=%v reapStops=%v", key, tc.at[0], tc.at[1], tc.at[2], tc.pubStops, tc.reapStops)
		stream := ks.PartitionStream("order", key)
		publish(t, NewRedisBroker(rdb), d, key, 0, false)
		testkit.WaitFor(t, 5*time.Second, name+": first event handled", func() bool { return len(logOf(t, rdb, key)) == 1 })

		// The reaper of this partition stops at each of its points until told to go on.
		reached, resume := holdReap(e, stream)
		wait := func(what string) int {
			select {
			case p := <-reached:
				return p
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the reap never reached %s", name, what)
				return 0
			}
		}

		// The publisher stops after each of its steps until told to go on; a publish
		// that finds the partition marked has no step after its append.
		pub := NewRedisBroker(rdb)
		stepDone := make(chan struct{})
		stepGo := make(chan bool)
		pub.stepHook = func(string) bool {
			stepDone <- struct{}{}
			return <-stepGo
		}
		data, _ := json.Marshal(testPayload{Client: key, Seq: 1})
		finished := make(chan error, 1)
		over := false // the publish returned
		next := 0     // its next step: 0 append, 1 index write, 2 mark
		step := func() {
			switch {
			case over:
			case next == 0:
				go func() {
					_, err := pub.Publish(ctx, d, "OrderPlaced", data, PublishOptions{ID: "race-" + key})
					finished <- err
				}()
			default:
				stepGo <- !(tc.pubStops && next == 1)
			}
			if !over {
				select {
				case <-stepDone:
				case err := <-finished:
					if err != nil {
						t.Fatalf("%s: publish: %v", name, err)
					}
					over = true
				}
			}
			next++
		}
		stepsAt := func(p int) {
			for next < 3 && tc.at[next] == p {
				step()
			}
		}

		if wait("its index read") != 0 {
			t.Fatalf("%s: the reap did not start by reading the index", name)
		}
		stepsAt(0)
		resume <- true
		if wait("its delete") == 1 { // it deleted the partition
			reapedCases++
			stepsAt(1)
			resume <- !tc.reapStops
			wait("its end")
		}
		stepsAt(1)
		stepsAt(2)
		e.reapHook.Store(nil)
		resume <- true
		for !over {
			step()
		}
		if tc.pubStops {
			// The caller got no answer and publishes again with the same event id: a
			// duplicate append, but one that writes the index.
			if _, err := NewRedisBroker(rdb).Publish(ctx, d, "OrderPlaced", data, PublishOptions{ID: "race-" + key}); err != nil {
				t.Fatal(err)
			}
		}
		// Both are over, and no other reap of the partition may start: a stream that
		// exists must be in the index (else only this instance's memory of the key
		// would find it again) and marked.
		hold := func(step, unit string) bool { return unit != stream }
		e.reapHook.Store(&hold)
		exists := rdb.Exists(ctx, stream).Val() == 1
		marked := rdb.Exists(ctx, ks.IndexedMarkKey(stream)).Val() == 1
		if exists && !(isIndexed(t, rdb, "order", key) && marked) {
			t.Errorf("%s: the stream exists but indexed=%v marked=%v", name, isIndexed(t, rdb, "order", key), marked)
		}
		testkit.WaitFor(t, 10*time.Second, name+": racing event handled", func() bool { return len(logOf(t, rdb, key)) >= 2 })
		e.reapHook.Store(nil)
		t.Logf("%s: stream exists=%v, handled %v", name, exists, logOf(t, rdb, key))
	}
	// The cases where the append comes after the delete must have raced a real reap.
	if reapedCases < len(cases)/2 {
		t.Errorf("only %d of %d cases deleted the partition: the interleavings were not forced", reapedCases, len(cases))
	}
}

// A publish retried with the event id of an entry the reap is retiring (a client that
// resends after a lost reply, an outbox row sent again) appends nothing, and must not
// write the index with that entry's id: the reaper's compare would then match and remove
// the key while the retry sets the indexed mark, so that the key's next publish writes no
// index entry and no instance ever finds the partition again. The retry is placed at
// each point of the reap; afterwards a new event of the key must be handled.
func TestReapNeverStrandsARetriedPublishOnCluster(t *testing.T) {
	rdb, d, e := startReaper(t)
	ks := keyspace.For(rdb)
	ctx := context.Background()
	names := []string{"after the reaper read the index", "after the reap deleted the partition", "after the reaper unindexed the key"}
	for at, where := range names {
		key := fmt.Sprintf("r%d", at)
		stream := ks.PartitionStream("order", key)
		data, _ := json.Marshal(testPayload{Client: key, Seq: 1})
		id := "retried-" + key
		if _, err := NewRedisBroker(rdb).Publish(ctx, d, "OrderPlaced", data, PublishOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 5*time.Second, where+": first event handled", func() bool { return len(logOf(t, rdb, key)) == 1 })

		reached, resume := holdReap(e, stream)
		reapedIt := false
		for p := 0; p < 3; p++ {
			var got int
			select {
			case got = <-reached:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the reap never reached step %d", where, p)
			}
			if got == 1 {
				reapedIt = true
			}
			if got == at {
				// The retry, whole: a duplicate by its event id.
				pub, err := NewRedisBroker(rdb).Publish(ctx, d, "OrderPlaced", data, PublishOptions{ID: id})
				if err != nil {
					t.Fatalf("%s: retry: %v", where, err)
				}
				if !pub.Duplicate {
					t.Fatalf("%s: the retry appended %s: not a duplicate", where, pub.EntryID)
				}
			}
			if p == 2 || got == 2 {
				e.reapHook.Store(nil)
				resume <- true
				break
			}
			resume <- true
		}
		if !reapedIt {
			t.Fatalf("%s: the partition was not reaped", where)
		}
		// The key's next event must be found and handled.
		next, _ := json.Marshal(testPayload{Client: key, Seq: 2})
		if _, err := NewRedisBroker(rdb).Publish(ctx, d, "OrderPlaced", next, PublishOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, where+": the next event handled", func() bool { return len(logOf(t, rdb, key)) >= 2 })
		if !isIndexed(t, rdb, "order", key) {
			t.Errorf("%s: the partition's stream exists but its key is not indexed", where)
		}
	}
}
