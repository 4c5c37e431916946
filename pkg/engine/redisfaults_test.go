package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/faultproxy"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The tests of this file break Redis itself, for real: restarts with and without
// persistence, SCRIPT FLUSH, maxmemory, a frozen link, a lost reply. Each checks that
// the engine comes back by itself with the fence intact.

// maxLeaseGen returns the highest generation among the lease keys of the keys' partitions
// (0 when none is held).
func maxLeaseGen(t *testing.T, rdb redis.UniversalClient, keys []string) int64 {
	t.Helper()
	var g int64
	for _, k := range keys {
		v, err := rdb.Get(context.Background(), keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector")).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		l, _ := keyspace.ParseLease(v)
		g = max(g, l.Generation)
	}
	return g
}

// allOwned reports whether every key's partition is leased by an owner whose session
// lives.
func allOwned(rdb redis.UniversalClient, keys []string) bool {
	ctx := context.Background()
	for _, k := range keys {
		v, err := rdb.Get(ctx, keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector")).Result()
		if err != nil {
			return false
		}
		if rdb.Exists(ctx, keyspace.SingleNode.SessionKey(ownerOf(v))).Val() != 1 {
			return false
		}
	}
	return true
}

// handledAll waits until every key's log holds seqs [0, n) (first occurrences), and
// returns how long that took.
func handledAll(t *testing.T, rdb redis.UniversalClient, keys []string, n int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.WaitFor(t, timeout, fmt.Sprintf("%d keys x %d events handled", len(keys), n), func() bool {
		for _, k := range keys {
			got, _ := dedupFirst(logOf(t, rdb, k))
			if len(got) < n {
				return false
			}
		}
		return true
	})
	return time.Since(start)
}

// checkOrderAndOverlap checks per-key order (first occurrences) and the sink's overlap
// counter.
func checkOrderAndOverlap(t *testing.T, rdb redis.UniversalClient, keys []string, n int) (dups int) {
	t.Helper()
	for _, k := range keys {
		got, d := dedupFirst(logOf(t, rdb, k))
		dups += d
		if len(got) != n || joinInts(got) != joinInts(seqs(0, n)) {
			t.Errorf("key %s: committed order %v, want 0..%d in publish order", k, got, n-1)
		}
	}
	if o := rdb.Get(context.Background(), "t:overlap").Val(); o != "" && o != "0" {
		t.Errorf("%s overlapping starts of one key", o)
	}
	return dups
}

// Redis restarts without persistence (every key lost). Events published
// after the restart are all handled in order within 2 x TTL, and the generations handed
// out after the restart are higher than those before it (a sink that refuses a lower
// generation keeps accepting the new owners).
func TestRedisRestartWithoutPersistence(t *testing.T) {
	skipShort(t)
	srv, rdb, b := startNode(t)
	keys := keysOf(6)
	const ttl = time.Second
	s1 := &sink{rdb: srv.Client(t), instance: "i1", fenced: true}
	s2 := &sink{rdb: srv.Client(t), instance: "i2", fenced: true}
	startEngine(t, srv, testDomain(t, s1.handle, nil), "i1", ttl)
	startEngine(t, srv, testDomain(t, s2.handle, nil), "i2", ttl)
	d := testDomain(t, nil, nil)
	for seq := 0; seq < 5; seq++ {
		for _, k := range keys {
			publish(t, b, d, k, seq, false)
		}
	}
	handledAll(t, rdb, keys, 5, 10*time.Second)
	before := maxLeaseGen(t, rdb, keys)

	srv.Restart() // an empty server: logs, leases, sessions, counters are all gone
	back := time.Now()
	for seq := 0; seq < 5; seq++ {
		for _, k := range keys {
			publish(t, b, d, k, seq, false)
		}
	}
	took := handledAll(t, rdb, keys, 5, 10*time.Second)
	t.Logf("after the restart every event was handled %v after Redis was back (limit %v)", time.Since(back).Round(time.Millisecond), 2*ttl)
	if time.Since(back) > 2*ttl {
		t.Errorf("handling the events published after the restart took %v, want at most %v", took, 2*ttl)
	}
	checkOrderAndOverlap(t, rdb, keys, 5)
	after := maxLeaseGen(t, rdb, keys)
	t.Logf("highest generation before the restart %d, after %d", before, after)
	if after <= before {
		t.Errorf("generation after the data loss %d is not above %d before it", after, before)
	}
}

// SCRIPT FLUSH empties the script cache under a running engine; a key
// published afterwards is still taken and handled within 2 s.
func TestScriptFlushWhileRunning(t *testing.T) { onBoth(t, testScriptFlushWhileRunning) }

// On a Redis Cluster the flush empties every master's script cache (the renewal and
// node-wide acknowledgement scripts included).
func testScriptFlushWhileRunning(t *testing.T, tg redisTarget) {
	rdb, b := tg.broker(t)
	startEngineOn(t, tg, sinkDomain(t, tg.client(t), "i1", nil), "i1", func(c *EngineConfig) { c.Timing = fastTiming(time.Second) })
	d := testDomain(t, nil, nil)
	publish(t, b, d, "before", 0, false)
	handledAll(t, rdb, []string{"before"}, 1, 5*time.Second)

	if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	publish(t, b, d, "after", 0, false)
	publish(t, b, d, "after", 1, false)
	handledAll(t, rdb, []string{"after"}, 2, 5*time.Second)
	took := time.Since(flushed)
	t.Logf("a key published after SCRIPT FLUSH was handled in %v", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("took %v after SCRIPT FLUSH, want at most 2s", took)
	}
}

// Redis reaches maxmemory with noeviction. Publishing fails with an error
// that says so; the engine keeps its session (the renewal needs no memory) and, once
// memory is freed, handles what is published next within 2 x TTL, nothing lost.
func TestOutOfMemoryRecovers(t *testing.T) {
	skipShort(t)
	srv := redistest.StartWith(t, redistest.Options{Args: []string{"--maxmemory-policy", "noeviction"}})
	rdb := srv.Client(t)
	b := NewRedisBroker(rdb)
	keys := keysOf(4)
	const ttl = time.Second
	startEngine(t, srv, sinkDomain(t, srv.Client(t), "i1", nil), "i1", ttl)
	d := testDomain(t, nil, nil)
	for _, k := range keys {
		publish(t, b, d, k, 0, false)
	}
	handledAll(t, rdb, keys, 1, 5*time.Second)
	ctx := context.Background()

	// Full: a limit far under what is used now, so every write that needs memory is
	// refused for as long as it lasts.
	used := usedMemory(t, rdb)
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/4, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"client_id":"client-0","seq":1}`)
	_, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{})
	if !errors.Is(err, ErrRedisOutOfMemory) || !strings.Contains(err.Error(), "maxmemory") {
		t.Fatalf("publish at maxmemory: err = %v, want ErrRedisOutOfMemory naming maxmemory", err)
	}
	t.Logf("publish at maxmemory: %v", err)
	time.Sleep(3 * ttl) // the heartbeat's registry write fails all along

	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for _, k := range keys {
		for seq := 1; seq < 4; seq++ {
			publish(t, b, d, k, seq, false)
		}
	}
	handledAll(t, rdb, keys, 4, 10*time.Second)
	took := time.Since(freed)
	t.Logf("after memory was freed the new events were handled in %v (limit %v)", took.Round(time.Millisecond), 2*ttl)
	if took > 2*ttl {
		t.Errorf("took %v after memory was freed, want at most %v", took, 2*ttl)
	}
	checkOrderAndOverlap(t, rdb, keys, 4)
}

func usedMemory(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	info := rdb.Info(context.Background(), "memory").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}

// A TCP proxy freezes one owner's link to Redis (TTL 2 s). Its running
// handler's context is cancelled before the other instance starts that key: zero
// overlap, in 5 runs.
func TestFrozenLinkCancelsHandlerBeforeTakeover(t *testing.T) {
	skipShort(t)
	for run := 1; run <= 5; run++ {
		t.Run(strconv.Itoa(run), func(t *testing.T) { frozenLinkRun(t) })
	}
}

func frozenLinkRun(t *testing.T) {
	srv, _, b := startNode(t)
	const ttl = 2 * time.Second
	proxy := faultproxy.Start(t, srv.Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = viaProxy.Close() })

	var mu sync.Mutex
	var cancelledA time.Time // when A's running handler saw its context end
	var startedB time.Time   // when B first started the key
	started := make(chan struct{})
	var once sync.Once
	hA := func(ctx context.Context, ev Event) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		mu.Lock()
		cancelledA = time.Now()
		mu.Unlock()
		return ctx.Err()
	}
	hB := func(ctx context.Context, ev Event) error {
		mu.Lock()
		if startedB.IsZero() {
			startedB = time.Now()
		}
		mu.Unlock()
		return nil
	}
	startEngineWith(t, srv, testDomain(t, hA, nil), "a", func(c *EngineConfig) {
		c.Client, c.Timing = viaProxy, fastTiming(ttl)
	})
	d := testDomain(t, nil, nil)
	publish(t, b, d, "K", 0, false)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("a never started the event")
	}
	startEngine(t, srv, testDomain(t, hB, nil), "b", ttl)
	proxy.Freeze()
	frozen := time.Now()
	defer proxy.Thaw()
	testkit.WaitFor(t, 5*ttl, "b starts the key", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !startedB.IsZero()
	})
	mu.Lock()
	defer mu.Unlock()
	if cancelledA.IsZero() || !cancelledA.Before(startedB) {
		t.Fatalf("overlap: a's handler cancelled at %v, b started the key at %v (after the freeze)", sinceOrNever(cancelledA, frozen), startedB.Sub(frozen))
	}
	t.Logf("a's handler cancelled %v after the freeze, b started the key %v after it (gap %v)",
		cancelledA.Sub(frozen).Round(time.Millisecond), startedB.Sub(frozen).Round(time.Millisecond), startedB.Sub(cancelledA).Round(time.Millisecond))
}

func sinceOrNever(t, from time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(from).String()
}

// Two processes started with the same instance id each get their own owner
// name and fence: zero overlap, and their leases carry different owners.
func TestSameInstanceIDTwoProcesses(t *testing.T) {
	skipShort(t)
	srv, rdb, b := startNode(t)
	keys := keysOf(8)
	const perKey = 40
	d := testDomain(t, nil, nil)
	p1 := startProc(t, srv.URL, "same", time.Second, 2*time.Millisecond)
	p2 := startProc(t, srv.URL, "same", time.Second, 2*time.Millisecond)
	done := backgroundPublish(t, b, d, keys, perKey, 5*time.Millisecond)
	owners := map[string]bool{}
	testkit.WaitFor(t, 20*time.Second, "both processes own partitions", func() bool {
		for _, k := range keys {
			if v := rdb.Get(context.Background(), keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector")).Val(); v != "" {
				owners[ownerOf(v)] = true
			}
		}
		return len(owners) >= 2
	})
	done()
	dups := checkLogs(t, srv, keys, perKey)
	if o := rdb.Get(context.Background(), "t:overlap").Val(); o != "" && o != "0" {
		t.Errorf("%s overlapping starts of one key", o)
	}
	names := make([]string, 0, len(owners))
	for o := range owners {
		names = append(names, o)
		if !strings.HasPrefix(o, "same.") {
			t.Errorf("owner %q does not start with the instance id", o)
		}
	}
	t.Logf("owners seen: %v; re-runs %d", names, dups)
	both := p1.stderr.String() + p2.stderr.String()
	if !strings.Contains(both, "another live process uses this instance id") {
		t.Error("neither process logged that another live process uses its instance id")
	}
}

// The heartbeat and discovery notice the loss of the session at the same
// time. Exactly one new session opens, and no worker of the old one starts an event once
// the loss was noticed.
func TestDoubleLossOpensOneSession(t *testing.T) {
	srv, rdb, b := startNode(t)
	keys := keysOf(4)
	var mu sync.Mutex
	var lateOld []string
	var oldGens map[int64]bool
	var noticed bool
	h := func(ctx context.Context, ev Event) error {
		dl, _ := DeliveryFrom(ctx)
		mu.Lock()
		if noticed && oldGens[dl.Generation] && ctx.Err() == nil {
			lateOld = append(lateOld, fmt.Sprintf("%s@%d", ev.Key, dl.Generation))
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		return nil
	}
	e := startEngine(t, srv, testDomain(t, h, nil), "i1", time.Second)
	d := testDomain(t, nil, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seq := 0; seq < 300; seq++ {
			for _, k := range keys {
				data := []byte(fmt.Sprintf(`{"client_id":%q,"seq":%d}`, k, seq))
				if _, err := b.Publish(context.Background(), d, "OrderPlaced", data, PublishOptions{}); err != nil {
					return
				}
			}
		}
	}()
	testkit.WaitFor(t, 5*time.Second, "every key owned", func() bool { return len(e.Owned()) == len(keys) })
	in := e.sess.live()
	mu.Lock()
	oldGens = map[int64]bool{}
	for _, o := range e.Owned() {
		oldGens[o.Generation] = true
	}
	mu.Unlock()
	if err := rdb.Del(context.Background(), keyspace.SingleNode.SessionKey(in.owner)).Err(); err != nil {
		t.Fatal(err)
	}
	// Both notice at once: the heartbeat's renewal and discovery's acquire.
	var wg sync.WaitGroup
	for _, reason := range []string{"heartbeat", "discovery"} {
		wg.Add(1)
		go func() { defer wg.Done(); e.sess.lose(in, reason) }()
	}
	wg.Wait()
	mu.Lock()
	noticed = true
	mu.Unlock()
	e.kickDiscovery()
	testkit.WaitFor(t, 5*time.Second, "a new session owns every key", func() bool {
		n := e.sess.live()
		return n != nil && n != in && len(e.Owned()) == len(keys)
	})
	<-done
	time.Sleep(300 * time.Millisecond)
	sessions := rdb.Keys(context.Background(), keyspace.SingleNode.SessionKey("i1.*")).Val()
	if len(sessions) != 1 {
		t.Errorf("session keys of i1: %v, want exactly one", sessions)
	}
	live := e.sess.live()
	e.mu.Lock()
	for _, w := range e.workers {
		if w.inc != live {
			t.Errorf("worker of %s belongs to incarnation %s, not the live one %s", w.u.name, w.inc.owner, live.owner)
		}
	}
	e.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if len(lateOld) > 0 {
		t.Errorf("workers of the lost session started events after the loss was noticed: %v", lateOld)
	}
}

// lostReplySetup returns a client straight to a fresh Redis, a proxy in front of it, and
// a broker whose client goes through the proxy and retries (the scripts loaded), with
// the test domain.
func lostReplySetup(t *testing.T) (redis.UniversalClient, *faultproxy.Proxy, *RedisBroker, *Domain) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: 3})
	t.Cleanup(func() { _ = viaProxy.Close() })
	if err := loadScripts(context.Background(), viaProxy); err != nil {
		t.Fatal(err)
	}
	return srv.Client(t), proxy, NewRedisBroker(viaProxy), testDomain(t, nil, nil)
}

// A proxy drops the reply of a publish (after Redis ran it) and closes the
// connection; go-redis sends the script again. Each event id is appended exactly once,
// and the retried call reports the entry it appended the first time.
func TestPublishRetriedAfterLostReplyAppendsOnce(t *testing.T) {
	rdb, proxy, b, d := lostReplySetup(t)
	ctx := context.Background()
	const n = 10
	ids := map[string]string{}
	for seq := 0; seq < n; seq++ {
		proxy.DropReplyAfter([]byte(scripts.Hash("publish.lua")), 1)
		data := []byte(fmt.Sprintf(`{"client_id":"K","seq":%d}`, seq))
		p, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{})
		if err != nil {
			t.Fatalf("publish %d: %v", seq, err)
		}
		ids[p.EventID] = p.EntryID
	}
	if got := proxy.Dropped(); got != n {
		t.Fatalf("the proxy dropped %d replies, want %d", got, n)
	}
	entries := rdb.XRange(ctx, keyspace.SingleNode.PartitionStream("order", "K"), "-", "+").Val()
	count := map[string]int{}
	for _, m := range entries {
		id, _ := m.Values[keyspace.FieldID].(string)
		count[id]++
		if want := ids[id]; want != m.ID {
			t.Errorf("event %s: publish reported entry %s, the stream has it at %s", id, want, m.ID)
		}
	}
	for id := range ids {
		if count[id] != 1 {
			t.Errorf("event %s appended %d times, want 1", id, count[id])
		}
	}
	if len(entries) != n {
		t.Errorf("%d entries for %d events", len(entries), n)
	}
}

// /readyz's source: while Redis is down the engine says it is not ready and why; once
// Redis is back it is ready again by itself.
func TestHealthFollowsRedis(t *testing.T) {
	skipShort(t)
	srv := redistest.Start(t)
	const ttl = time.Second
	e := startEngine(t, srv, testDomain(t, func(context.Context, Event) error { return nil }, nil), "i1", ttl)
	testkit.WaitFor(t, 5*time.Second, "ready", func() bool { ok, _ := e.Health(); return ok })
	srv.Stop()
	var reason string
	testkit.WaitFor(t, 3*ttl, "not ready while Redis is down", func() bool {
		var ok bool
		ok, reason = e.Health()
		return !ok
	})
	t.Logf("while Redis is down: %s", reason)
	if !strings.Contains(reason, "heartbeat") && !strings.Contains(reason, "session") {
		t.Errorf("reason %q names neither the heartbeat nor the session", reason)
	}
	srv.StartAgain()
	back := time.Now()
	testkit.WaitFor(t, 2*ttl, "ready again after Redis is back", func() bool { ok, _ := e.Health(); return ok })
	t.Logf("ready %v after Redis was back", time.Since(back).Round(time.Millisecond))
}

// countingHandler counts log records by level and message.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int // "LEVEL message" -> records
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Level.String()+" "+r.Message]++
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// During an outage every cause is logged once per interval, not once per partition or
// per attempt: 12 owned partitions and 3 s without Redis (TTL 1 s) give a few lines.
func TestOutageLogsOncePerCause(t *testing.T) {
	skipShort(t)
	srv := redistest.StartWith(t, redistest.Options{AOF: true})
	b := NewRedisBroker(srv.Client(t))
	logs := &countingHandler{counts: map[string]int{}}
	keys := keysOf(12)
	e := startEngineWith(t, srv, testDomain(t, func(context.Context, Event) error { return nil }, nil), "i1", func(c *EngineConfig) {
		c.Timing, c.Logger = fastTiming(time.Second), slog.New(logs)
	})
	d := testDomain(t, nil, nil)
	for _, k := range keys {
		publish(t, b, d, k, 0, false)
	}
	testkit.WaitFor(t, 5*time.Second, "every key owned", func() bool { return len(e.Owned()) == len(keys) })
	logs.mu.Lock()
	clear(logs.counts)
	logs.mu.Unlock()
	srv.Stop()
	time.Sleep(3 * time.Second)
	srv.StartAgain()
	testkit.WaitFor(t, 5*time.Second, "every key owned again", func() bool { return len(e.Owned()) == len(keys) && allOwned(srv.Client(t), keys) })
	logs.mu.Lock()
	defer logs.mu.Unlock()
	warn := 0
	var lines []string
	for m, n := range logs.counts {
		if strings.HasPrefix(m, "WARN") || strings.HasPrefix(m, "ERROR") {
			warn += n
			lines = append(lines, fmt.Sprintf("%dx %s", n, m))
		}
	}
	sort.Strings(lines)
	t.Logf("%d warning lines during a 3 s outage with %d partitions:\n%s", warn, len(keys), strings.Join(lines, "\n"))
	for m, n := range logs.counts {
		if strings.HasPrefix(m, "WARN") && n > 2 {
			t.Errorf("%q logged %d times in one outage, want once per cause per interval", m, n)
		}
	}
}

// The same for PublishMany on one node: a proxy drops the reply of a publishbatch.lua
// call (after Redis ran it) in each batch of 150 events (two calls: 100 and 50); the
// client sends the pipeline again. Each event is appended exactly once, in the batch's
// order per key, and the batch reports the entries appended the first time.
func TestPublishManyRetriedAfterLostReplyAppendsOnce(t *testing.T) {
	rdb, proxy, b, d := lostReplySetup(t)
	ctx := context.Background()
	const rounds, perRound, keys = 3, 150, 3
	ids := map[string]string{}
	for r := range rounds {
		proxy.DropReplyAfter([]byte(scripts.Hash("publishbatch.lua")), 1)
		batch := make([]BatchEvent, 0, perRound)
		for i := range perRound {
			seq := r*perRound + i
			batch = append(batch, BatchEvent{Type: "OrderPlaced", ID: fmt.Sprintf("ev-%d", seq),
				Data: []byte(fmt.Sprintf(`{"client_id":"K%d","seq":%d}`, seq%keys, seq))})
		}
		pubs, err := b.PublishMany(ctx, d, batch, BatchOptions{})
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		for _, p := range pubs {
			ids[p.EventID] = p.EntryID
		}
	}
	if got := proxy.Dropped(); got != rounds {
		t.Fatalf("the proxy dropped %d replies, want %d", got, rounds)
	}
	count := map[string]int{}
	for k := range keys {
		last := -1
		for _, m := range rdb.XRange(ctx, keyspace.SingleNode.PartitionStream("order", fmt.Sprintf("K%d", k)), "-", "+").Val() {
			id, _ := m.Values[keyspace.FieldID].(string)
			count[id]++
			if want := ids[id]; want != m.ID {
				t.Errorf("event %s: PublishMany reported entry %s, the stream has it at %s", id, want, m.ID)
			}
			var seq int
			fmt.Sscanf(id, "ev-%d", &seq)
			if seq <= last {
				t.Errorf("K%d: event %d after event %d", k, seq, last)
			}
			last = seq
		}
	}
	for id := range ids {
		if count[id] != 1 {
			t.Errorf("event %s appended %d times, want 1", id, count[id])
		}
	}
	if len(ids) != rounds*perRound {
		t.Errorf("%d events reported, want %d", len(ids), rounds*perRound)
	}
}

// An instance whose own client cannot reach Redis any more while its session's client
// still can (its connections closed and new ones refused: Redis at maxclients, a proxy
// that broke one pool) gives its partitions up after a lease TTL instead of renewing
// leases it cannot work: another instance handles their events, in order, and the
// instance reports why it is not ready until its client reaches Redis again.
func TestOwnCallsFailingGiveLeasesUp(t *testing.T) {
	skipShort(t)
	srv, rdb, b := startNode(t)
	const ttl = time.Second
	var refuse atomic.Bool
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refuse.Load() {
			return nil, errors.New("test: connection refused")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	mainA := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: "t-a", Dialer: dial, MaxRetries: -1})
	t.Cleanup(func() { _ = mainA.Close() })
	keys := keysOf(8)
	a := startEngineWith(t, srv, sinkDomain(t, rdb, "a", nil), "a", func(c *EngineConfig) {
		c.Client, c.Timing = mainA, fastTiming(ttl)
	})
	d := testDomain(t, nil, nil)
	for _, k := range keys {
		publish(t, b, d, k, 0, false)
	}
	testkit.WaitFor(t, 10*time.Second, "a handles the first events", func() bool {
		for _, k := range keys {
			if len(logOf(t, rdb, k)) < 1 {
				return false
			}
		}
		return true
	})
	startEngine(t, srv, sinkDomain(t, rdb, "b", nil), "b", ttl)

	// The session's client has the connections of its renewals by now (its pipelines
	// have a pool of their own): it needs no new one.
	testkit.WaitFor(t, 5*time.Second, "a's session renewed", func() bool {
		return connsNamed(t, rdb, SessionConnName("t-a")) >= 2
	})
	refuse.Store(true)
	killed := killConnsNamed(t, rdb, "t-a")
	broke := time.Now()
	if killed == 0 {
		t.Fatal("no connection of a's own client was found to close")
	}
	for _, k := range keys {
		publish(t, b, d, k, 1, false)
	}
	testkit.WaitFor(t, 10*ttl, "every key's second event handled", func() bool {
		for _, k := range keys {
			if len(logOf(t, rdb, k)) < 2 {
				return false
			}
		}
		return true
	})
	t.Logf("%d connections closed; every key handled again %v later", killed, time.Since(broke).Round(time.Millisecond))
	for _, k := range keys {
		if got, _ := dedupFirst(logOf(t, rdb, k)); joinInts(got) != joinInts(seqs(0, 2)) {
			t.Errorf("key %s: log %v, want 0 1", k, got)
		}
	}
	var reason string
	testkit.WaitFor(t, 5*ttl, "a not ready, saying why", func() bool {
		var ok bool
		ok, reason = a.Health()
		return !ok && strings.Contains(reason, "the engine's own calls to Redis have failed") &&
			strings.Contains(reason, "the engine's own calls to Redis fail:")
	})
	t.Logf("a's health while its client fails: %s", reason)
	refuse.Store(false)
	testkit.WaitFor(t, 5*ttl, "a ready again once its client reaches Redis", a.Ready)
}

// connsNamed counts the connections with that name.
func connsNamed(t *testing.T, rdb redis.UniversalClient, name string) int {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(list, " name="+name+" ")
}

// killConnsNamed closes, on the server side, every connection with that name, and returns
// how many.
func killConnsNamed(t *testing.T, rdb redis.UniversalClient, name string) int {
	t.Helper()
	ctx := context.Background()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		fields := strings.Fields(line)
		if !slices.Contains(fields, "name="+name) {
			continue
		}
		for _, f := range fields {
			if id, ok := strings.CutPrefix(f, "id="); ok && rdb.Do(ctx, "CLIENT", "KILL", "ID", id).Err() == nil {
				n++
			}
		}
	}
	return n
}
