package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/deliver"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// limitSink is the HTTP handler of the limit tests: a downstream that honours the permit's
// fencing token per (tenant, slot), as docs/concepts.md asks of one. A run starts in its
// slot; a start whose permit generation is below the slot's is refused (409: a holder
// whose permit expired while it stalled), and a start at a higher one supersedes the run
// the slot held. It keeps, per tenant, the largest number of runs under way at once, and
// the order in which each key's events completed.
type limitSink struct {
	latency time.Duration
	mu      sync.Mutex
	slots   map[string]map[string]slotRun // tenant -> slot -> the run it holds
	maxRuns map[string]int                // tenant -> most runs under way at once
	refused int
	done    map[string][]int // key -> seqs in the order they completed
	order   []string         // the key of each completed run, in the order they completed
	starts  map[string][]limitStart
	// overlap is, per tenant, the most requests in the handler at once, superseded runs
	// included (a stalled holder's late request): what a downstream without the fence
	// would have seen.
	inHandler  map[string]int
	maxOverlap map[string]int
}

type slotRun struct {
	gen int64
	run string
}

// limitStart is one run's start: its permit's generation (the Redis time of the grant,
// in microseconds) and when the sink received it (the same clock).
type limitStart struct{ gen, received int64 }

func newLimitSink(latency time.Duration) *limitSink {
	return &limitSink{latency: latency, slots: map[string]map[string]slotRun{}, maxRuns: map[string]int{},
		done: map[string][]int{}, starts: map[string][]limitStart{}, inHandler: map[string]int{}, maxOverlap: map[string]int{}}
}

func (s *limitSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	received := time.Now().UnixMicro()
	body, _ := io.ReadAll(r.Body)
	var env struct {
		Key  string `json:"key"`
		Data struct {
			Tenant string `json:"tenant"`
			Seq    int    `json:"seq"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tenant, slot := r.Header.Get(deliver.HeaderLimitKey), r.Header.Get(deliver.HeaderLimitSlot)
	gen, err := strconv.ParseInt(r.Header.Get(deliver.HeaderLimitGeneration), 10, 64)
	if err != nil || tenant != env.Data.Tenant {
		http.Error(w, fmt.Sprintf("a run without the permit of its tenant %q: %q %q", env.Data.Tenant, tenant, slot), http.StatusBadRequest)
		return
	}
	run := fmt.Sprintf("%s/%d@%d", env.Key, env.Data.Seq, gen)
	s.mu.Lock()
	if s.slots[tenant] == nil {
		s.slots[tenant] = map[string]slotRun{}
	}
	if cur, ok := s.slots[tenant][slot]; ok && gen < cur.gen {
		s.refused++
		s.mu.Unlock()
		http.Error(w, "stale permit", http.StatusConflict)
		return
	}
	s.slots[tenant][slot] = slotRun{gen, run}
	s.maxRuns[tenant] = max(s.maxRuns[tenant], len(s.slots[tenant]))
	s.starts[tenant] = append(s.starts[tenant], limitStart{gen, received})
	s.inHandler[tenant]++
	s.maxOverlap[tenant] = max(s.maxOverlap[tenant], s.inHandler[tenant])
	s.mu.Unlock()
	time.Sleep(s.latency)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inHandler[tenant]--
	if cur := s.slots[tenant][slot]; cur.run != run {
		http.Error(w, "superseded: the permit expired", http.StatusConflict)
		return
	}
	delete(s.slots[tenant], slot)
	s.done[env.Key] = append(s.done[env.Key], env.Data.Seq)
	s.order = append(s.order, env.Key)
}

func (s *limitSink) snapshot() (done map[string][]int, maxRuns, maxOverlap map[string]int, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	done = map[string][]int{}
	for k, v := range s.done {
		done[k] = append([]int(nil), v...)
	}
	maxRuns, maxOverlap = map[string]int{}, map[string]int{}
	for k, v := range s.maxRuns {
		maxRuns[k] = v
	}
	for k, v := range s.maxOverlap {
		maxOverlap[k] = v
	}
	return done, maxRuns, maxOverlap, s.refused
}

// publishTenants publishes, seq-major, events from..to of each key, the key's tenant
// being tenants[i % len(tenants)].
func (f *fixture) publishTenants(keys, tenants []string, from, to int) {
	f.t.Helper()
	var b strings.Builder
	for seq := from; seq <= to; seq++ {
		for i, k := range keys {
			fmt.Fprintf(&b, `{"key":%q,"tenant":%q,"seq":%d}`+"\n", k, tenants[i%len(tenants)], seq)
		}
	}
	file := filepath.Join(f.dir, fmt.Sprintf("tenants-%d.jsonl", time.Now().UnixNano()))
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if out, code, _ := seqctlCmdWithin(f.t, time.Minute, nil, "publish", "--config", f.config, "--redis-url", f.url, "--event", "Step", "--data", "@"+file); code != 0 {
		f.t.Fatalf("seqctl publish: exit %d\n%s", code, out)
	}
}

// Three 'seqctl run' instances, 300 keys of 3 tenants, limit_concurrency = 2, while one
// instance is killed (SIGKILL) and started again, another is stopped (SIGSTOP) past the
// lease TTL and continued, and Redis (append-only file) is restarted: the downstream,
// fencing on the permit, never has more than 2 runs of a tenant under way; every event
// completes, once, in publish order per key.
func TestLimitConcurrencyUnderFaults(t *testing.T) {
	sink := newLimitSink(20 * time.Millisecond)
	hs := httptest.NewServer(sink)
	defer hs.Close()
	f := newFixtureWith(t, "limit.domain.toml", map[string]string{"URL": hs.URL, "LIMITS": "limit_concurrency = 2"}, redistest.Options{AOF: true})
	tenants := []string{"acme", "bolt", "cove"}
	keys := keyNames("k", 300)
	const events = 4
	a, b, c := f.runThree()
	f.publishTenants(keys, tenants, 1, events)
	completed := func() int {
		done, _, _, _ := sink.snapshot()
		n := 0
		for _, v := range done {
			n += len(v)
		}
		return n
	}
	total := len(keys) * events
	testkit.WaitFor(t, 20*time.Second, "a tenth delivered", func() bool { return completed() >= total/10 })
	a.signal(syscall.SIGKILL)
	<-a.done
	t.Logf("a killed after %d of %d", completed(), total)
	a = f.run("a2", []string{"SEQTEST_INSTANCE=a2"})
	testkit.WaitFor(t, 20*time.Second, "a third delivered", func() bool { return completed() >= total/3 })
	b.signal(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond) // past the lease TTL (1 s)
	b.signal(syscall.SIGCONT)
	t.Logf("b stopped and continued at %d of %d", completed(), total)
	testkit.WaitFor(t, 30*time.Second, "half delivered", func() bool { return completed() >= total/2 })
	f.srv.Stop()
	time.Sleep(1500 * time.Millisecond)
	f.srv.StartAgain()
	t.Logf("Redis restarted at %d of %d", completed(), total)
	testkit.WaitFor(t, 90*time.Second, "every event delivered", func() bool {
		done, _, _, _ := sink.snapshot()
		return complete(done, keys, events)
	})
	done, maxRuns, maxOverlap, refused := sink.snapshot()
	checkOrder(t, done, keys, events)
	for _, tn := range tenants {
		if maxRuns[tn] > 2 {
			t.Errorf("tenant %s: %d runs under way at once at the fenced downstream, want at most 2", tn, maxRuns[tn])
		}
		if maxRuns[tn] < 2 {
			t.Errorf("tenant %s: at most %d run at once; the cap of 2 was never reached", tn, maxRuns[tn])
		}
	}
	t.Logf("most runs at once per tenant: fenced %v, requests in the handler (a stalled holder's late ones included) %v; %d late runs refused by the fence; %d completions for %d events",
		maxRuns, maxOverlap, refused, completed(), total)
	for _, p := range []*proc{a, b, c} {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
}

// limit_rate = 20/s over three instances: no window of a second holds more than 20
// permits of the tenant (by the permits' generations, the Redis time of each grant in
// microseconds), and none holds more than 20 starts as the handler received them either,
// in windows shortened by the delay between a grant and the handler's start, measured and
// logged.
func TestLimitRateAcrossInstances(t *testing.T) {
	sink := newLimitSink(0)
	hs := httptest.NewServer(sink)
	defer hs.Close()
	f := newFixture(t, "limit.domain.toml", map[string]string{"URL": hs.URL, "LIMITS": `limit_rate = "20/s"`})
	keys := keyNames("r", 10)
	a, b, c := f.runThree()
	const events = 10
	f.publishTenants(keys, []string{"acme"}, 1, events)
	testkit.WaitFor(t, 30*time.Second, "every event delivered", func() bool {
		done, _, _, _ := sink.snapshot()
		return complete(done, keys, events)
	})
	sink.mu.Lock()
	starts := append([]limitStart(nil), sink.starts["acme"]...)
	sink.mu.Unlock()
	var jitter int64
	gens, recv := make([]int64, len(starts)), make([]int64, len(starts))
	for i, s := range starts {
		gens[i], recv[i] = s.gen, s.received
		jitter = max(jitter, s.received-s.gen)
	}
	byGrant, byStart := mostInWindow(gens, 1_000_000), mostInWindow(recv, 1_000_000-jitter)
	t.Logf("%d starts; at most %d permits in a second; the handler received them at most %v after the grant; at most %d starts in a window of 1 s less that",
		len(starts), byGrant, time.Duration(jitter)*time.Microsecond, byStart)
	if byGrant > 20 {
		t.Errorf("%d permits in one second, want at most 20", byGrant)
	}
	if byStart > 20 {
		t.Errorf("%d starts in a window of 1 s less the grant-to-start delay, want at most 20", byStart)
	}
	for _, p := range []*proc{a, b, c} {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
}

// mostInWindow returns the most of ts (microseconds) that fall in one window of w.
func mostInWindow(ts []int64, w int64) int {
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	most := 0
	for i := range ts {
		j := sort.Search(len(ts), func(j int) bool { return ts[j] >= ts[i]+w })
		most = max(most, j-i)
	}
	return most
}

// Three 'seqctl run' instances, limit_concurrency = 1, a handler that runs 1.6 s (past
// the permit's TTL of 1 s) while Redis forgets its scripts again and again (SCRIPT FLUSH,
// as after a failover): the downstream never has two runs of the tenant in its handler at
// once, fenced or not.
func TestLimitCapHoldsWhileRedisForgetsItsScripts(t *testing.T) {
	sink, f, keys := oneTenantOnThree(t, 1600*time.Millisecond, "f", 4)
	a, b, c := f.runThree()
	f.publishTenants(keys, []string{"acme"}, 1, 1)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := f.rdb.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	testkit.WaitFor(t, 30*time.Second, "every event delivered", func() bool {
		done, _, _, _ := sink.snapshot()
		return complete(done, keys, 1)
	})
	_, maxRuns, maxOverlap, refused := sink.snapshot()
	t.Logf("most runs at once: fenced %v, in the handler %v; %d refused by the fence", maxRuns, maxOverlap, refused)
	if maxOverlap["acme"] > 1 || maxRuns["acme"] > 1 {
		t.Errorf("the tenant had %d runs in the handler at once (%d fenced), want at most 1: its cap", maxOverlap["acme"], maxRuns["acme"])
	}
	for _, p := range []*proc{a, b, c} {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
}

// A tenant's partitions spread over three 'seqctl run' instances under
// limit_concurrency = 1, each instance with a backlog of the tenant: every instance's
// share of the tenant's runs is within 2x of the others'.
func TestLimitSharedAcrossThreeInstances(t *testing.T) {
	sink, f, keys := oneTenantOnThree(t, 5*time.Millisecond, "s", 30)
	a, b, c := f.runThree()
	f.publishTenants(keys, []string{"acme"}, 1, 1)
	testkit.WaitFor(t, 30*time.Second, "the first event of every key delivered", func() bool {
		done, _, _, _ := sink.snapshot()
		return complete(done, keys, 1)
	})
	owners := f.leaseOwners(f.streamsOf(keys))
	per := map[string]int{}
	for _, o := range owners {
		per[o]++
	}
	if len(per) < 3 {
		t.Fatalf("the partitions went to %v: fewer than three instances own some", per)
	}
	sink.mu.Lock()
	from := len(sink.order)
	sink.mu.Unlock()
	const events = 8
	f.publishTenants(keys, []string{"acme"}, 2, events)
	fewest := len(keys)
	for _, n := range per {
		fewest = min(fewest, n)
	}
	window := 3 * fewest * (events - 1) / 2 // while every instance still has a backlog
	testkit.WaitFor(t, 60*time.Second, "a window of runs", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.order)-from >= window
	})
	share := map[string]int{}
	sink.mu.Lock()
	for _, k := range sink.order[from : from+window] {
		share[owners[keyspace.For(f.rdb).PartitionStream("step", k)]]++
	}
	sink.mu.Unlock()
	lo, hi := window, 0
	for o := range per {
		lo, hi = min(lo, share[o]), max(hi, share[o])
	}
	t.Logf("partitions per instance %v; runs per instance in the first %d of the backlog %v", per, window, share)
	if hi > 2*lo {
		t.Errorf("runs per instance %v: not within 2x of each other", share)
	}
	testkit.WaitFor(t, 60*time.Second, "every event delivered", func() bool {
		done, _, _, _ := sink.snapshot()
		return complete(done, keys, events)
	})
	if after := f.leaseOwners(f.streamsOf(keys)); fmt.Sprint(after) != fmt.Sprint(owners) {
		t.Logf("owners changed during the run: %v -> %v", owners, after)
	}
	done, maxRuns, _, _ := sink.snapshot()
	checkOrder(t, done, keys, events)
	if maxRuns["acme"] > 1 {
		t.Errorf("%d runs of the tenant at once, want 1", maxRuns["acme"])
	}
	for _, p := range []*proc{a, b, c} {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
}

// runThree starts 'seqctl run' as the instances a, b and c, and waits until all three
// are ready.
func (f *fixture) runThree() (a, b, c *proc) {
	f.t.Helper()
	a, b = f.runTwo(nil)
	c = f.run("c", []string{"SEQTEST_INSTANCE=c"})
	c.waitReady(10 * time.Second)
	return a, b, c
}

// oneTenantOnThree starts a limit sink with the handler latency given and a fixture whose
// handler has limit_concurrency = 1, and names n keys with prefix.
func oneTenantOnThree(t *testing.T, latency time.Duration, prefix string, n int) (*limitSink, *fixture, []string) {
	t.Helper()
	sink := newLimitSink(latency)
	hs := httptest.NewServer(sink)
	t.Cleanup(hs.Close)
	f := newFixture(t, "limit.domain.toml", map[string]string{"URL": hs.URL, "LIMITS": "limit_concurrency = 1"})
	return sink, f, keyNames(prefix, n)
}
