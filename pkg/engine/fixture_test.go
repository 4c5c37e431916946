package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	testkit.VerifyNoLeaks(m,
		// go-redis probes a refused address once a second after PoolSize failed dials
		// and notices its client closed only after the probe's sleep: a client closed
		// right after a Redis fault test leaves it for up to a second.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}

// testPayload is the payload of the test events.
type testPayload struct {
	Client string `json:"client_id"`
	Seq    int    `json:"seq"`
	Poison bool   `json:"poison,omitempty"`
}

// testDomain declares "OrderPlaced" in category "order", partitioned by client_id, with
// one handler "Projector" running fn.
func testDomain(tb testing.TB, fn HandlerFunc, mod func(*Domain)) *Domain {
	tb.Helper()
	d := NewDomain("test").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "seq", "poison"}}).
		AddHandler(Handler{Name: "Projector", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", MaxRetries: 3, RetryDelay: 10 * time.Millisecond, Func: fn})
	if mod != nil {
		mod(d)
	}
	if err := d.Init(NewRedisBroker(nil)); err != nil {
		tb.Fatal(err)
	}
	return d
}

// fastTiming is lease timing for tests: quick failover.
func fastTiming(ttl time.Duration) LeaseTiming {
	return LeaseTiming{LeaseTTL: ttl, HeartbeatInterval: ttl / 5, PollInterval: 50 * time.Millisecond}
}

func startEngine(tb testing.TB, srv *redistest.Server, d *Domain, id string, ttl time.Duration) *Engine {
	tb.Helper()
	return startEngineWith(tb, srv, d, id, func(c *EngineConfig) { c.Timing = fastTiming(ttl) })
}

// startEngineWith starts an engine with test defaults changed by mod.
func startEngineWith(tb testing.TB, srv *redistest.Server, d *Domain, id string, mod func(*EngineConfig)) *Engine {
	tb.Helper()
	return startEngineOn(tb, redisTarget{srv: srv}, d, id, mod)
}

// redisTarget is the Redis deployment a test runs against: one node (srv) or a
// 3-master Redis Cluster (cl).
type redisTarget struct {
	srv *redistest.Server
	cl  *redistest.Cluster
}

// client returns a new client of the target, closed at cleanup.
func (tg redisTarget) client(tb testing.TB) redis.UniversalClient {
	if tg.cl != nil {
		return tg.cl.Client(tb)
	}
	return tg.srv.Client(tb)
}

// commandCalls sums a command's calls (in scripts too) over the target's masters.
func (tg redisTarget) commandCalls(tb testing.TB, name string) int64 {
	tb.Helper()
	if tg.cl == nil {
		return redistest.CommandCalls(tb, tg.srv.Client(tb), name)
	}
	var n int64
	for _, s := range tg.cl.Nodes {
		n += redistest.CommandCalls(tb, s.Client(tb), name)
	}
	return n
}

// broker returns a new client of the target and a broker on it.
func (tg redisTarget) broker(tb testing.TB) (redis.UniversalClient, *RedisBroker) {
	rdb := tg.client(tb)
	return rdb, NewRedisBroker(rdb)
}

// startNode starts a Redis server for the test and returns it with a client and a broker
// on it.
func startNode(tb testing.TB) (*redistest.Server, redis.UniversalClient, *RedisBroker) {
	tb.Helper()
	srv := redistest.Start(tb)
	rdb, b := redisTarget{srv: srv}.broker(tb)
	return srv, rdb, b
}

// onBoth runs a guarantee test against one node and against a 3-master Redis Cluster.
func onBoth(t *testing.T, fn func(t *testing.T, tg redisTarget)) {
	t.Run("node", func(t *testing.T) { fn(t, redisTarget{srv: redistest.Start(t)}) })
	t.Run("cluster", func(t *testing.T) { fn(t, redisTarget{cl: redistest.StartCluster(t, 3)}) })
}

// startEngineOn starts an engine on a target with test defaults changed by mod.
func startEngineOn(tb testing.TB, tg redisTarget, d *Domain, id string, mod func(*EngineConfig)) *Engine {
	tb.Helper()
	cfg := EngineConfig{
		Domain: d, Client: tg.client(tb), InstanceID: id, Timing: fastTiming(2 * time.Second),
		DiscoveryInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	return runEngine(tb, cfg)
}

// runEngine creates an engine with cfg and starts it; it is shut down at cleanup.
func runEngine(tb testing.TB, cfg EngineConfig) *Engine {
	tb.Helper()
	e, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

// crash stops an engine the way a killed process stops: no acks flushed, no lease
// released, no heartbeat any more; its session expires after the TTL.
func crash(e *Engine) {
	e.killed.Store(true)
	e.hard()
	e.wg.Wait()
}

// sinkDomain returns the test domain whose Projector records into a sink on rdb as
// instance id (no work, not fenced); mod as in testDomain.
func sinkDomain(tb testing.TB, rdb redis.UniversalClient, id string, mod func(*Domain)) *Domain {
	tb.Helper()
	s := &sink{rdb: rdb, instance: id}
	return testDomain(tb, s.handle, mod)
}

// bulkPublish publishes many events in pipelines (the publish script, as Publish does).
func bulkPublish(tb testing.TB, b *RedisBroker, d *Domain, events []testPayload) {
	tb.Helper()
	ctx := context.Background()
	if err := loadScripts(ctx, b.rdb); err != nil {
		tb.Fatal(err)
	}
	for start := 0; start < len(events); start += 1000 {
		batch := events[start:min(start+1000, len(events))]
		routes := make([]Route, len(batch))
		evs := make([]Event, len(batch))
		cmds := make([]*redis.Cmd, len(batch))
		pipe := b.rdb.Pipeline()
		for i, p := range batch {
			data, _ := json.Marshal(p)
			r, err := d.Route("OrderPlaced", data, 0)
			if err != nil {
				tb.Fatal(err)
			}
			routes[i] = r.In(b.keys)
			evs[i] = Event{ID: NewEventID(), Type: "OrderPlaced", Category: r.Category, Key: r.Key, Data: data}
			cmds[i] = b.publishCall(routes[i], evs[i], 0).EvalSha(ctx, pipe)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
		for i, c := range cmds {
			res, err := scripts.ParsePublish(c)
			if err != nil {
				tb.Fatal(err)
			}
			if _, err := b.published(ctx, routes[i], evs[i], res); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

func publish(tb testing.TB, b *RedisBroker, d *Domain, key string, seq int, poison bool) Published {
	tb.Helper()
	data, _ := json.Marshal(testPayload{Client: key, Seq: seq, Poison: poison})
	p, err := b.Publish(context.Background(), d, "OrderPlaced", data, PublishOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// sink records handled events in Redis, so several instances (goroutines or processes)
// share one view:
//
//	t:log:{key}      list of seq, in the order effects were committed
//	t:marker:{key}   the cross-instance "inside the handler" marker
//
// (the braces are literal: a Redis Cluster hash tag, so one script touches one slot)
//
//	t:overlap        count of entries that found another holder's marker (the marker of
//	                 an earlier attempt of the same event by the same owner, whose handler
//	                 failed after entering, is that attempt's: the engine retries only
//	                 after it returned)
//	t:starts:{inst}  list of "key/seq/generation" started by an instance
//	t:win:{key}      hash first/last start time (ns) per key, for cross-key overlap
//
// With fenced set, the commit is rejected when a higher generation already committed
// for the key (a real sink's use of the fencing token), and the marker of a lower
// generation counts as stale, not as an overlap.
type sink struct {
	rdb      redis.UniversalClient
	instance string
	work     time.Duration
	fenced   bool
	calls    sync.Map // seq+key -> attempts in this process
}

var sinkEnter = redis.NewScript(`
-- KEYS[1] marker; ARGV[1] holder "inst|seq:gen"; ARGV[2] gen; ARGV[3] fenced (1/0)
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  return 1 -- left by an earlier attempt of this event by this owner, which failed
end
if cur then
  if ARGV[3] == '1' then
    local g = tonumber(string.match(cur, ':(%d+)$'))
    if g and g < tonumber(ARGV[2]) then
      redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
      return 1
    end
  end
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
return 1`)

var sinkCommit = redis.NewScript(`
-- KEYS[1] log; KEYS[2] max generation of the key; KEYS[3] marker
-- ARGV[1] seq; ARGV[2] gen; ARGV[3] holder; ARGV[4] fenced
if ARGV[4] == '1' then
  local g = tonumber(redis.call('GET', KEYS[2]) or '0')
  if tonumber(ARGV[2]) < g then return -1 end
  redis.call('SET', KEYS[2], ARGV[2])
end
redis.call('RPUSH', KEYS[1], ARGV[1])
if redis.call('GET', KEYS[3]) == ARGV[3] then redis.call('DEL', KEYS[3]) end
return 1`)

func (s *sink) handle(ctx context.Context, ev Event) error {
	d, _ := DeliveryFrom(ctx)
	var p testPayload
	if err := json.Unmarshal(ev.Data, &p); err != nil {
		return err
	}
	if p.Poison {
		return fmt.Errorf("poison event %s/%d refused", ev.Key, p.Seq)
	}
	bg := context.Background() // the sink's writes are not part of the engine's context
	holder := s.instance + "|" + strconv.Itoa(p.Seq) + ":" + strconv.FormatInt(d.Generation, 10)
	fenced := "0"
	if s.fenced {
		fenced = "1"
	}
	// The start record comes first, so a start is visible as early as possible.
	start := ev.Key + "/" + strconv.Itoa(p.Seq) + "/" + strconv.FormatInt(d.Generation, 10)
	if err := s.rdb.RPush(bg, "t:starts:"+s.instance, start).Err(); err != nil {
		return err
	}
	ok, err := sinkEnter.Run(bg, s.rdb, []string{sinkKey("marker", ev.Key)}, holder, d.Generation, fenced).Int()
	if err != nil {
		return err
	}
	if ok == 0 {
		s.rdb.Incr(bg, "t:overlap")
	}
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	pipe := s.rdb.Pipeline()
	pipe.HSetNX(bg, sinkKey("win", ev.Key), "first", now)
	pipe.HSet(bg, sinkKey("win", ev.Key), "last", now)
	if _, err := pipe.Exec(bg); err != nil {
		return err
	}
	if s.work > 0 {
		time.Sleep(s.work)
	}
	return sinkCommit.Run(bg, s.rdb, []string{sinkKey("log", ev.Key), sinkKey("gen", ev.Key), sinkKey("marker", ev.Key)},
		p.Seq, d.Generation, holder, fenced).Err()
}

// isIndexed reports whether a partition key is in its category's index (a set on one
// node, a hash on Redis Cluster).
func isIndexed(tb testing.TB, rdb redis.UniversalClient, category, key string) bool {
	tb.Helper()
	members, err := keyspace.For(rdb).IndexMembers(context.Background(), rdb, category).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return slices.Contains(members, key)
}

// sinkKey names a sink key of a partition key: "t:{kind}:{key}", the key as a hash tag.
func sinkKey(kind, key string) string { return "t:" + kind + ":{" + key + "}" }

// logOf returns the committed sequence of a key.
func logOf(tb testing.TB, rdb redis.UniversalClient, key string) []int {
	tb.Helper()
	vals, err := rdb.LRange(context.Background(), sinkKey("log", key), 0, -1).Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]int, len(vals))
	for i, v := range vals {
		out[i], _ = strconv.Atoi(v)
	}
	return out
}

// dedupFirst drops repeated values (a re-run of an event on failover), keeping the first.
func dedupFirst(xs []int) (out []int, dups int) {
	seen := map[int]bool{}
	for _, x := range xs {
		if seen[x] {
			dups++
			continue
		}
		seen[x] = true
		out = append(out, x)
	}
	return out, dups
}

func seqs(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func keysOf(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "client-" + strconv.Itoa(i)
	}
	return out
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
