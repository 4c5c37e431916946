package scripts

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
)

// Every embedded script compiles on Redis as it is sent (prelude and flags line
// included), and Load puts every one-node script in the cache.
func TestEveryScriptCompilesAndLoads(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if name == "prelude.lua" {
			continue
		}
		src := Source(name)
		if src == "" {
			t.Errorf("%s is embedded but registered by no wrapper", name)
			continue
		}
		sha, err := rdb.ScriptLoad(ctx, src).Result()
		if err != nil {
			t.Errorf("%s does not compile: %v", name, err)
		} else if sha != Hash(name) {
			t.Errorf("%s: Redis knows it as %s, Hash says %s", name, sha, Hash(name))
		}
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if ok, _ := rdb.ScriptExists(ctx, s.Hash()).Result(); len(ok) != 1 || !ok[0] {
			t.Errorf("Load did not cache %s", s.name)
		}
	}
}

// A script that asks for the prelude gets it in place of its marker line; the others run
// as written.
func TestPreludeReplacesItsMarker(t *testing.T) {
	prelude, err := files.ReadFile("prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"reap.lua", "trim.lua", "drain.lua", "sweep.lua"} {
		src := Source(name)
		rest, ok := strings.CutPrefix(src, string(prelude))
		if !ok || strings.Contains(rest, "--#prelude") {
			t.Errorf("%s does not start with the prelude in place of its marker", name)
		}
	}
	raw, _ := files.ReadFile("ack.lua")
	if Source("ack.lua") != string(raw) {
		t.Error("ack.lua does not ask for the prelude, yet its source was changed")
	}
	if c := byName("sweep.lua"); c == nil || strings.HasPrefix(c.src, "#!") {
		t.Error("the one-node sweep.lua must not carry the Redis Cluster flags line")
	}
	cluster := sweepClusterScript.src
	if !strings.HasPrefix(cluster, "#!lua flags=allow-cross-slot-keys\n") || !strings.Contains(cluster, string(prelude)) {
		t.Error("the Redis Cluster sweep.lua must open with its flags line, then the prelude")
	}
}

// The typed call puts each key and argument where acquire.lua's header says, and its
// answers come back named.
func TestAcquireAnswersByName(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	for _, s := range []string{"sess:a", "sess:b"} {
		rdb.Set(ctx, s, "1", 0)
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "order:{k}", Values: []any{"f", "v"}})
	take := func(owner string, lanes ...string) AcquireReply {
		t.Helper()
		cmds, err := RunPipelined(ctx, rdb, 1, func(p redis.Pipeliner, _ int) *redis.Cmd {
			return AcquireMany{Units: []AcquireUnit{{Lease: "lease", Generation: "gen", Live: "sess:" + owner, Lanes: lanes}},
				Owner: owner, SessionPrefix: "sess:"}.EvalSha(ctx, p)
		})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := ParseAcquireMany(cmds[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 {
			t.Fatalf("%d replies for one unit", len(rs))
		}
		return rs[0]
	}
	a := take("a", "order:{k}")
	if a.Code != Acquired || a.Generation <= 0 {
		t.Fatalf("first take: %+v, want Acquired with a generation", a)
	}
	again := take("a", "order:{k}")
	if again.Code != Readopted || again.Generation <= a.Generation {
		t.Errorf("the holder again: %+v, want Readopted above %d", again, a.Generation)
	}
	if r := take("b", "order:{k}"); r.Code != HeldByOther || r.Holder != "a:"+strconv.FormatInt(again.Generation, 10) {
		t.Errorf("another owner: %+v, want HeldByOther by a", r)
	}
	rdb.Del(ctx, "sess:b")
	if r := take("b", "order:{k}"); r.Code != SessionGone {
		t.Errorf("an owner without a session: %+v, want SessionGone", r)
	}
	rdb.Set(ctx, "sess:b", "1", 0)
	rdb.Del(ctx, "lease")
	if r := take("b", "order:{gone}"); r.Code != NoLane {
		t.Errorf("a unit without a lane: %+v, want NoLane", r)
	}
}

// A reply of another shape is an error that names the script, never a zero answer.
func TestUnexpectedReplyIsAnError(t *testing.T) {
	for _, v := range []any{nil, "OK", []any{}, []any{"1"}} {
		if _, _, err := headOf("acquire.lua", v); !errors.Is(err, ErrReply) || !strings.Contains(err.Error(), "acquire.lua") {
			t.Errorf("head(%#v): %v, want ErrReply naming the script", v, err)
		}
	}
	if _, err := intsOf("renew.lua", []any{int64(1), "x"}); !errors.Is(err, ErrReply) {
		t.Errorf("ints with a string: %v, want ErrReply", err)
	}
}

// keyFromARGV matches a redis.call or redis.pcall whose key is built from an argument
// (ARGV[i] .. something) instead of coming through KEYS.
var keyFromARGV = regexp.MustCompile(`redis\.p?call\('[A-Za-z]+',\s*ARGV\[[^\]]+\]\s*\.\.`)

// reap.lua touches only keys it declares in KEYS (the pause keys of every registered
// group included), so that a Redis or proxy that routes or checks scripts by their
// declared keys sees every key it reads.
func TestReapDeclaresEveryKeyItReads(t *testing.T) {
	src, err := files.ReadFile("reap.lua")
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(src), "\n") {
		if keyFromARGV.MatchString(line) {
			t.Errorf("reap.lua:%d reads a key built from ARGV: %s", i+1, strings.TrimSpace(line))
		}
	}
}

// One call takes many units, each as a call of its own would: free leases in one
// group's counter get strictly growing generations, a live holder (of the lease or of a
// guard) keeps its unit, a dead one's lease is taken, the caller's own is re-adopted, a
// unit without a lane is refused; a caller without a session gets SessionGone for each.
func TestAcquireManyAnswersEachUnit(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	rdb.Set(ctx, "sess:a", "1", 0)
	rdb.Set(ctx, "sess:b", "1", 0)
	for _, s := range []string{"s1", "s2", "s3", "s4", "s5", "s7", "g7"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"f", "v"}})
	}
	rdb.Set(ctx, "l3", "b:5", 0)
	rdb.Set(ctx, "l4", "dead:6", 0)
	rdb.Set(ctx, "l5", "a:7", 0)
	rdb.Set(ctx, "gl7", "b:8", 0)
	unit := func(n string, guards ...string) AcquireUnit {
		return AcquireUnit{Lease: "l" + n, Generation: "gen", Live: "sess:a", Guards: guards, Lanes: []string{"s" + n}}
	}
	call := func(owner string, us ...AcquireUnit) []AcquireReply {
		t.Helper()
		for i := range us {
			us[i].Live = "sess:" + owner
		}
		cmds, err := RunPipelined(ctx, rdb, 1, func(p redis.Pipeliner, _ int) *redis.Cmd {
			return AcquireMany{Units: us, Owner: owner, SessionPrefix: "sess:"}.EvalSha(ctx, p)
		})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := ParseAcquireMany(cmds[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != len(us) {
			t.Fatalf("%d replies for %d units", len(rs), len(us))
		}
		return rs
	}
	rs := call("a", unit("1"), unit("2"), unit("3"), unit("4"), unit("5"), unit("6"), unit("7", "gl7"))
	want := []AcquireCode{Acquired, Acquired, HeldByOther, Acquired, Readopted, NoLane, HeldByOther}
	var last int64
	for i, r := range rs {
		if r.Code != want[i] {
			t.Errorf("unit %d: %+v, want code %d", i+1, r, want[i])
		}
		if r.Code == Acquired || r.Code == Readopted {
			if r.Generation <= last {
				t.Errorf("unit %d: generation %d not above %d", i+1, r.Generation, last)
			}
			last = r.Generation
			if v := rdb.Get(ctx, "l"+strconv.Itoa(i+1)).Val(); v != "a:"+strconv.FormatInt(r.Generation, 10) {
				t.Errorf("unit %d: lease %q, want a:%d", i+1, v, r.Generation)
			}
		}
	}
	if rs[2].Holder != "b:5" || rs[6].Holder != "b:8" {
		t.Errorf("holders %q and %q, want b:5 and b:8", rs[2].Holder, rs[6].Holder)
	}
	if v, _ := rdb.Get(ctx, "gen").Int64(); v != last {
		t.Errorf("counter %d, want the last generation granted, %d", v, last)
	}
	if rdb.Exists(ctx, "l6").Val() != 0 || rdb.Get(ctx, "gl7").Val() != "b:8" {
		t.Error("a refused unit's keys were written")
	}
	// A counter ahead of the clock (set by hand) is still passed.
	rdb.Set(ctx, "gen", "9000000000000000", 0)
	rdb.Del(ctx, "l1", "l2")
	rs = call("a", unit("1"), unit("2"))
	if rs[0].Generation != 9000000000000001 || rs[1].Generation != 9000000000000002 {
		t.Errorf("after a counter ahead of the clock: %+v", rs)
	}
	rdb.Del(ctx, "sess:b")
	for _, r := range call("b", unit("1"), unit("2")) {
		if r.Code != SessionGone {
			t.Errorf("a caller without a session: %+v, want SessionGone", r)
		}
	}
}
