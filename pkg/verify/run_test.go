package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
)

func runOn(t *testing.T, srv *redistest.Server, o Options) Result {
	t.Helper()
	o.Client = srv.Client(t)
	o.NewClient = func(name string) redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: o.Client.(*redis.Client).Options().Addr, ContextTimeoutEnabled: true, ClientName: name})
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A correct run finds nothing, also when one of the instances stops abruptly half-way
// (its partitions are taken over, their events in flight run again), and leaves no key
// of the workload behind.
func TestRunFindsNothingThroughAFault(t *testing.T) {
	srv := redistest.Start(t)
	for _, fault := range []bool{false, true} {
		o := Options{Keys: 40, Events: 15, Instances: 2}
		if fault {
			o.Faults = func(ctx context.Context, c *Control) {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
					if n, err := c.Drop(ctx, 1); err != nil || n == 0 {
						t.Errorf("drop the connections of instance 1: %d closed, %v", n, err)
					}
					c.Stop(0)
				}
			}
			// Slow enough that the instance stopped has events left when it stops.
			o.Handler = func(_ context.Context, a Application) (Application, error) {
				time.Sleep(2 * time.Millisecond)
				return a, nil
			}
		}
		res := runOn(t, srv, o)
		r := res.Report
		if !r.OK() || r.Applied != 600 || r.Published != 600 {
			t.Errorf("fault %v: applied %d of %d; violations %+v", fault, r.Applied, r.Published, r.Kinds)
		}
		t.Logf("fault %v: %d runs, %d re-runs, %.0f ev/s, p99 %v", fault, r.Runs, r.ReRuns, r.Throughput, r.P99)
		keys, err := srv.Client(t).Keys(context.Background(), "*"+strings.TrimPrefix(res.Category, "verify_")+"*").Result()
		if err != nil || len(keys) > 0 {
			t.Errorf("fault %v: keys left behind: %v %v", fault, keys, err)
		}
	}
}

// Faults planted in the handler side are found: an event recorded in another's place
// (out of order, and the other lost), a run recorded as overlapping the one before it.
func TestRunFindsPlantedFaults(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		plant func(a Application) Application
		kind  Kind
	}{
		{"applied out of order", func(a Application) Application {
			if a.Key == "k00003" && a.Seq == 2 {
				a.Seq = 3
			} else if a.Key == "k00003" && a.Seq == 3 {
				a.Seq = 2
			}
			return a
		}, OutOfOrder},
		{"skipped", func(a Application) Application {
			if a.Key == "k00001" && a.Seq == 4 {
				a.Seq = 5
			}
			return a
		}, Lost},
		{"two runs of a key at once", func(a Application) Application {
			if a.Key == "k00002" && a.Seq == 6 {
				a.Start = a.Start.Add(-time.Hour)
			}
			return a
		}, Overlap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fault that leaves an event unapplied (skipped) ends the run at the timeout.
			res := runOn(t, srv, Options{Keys: 5, Events: 8, Instances: 2, Timeout: 3 * time.Second,
				Handler: func(_ context.Context, a Application) (Application, error) { return tc.plant(a), nil }})
			if res.Report.Violations(tc.kind) == 0 {
				t.Errorf("no %s found: %+v", tc.kind, res.Report.Kinds)
			}
		})
	}
}

// The engines keep each of 4 tenants to one run at a time; a handler that records every
// run under one tenant shows runs of that "tenant" at once, as a handler that ignored the
// cap would. The same runs recorded under their own tenants keep the cap.
func TestRunFindsAnIgnoredCap(t *testing.T) {
	srv := redistest.Start(t)
	o := Options{Keys: 20, Events: 10, Instances: 2, Tenants: 4, TenantCap: 1, MaxUnacked: 1}
	o.Handler = func(_ context.Context, a Application) (Application, error) {
		time.Sleep(time.Millisecond)
		a.Limit = "t000"
		return a, nil
	}
	res := runOn(t, srv, o)
	if res.Report.Violations(CapExceeded) == 0 {
		t.Errorf("no %s found: %+v", CapExceeded, res.Report.Kinds)
	}
	apps := res.Apps
	for i := range apps {
		var k int
		fmt.Sscanf(apps[i].Key, "k%d", &k)
		apps[i].Limit = tenantOf(k, 4)
	}
	if r := Check(o.workload(), apps, nil); !r.OK() {
		t.Errorf("the runs with their own tenants: %+v", r.Kinds)
	}
}

// A run recorded twice under one generation (as a handler that ran an event twice would
// record it) is a re-run the promises do not allow.
func TestRunFindsARunTwiceUnderOneGeneration(t *testing.T) {
	srv := redistest.Start(t)
	var once sync.Once
	var twice []Application
	o := Options{Keys: 5, Events: 8, Instances: 1, MaxUnacked: 1}
	o.Handler = func(_ context.Context, a Application) (Application, error) {
		if a.Key == "k00004" && a.Seq == 7 {
			once.Do(func() { twice = append(twice, a) })
		}
		return a, nil
	}
	res := runOn(t, srv, o)
	// The handler side recorded event 7 once; record it again at the end.
	again := twice[0]
	again.Start, again.End = time.Now(), time.Now()
	if r := Check(o.workload(), append(res.Apps, again), nil); r.Violations(ReRun) != 1 {
		t.Errorf("re-runs found: %d, want 1: %+v", r.Violations(ReRun), r.Kinds)
	}
}

// Poison events halt their keys on them, which the check expects; a key that halts on an
// event that is not poison (a handler that fails it every time) is a wrong halt.
func TestRunPoisonHalts(t *testing.T) {
	srv := redistest.Start(t)
	res := runOn(t, srv, Options{Keys: 6, Events: 6, Instances: 2, Poison: 2})
	r := res.Report
	// Keys 0 and 1 halt on event 4 of 6: 3 applied each; the 4 others apply all 6.
	if !r.OK() || r.Applied != 30 || r.Failures != 4 {
		t.Errorf("applied %d (want 30), failures %d (want 2 attempts of 2 poison events); %+v", r.Applied, r.Failures, r.Kinds)
	}

	res = runOn(t, srv, Options{Keys: 6, Events: 6, Instances: 2, Poison: 1, Timeout: 3 * time.Second,
		Handler: func(_ context.Context, a Application) (Application, error) {
			if a.Key == "k00005" && a.Seq == 2 {
				return a, errors.New("planted: fails every time")
			}
			return a, nil
		}})
	r = res.Report
	if v := r.First(WrongHalt); v == nil || v.Key != "k00005" || v.Seqs[0] != 2 {
		t.Errorf("wrong halt: %v; want k00005 on event 2 (%+v)", v, r.Kinds)
	}
	if r.Violations(Lost) != 5 {
		t.Errorf("lost %d, want the 5 events of k00005 from event 2 on", r.Violations(Lost))
	}
}
