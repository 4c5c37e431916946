package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// limitPayload is the payload of the limit tests' events.
type limitPayload struct {
	Client string `json:"client_id"`
	Tenant string `json:"tenant_id"`
	Seq    int    `json:"seq"`
}

// limitDomain declares "OrderPlaced" (client_id, tenant_id, seq) in category "order",
// partitioned by client_id, with the handler "Projector" limited by tenant_id as lim says.
func limitDomain(tb testing.TB, fn HandlerFunc, lim HandlerLimit) *Domain {
	tb.Helper()
	lim.By = "tenant_id"
	d := NewDomain("limits").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "tenant_id", "seq"}}).
		AddHandler(Handler{Name: "Projector", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", MaxRetries: 3, RetryDelay: 10 * time.Millisecond, Limit: lim, Func: fn})
	if err := d.Init(NewRedisBroker(nil)); err != nil {
		tb.Fatal(err)
	}
	return d
}

// runRecorder records the runs of a limited handler in Redis, as a downstream that honours
// the permit's fencing token would: a run starts in its (tenant, slot); a start whose
// generation is below the slot's is refused (a stalled holder's late run), and a start
// at a higher one ends the run the slot held (superseded: its permit expired). The
// largest number of runs of one tenant under way at once is kept in t:lim:max:{tenant}.
var runRecorder = redis.NewScript(`
-- KEYS[1] active runs of the tenant (hash slot -> "gen|run"), KEYS[2] max concurrency,
-- KEYS[3] log of starts, KEYS[4] refusals
-- ARGV[1] start|end, ARGV[2] slot (-1: only the rate is capped, no slot to fence), ARGV[3]
-- gen, ARGV[4] run id
local slot = ARGV[2]
if slot == '-1' then slot = 'run:' .. ARGV[4] end
local cur = redis.call('HGET', KEYS[1], slot)
local curgen = cur and tonumber(string.match(cur, '^(%d+)|')) or 0
if ARGV[1] == 'start' then
  if tonumber(ARGV[3]) < curgen then
    redis.call('INCR', KEYS[4])
    return -1
  end
  redis.call('HSET', KEYS[1], slot, ARGV[3] .. '|' .. ARGV[4])
  local n = redis.call('HLEN', KEYS[1])
  if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
  redis.call('RPUSH', KEYS[3], ARGV[3])
  return n
end
if cur == ARGV[3] .. '|' .. ARGV[4] then redis.call('HDEL', KEYS[1], slot) end
return 0`)

// limitRuns is a handler that records its runs with runRecorder, per tenant, and the
// order of each key's events.
type limitRuns struct {
	rdb  redis.UniversalClient
	work time.Duration
	mu   sync.Mutex
	seqs map[string][]int // key -> seqs in the order they ran
	// hold, when set, blocks the run of this key/seq until release is closed.
	hold    string
	held    chan struct{}
	release chan struct{}
}

func newLimitRuns(rdb redis.UniversalClient, work time.Duration) *limitRuns {
	return &limitRuns{rdb: rdb, work: work, seqs: map[string][]int{}, held: make(chan struct{}), release: make(chan struct{})}
}

func limitKeys(tenant string) []string {
	return []string{"t:lim:active:{" + tenant + "}", "t:lim:max:{" + tenant + "}", "t:lim:starts:{" + tenant + "}", "t:lim:refused:{" + tenant + "}"}
}

func (r *limitRuns) handle(ctx context.Context, ev Event) error {
	var p limitPayload
	if err := json.Unmarshal(ev.Data, &p); err != nil {
		return err
	}
	d, _ := DeliveryFrom(ctx)
	if d.Limit == nil || d.Limit.Value != p.Tenant {
		return fmt.Errorf("run of %s/%d without a permit of its tenant: %+v", p.Client, p.Seq, d.Limit)
	}
	bg := context.Background()
	run := fmt.Sprintf("%s/%d", p.Client, p.Seq)
	n, err := runRecorder.Run(bg, r.rdb, limitKeys(p.Tenant), "start", d.Limit.Slot, d.Limit.Generation, run).Int()
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("a downstream refused the run %s: generation %d is behind its slot", run, d.Limit.Generation)
	}
	r.mu.Lock()
	r.seqs[p.Client] = append(r.seqs[p.Client], p.Seq)
	r.mu.Unlock()
	if run == r.hold {
		close(r.held)
		<-r.release
	}
	time.Sleep(r.work)
	return runRecorder.Run(bg, r.rdb, limitKeys(p.Tenant), "end", d.Limit.Slot, d.Limit.Generation, run).Err()
}

func (r *limitRuns) of(key string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs[key])
}

func (r *limitRuns) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.seqs {
		n += len(s)
	}
	return n
}

// publishLimited publishes event seq of key for tenant.
func publishLimited(tb testing.TB, b *RedisBroker, d *Domain, tenant, key string, seq int) {
	tb.Helper()
	data, _ := json.Marshal(limitPayload{Client: key, Tenant: tenant, Seq: seq})
	if _, err := b.Publish(context.Background(), d, "OrderPlaced", data, PublishOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// maxConcurrent reads the recorder's largest number of runs of a tenant at once.
func maxConcurrent(tb testing.TB, rdb redis.UniversalClient, tenant string) int {
	tb.Helper()
	n, _ := rdb.Get(context.Background(), limitKeys(tenant)[1]).Int()
	return n
}

// Three instances run 30 keys of 3 tenants under limit_concurrency = 2: no tenant ever
// has more than 2 runs at once, though 10 of its keys have events ready on 3 instances;
// every event runs once, in publish order per key. On one node and on a Redis Cluster.
func TestLimitConcurrencyAcrossInstances(t *testing.T) {
	onBoth(t, func(t *testing.T, tg redisTarget) {
		rdb, b := tg.broker(t)
		runs := newLimitRuns(rdb, 15*time.Millisecond)
		d := limitDomain(t, runs.handle, HandlerLimit{Concurrency: 2})
		for _, id := range []string{"i1", "i2", "i3"} {
			startEngineOn(t, tg, d, id, nil)
		}
		tenants := []string{"acme", "bolt", "cove"}
		const keysPer, events = 10, 6
		for seq := range events {
			for _, tn := range tenants {
				for k := range keysPer {
					publishLimited(t, b, d, tn, fmt.Sprintf("%s-%d", tn, k), seq)
				}
			}
		}
		want := len(tenants) * keysPer * events
		testkit.WaitFor(t, 60*time.Second, "every event handled", func() bool { return runs.total() >= want })
		for _, tn := range tenants {
			if m := maxConcurrent(t, rdb, tn); m != 2 {
				t.Errorf("tenant %s had at most %d runs at once, want 2 (the cap, reached with 10 keys ready)", tn, m)
			}
			if n, _ := rdb.Get(context.Background(), limitKeys(tn)[3]).Int(); n != 0 {
				t.Errorf("tenant %s: %d runs refused as stale", tn, n)
			}
			for k := range keysPer {
				key := fmt.Sprintf("%s-%d", tn, k)
				if got := runs.of(key); !slices.Equal(got, seqs(0, events)) {
					t.Errorf("%s ran %v, want %v", key, got, seqs(0, events))
				}
			}
		}
		if runs.total() != want {
			t.Errorf("%d runs, want %d (no event twice)", runs.total(), want)
		}
	})
}

// limit_rate = 20/s: no window of a second holds more than 20 permits of a tenant, by the
// permits' generations (Redis time in microseconds at the grant); the starts spread over
// the seconds the rate asks for.
func TestLimitRateWindow(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 0)
	d := limitDomain(t, runs.handle, HandlerLimit{Rate: 20, Per: time.Second})
	startEngine(t, srv, d, "i1", 2*time.Second)
	startEngine(t, srv, d, "i2", 2*time.Second)
	const keys, events = 8, 8
	for seq := range events {
		for k := range keys {
			publishLimited(t, b, d, "acme", fmt.Sprintf("k%d", k), seq)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "every event handled", func() bool { return runs.total() >= keys*events })
	raw, err := rdb.LRange(context.Background(), limitKeys("acme")[2], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var gens []int64
	for _, s := range raw {
		g, _ := strconv.ParseInt(s, 10, 64)
		gens = append(gens, g)
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] < gens[j] })
	worst := 0
	for i := range gens {
		j := sort.Search(len(gens), func(j int) bool { return gens[j] >= gens[i]+1_000_000 })
		worst = max(worst, j-i)
	}
	if worst > 20 {
		t.Errorf("%d permits in one second, want at most 20", worst)
	}
	if span := time.Duration(gens[len(gens)-1]-gens[0]) * time.Microsecond; span < 2*time.Second {
		t.Errorf("64 starts at 20/s spread over %v, want at least 2.2 s (the first 20 at once, then 20 a second)", span)
	}
	t.Logf("%d starts, at most %d in a second", len(gens), worst)
}

// A holder that crashes with its permit gives it back by the permit's expiry (a lease
// TTL): the tenant's next run, on another instance, waits until then, then goes on.
func TestLimitCrashedHoldersPermitComesBack(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 0)
	runs.hold = "k1/0"
	d := limitDomain(t, runs.handle, HandlerLimit{Concurrency: 1})
	e1 := startEngine(t, srv, d, "i1", 2*time.Second)
	publishLimited(t, b, d, "acme", "k1", 0)
	<-runs.held // i1 holds the tenant's only permit
	startEngine(t, srv, d, "i2", 2*time.Second)
	go func() { time.Sleep(100 * time.Millisecond); close(runs.release) }() // crash waits for the handler
	crash(e1)
	crashed := time.Now()
	publishLimited(t, b, d, "acme", "k2", 0)
	time.Sleep(time.Second)
	if got := runs.of("k2"); len(got) != 0 {
		t.Fatalf("k2 ran %v while the crashed holder's permit lived", got)
	}
	testkit.WaitFor(t, 10*time.Second, "k2 handled once the permit expired", func() bool { return len(runs.of("k2")) == 1 })
	if took := time.Since(crashed); took < 1500*time.Millisecond {
		t.Errorf("k2 ran %v after the crash, before the permit's expiry (2 s)", took)
	}
}

// An operator's override replaces the domain's cap for one value, on running instances;
// clearing it brings the domain's back.
func TestLimitOverride(t *testing.T) {
	srv, rdb, b := startNode(t)
	ctx := context.Background()
	runs := newLimitRuns(rdb, 40*time.Millisecond)
	d := limitDomain(t, runs.handle, HandlerLimit{Concurrency: 1})
	e := startEngine(t, srv, d, "i1", 2*time.Second)
	if _, err := b.SetLimit(ctx, "Projector", "acme", LimitOverride{Concurrency: 4, Reason: "test", By: "t"}); err != nil {
		t.Fatal(err)
	}
	all, err := b.Limits(ctx, "Projector")
	if err != nil || all["acme"].Concurrency != 4 || all["acme"].Since.IsZero() {
		t.Fatalf("Limits = %+v, %v", all, err)
	}
	// The engine learns of the override from its announcement, or, when the announcement
	// came before its subscription was up (a loaded machine), from the read that follows
	// the subscription: either way at once, not at the periodic read.
	testkit.WaitFor(t, 5*time.Second, "the engine to apply the override", func() bool {
		c, _, _ := e.limits.caps(HandlerLimit{Concurrency: 1}, limitID{"Projector", "acme"})
		return c == 4
	})
	for k := range 8 {
		for seq := range 3 {
			publishLimited(t, b, d, "acme", fmt.Sprintf("k%d", k), seq)
			publishLimited(t, b, d, "bolt", fmt.Sprintf("b%d", k), seq)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "every event handled", func() bool { return runs.total() >= 48 })
	if m := maxConcurrent(t, rdb, "acme"); m != 4 {
		t.Errorf("acme (override 4) had at most %d runs at once, want 4", m)
	}
	if m := maxConcurrent(t, rdb, "bolt"); m != 1 {
		t.Errorf("bolt (the domain's 1) had at most %d runs at once, want 1", m)
	}
	if err := b.ClearLimit(ctx, "Projector", "acme"); err != nil {
		t.Fatal(err)
	}
	if err := b.ClearLimit(ctx, "Projector", "acme"); !errors.Is(err, ErrNoOverride) {
		t.Fatalf("a second clear: %v, want ErrNoOverride", err)
	}
	if _, err := b.SetLimit(ctx, "Projector", "a:b", LimitOverride{Concurrency: 1}); err == nil {
		t.Error("an override of an invalid value was stored")
	}
}

// An event whose limit value is missing fails its attempts with that reason and halts its
// partition; the other keys go on.
func TestLimitValueMissingHalts(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 0)
	d := limitDomain(t, runs.handle, HandlerLimit{Concurrency: 2})
	startEngine(t, srv, d, "i1", 2*time.Second)
	if _, err := b.Publish(context.Background(), d, "OrderPlaced", []byte(`{"client_id":"nt","seq":0}`), PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	publishLimited(t, b, d, "acme", "ok", 0)
	var h *HaltRecord
	testkit.WaitFor(t, 10*time.Second, "the partition halted", func() bool {
		h, _ = b.Halt(context.Background(), HeadRef{Group: "Projector", Category: "order", Key: "nt"})
		return h != nil
	})
	if !strings.Contains(h.Error, "limit_by") {
		t.Errorf("halt reason %q does not name limit_by", h.Error)
	}
	testkit.WaitFor(t, 5*time.Second, "the other key handled", func() bool { return len(runs.of("ok")) == 1 })
}

// The registry entry lists the partitions that wait for a permit, for the operator views.
func TestLimitThrottledListed(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 0)
	runs.hold = "k0/0"
	d := limitDomain(t, runs.handle, HandlerLimit{Concurrency: 1})
	e := startEngine(t, srv, d, "i1", time.Second)
	publishLimited(t, b, d, "acme", "k0", 0)
	<-runs.held
	publishLimited(t, b, d, "acme", "k1", 0)
	testkit.WaitFor(t, 5*time.Second, "k1 counted as throttled", func() bool { return e.Stats().Throttled["Projector"] == 1 })
	testkit.WaitFor(t, 5*time.Second, "k1 listed in the registry", func() bool {
		for _, raw := range rdb.HGetAll(context.Background(), keyspace.SingleNode.InstancesKey()).Val() {
			if in, err := keyspace.DecodeInstance(raw); err == nil && in.ThrottledTotal == 1 && len(in.Throttled) == 1 &&
				in.Throttled[0] == (keyspace.ThrottledUnit{Group: "Projector", Unit: "order:k1", Value: "acme"}) {
				return true
			}
		}
		return false
	})
	close(runs.release)
	testkit.WaitFor(t, 5*time.Second, "k1 handled", func() bool { return len(runs.of("k1")) == 1 })
	if e.Stats().ThrottledTime["Projector"] <= 0 {
		t.Error("the wait for the permit was not counted")
	}
}

// A cap far above the runs under way costs a take what the runs under way cost, not what
// the cap is: a limit key of 100,000 permits runs its events like any other.
func TestLimitLargeCap(t *testing.T) {
	srv, rdb, b := startNode(t)
	runs := newLimitRuns(rdb, 0)
	d := limitDomain(t, runs.handle, HandlerLimit{Concurrency: 100_000})
	startEngine(t, srv, d, "i1", 2*time.Second)
	for k := range 10 {
		for seq := range 3 {
			publishLimited(t, b, d, "acme", fmt.Sprintf("k%d", k), seq)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "every event handled", func() bool { return runs.total() == 30 })
}
