package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
)

// The scripts a producer in another language runs, as the README's "Publishing from
// another language" says: from the repository.
var (
	publishScript = filepath.Join("..", "..", "..", "pkg", "engine", "scripts", "publish.lua")
	markScript    = filepath.Join("..", "..", "..", "pkg", "engine", "scripts", "mark.lua")
)

// producer is redis-cli against the fixture's Redis, as another publisher uses it.
type producer struct {
	t       *testing.T
	args    []string // connection arguments of redis-cli
	cluster bool
}

func (p producer) cli(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("redis-cli", append(append([]string{}, p.args...), args...)...).CombinedOutput()
	if err != nil || strings.HasPrefix(string(out), "(error)") || strings.HasPrefix(string(out), "ERR") {
		p.t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// stream is the partition stream of key in category step, as the layout names it.
func (p producer) stream(key string) string {
	if p.cluster {
		return "step:{" + key + "}"
	}
	return "step:" + key
}

// envelope returns the field/value pairs of a Step event of key.
func envelope(key string, seq int) []string {
	return []string{"id", fmt.Sprintf("ext-%s-%d", key, seq), "type", "Step", "category", "step", "key", key,
		"data", fmt.Sprintf(`{"key":%q,"seq":%d}`, key, seq), "priority", "0"}
}

// xadd appends an event with a plain XADD, published_at set by the producer.
func (p producer) xadd(key string, seq int) {
	p.t.Helper()
	p.cli(append([]string{"XADD", p.stream(key), "*", "published_at", fmt.Sprint(time.Now().UnixMilli())}, envelope(key, seq)...)...)
}

// index adds the key to the category's index with a plain SADD (HSET on a cluster).
func (p producer) index(key string) {
	p.t.Helper()
	if p.cluster {
		p.cli("HSET", "step:__partitions__", key, "ext")
	} else {
		p.cli("SADD", "step:__partitions__", key)
	}
}

// publish runs publish.lua as the README says, and on a cluster the index steps after it.
func (p producer) publish(key string, seq int) {
	p.t.Helper()
	s, id := p.stream(key), fmt.Sprintf("ext-%s-%d", key, seq)
	mark, bell := "{"+s+"}:__event__:"+id, "{"+s+"}:__bell__"
	keys := []string{s, "step:__partitions__", "__seqctl__:control", s, mark, bell, s}
	flags := "ie"
	if p.cluster {
		mark, bell = s+":__event__:"+id, s+":__bell__"
		keys = []string{s, s, s, s, mark, bell, s + ":__indexed__"}
		flags = "ce"
	}
	args := append([]string{"--eval", publishScript}, keys...)
	args = append(append(args, ",", key, "step", "0", "60000", flags), envelope(key, seq)...)
	out := p.cli(args...)
	lines := strings.Fields(out)
	if len(lines) != 3 || lines[0] != "1" {
		p.t.Fatalf("publish.lua answered %q, want 1, the entry id and the index flag", out)
	}
	if p.cluster && lines[2] == "1" {
		p.cli("HSET", "step:__partitions__", key, lines[1]+"/"+fmt.Sprint(time.Now().UnixNano()))
		p.cli("XADD", "{__seqctl__}:control", "MAXLEN", "~", "1000", "*", "op", "partition", "category", "step", "key", key)
		p.cli("--eval", markScript, s+":__indexed__", s)
	}
}

// Events from redis-cli as another publisher, delivered by two 'seqctl run' processes: a
// plain XADD of the envelope and SADD (HSET on a cluster) to the index is handled within
// 5 s, for a new partition and for one an instance owns and that is idle; following the
// README's way (publish.lua), within 1 s. On one node and on a 3-master cluster, with
// keyspace notifications (turned on by seqctl) and with CONFIG refused to the workers,
// when a warning says once which setting would make it faster.
func TestRunEventsFromRedisCli(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli is not installed")
	}
	noConfig := redistest.Options{Users: []string{"ACL SETUSER worker on >pw ~* &* +@all -config"}}
	for _, tc := range []struct {
		name     string
		cluster  bool
		noConfig bool
	}{
		{"node", false, false}, {"node without CONFIG", false, true},
		{"cluster", true, false}, {"cluster without CONFIG", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, sinkURL := startSink(t)
			subst := map[string]string{"URL": sinkURL}
			var f *fixture
			var p producer
			runURL := ""
			switch {
			case tc.cluster:
				o := redistest.Options{}
				if tc.noConfig {
					o = noConfig
				}
				c := redistest.StartClusterWith(t, 3, o)
				f = &fixture{t: t, cl: c, url: c.URL, rdb: c.Client(t), dir: t.TempDir(), global: []string{"--cluster"}}
				f.writeConfig("http.domain.toml", subst)
				p = producer{t: t, args: []string{"-c", "-p", fmt.Sprint(c.Nodes[0].Port())}, cluster: true}
				if tc.noConfig {
					runURL = strings.Replace(c.URL, "redis://", "redis://worker:pw@", 1)
				}
			default:
				o := redistest.Options{}
				if tc.noConfig {
					o = noConfig
				}
				f = newFixtureWith(t, "http.domain.toml", subst, o)
				p = producer{t: t, args: []string{"-p", fmt.Sprint(f.srv.Port())}}
				if tc.noConfig {
					runURL = f.srv.UserURL("worker", "pw")
				}
			}
			env := []string{"E2E_SECRET=" + e2eSecret}
			var procs []*proc
			for _, name := range []string{"a", "b"} {
				var args []string
				if runURL != "" {
					args = []string{"--redis-url", runURL}
				}
				pr := f.run(name, env, args...)
				pr.waitReady(10 * time.Second)
				procs = append(procs, pr)
			}
			handled := func(key string, n int) func() bool {
				return func() bool { log, _, _ := s.snapshot(); return len(log[key]) >= n }
			}
			within := func(bound time.Duration, what string, cond func() bool) {
				t.Helper()
				start := time.Now()
				testkit.WaitFor(t, bound, what, cond)
				t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
			}

			// Past the instances' first full read of the index: a seqctl event first.
			f.publish([]step{{"warm", 1}})
			testkit.WaitFor(t, 10*time.Second, "the first event handled", handled("warm", 1))
			for i := 1; i <= 3; i++ {
				p.xadd("n1", i)
			}
			p.index("n1")
			within(5*time.Second, "XADD and SADD, a new partition", handled("n1", 3))
			time.Sleep(time.Second) // its owner is idle now
			p.xadd("n1", 4)
			within(5*time.Second, "XADD, an owned idle partition", handled("n1", 4))

			p.publish("r1", 1)
			within(time.Second, "publish.lua, a new partition", handled("r1", 1))
			time.Sleep(time.Second)
			p.publish("r1", 2)
			within(time.Second, "publish.lua, an owned idle partition", handled("r1", 2))

			log, violations, _ := s.snapshot()
			if got := fmt.Sprint(log["n1"]); got != "[1 2 3 4]" {
				t.Errorf("n1 handled %s, want [1 2 3 4]", got)
			}
			if got := fmt.Sprint(log["r1"]); got != "[1 2]" {
				t.Errorf("r1 handled %s, want [1 2]", got)
			}
			for _, v := range violations {
				t.Error(v)
			}
			for _, pr := range procs {
				warned := strings.Count(pr.logText(), "set notify-keyspace-events to include K and t")
				if tc.noConfig && warned != 1 {
					t.Errorf("%s warned %d times about the keyspace notification setting, want once", pr.name, warned)
				}
				if !tc.noConfig && warned != 0 {
					t.Errorf("%s warned about the keyspace notification setting although it could turn it on", pr.name)
				}
			}
		})
	}
}

// The README's redis-cli command for another language's producer, run as written (the
// port added): the envelope lands in the partition stream, the key in the index and a
// notice on the control stream; run again, it appends nothing.
func TestReadmePublishCommandForAnotherLanguage(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli is not installed")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Publishing from another language")
	if !ok {
		t.Fatal("README.md has no section \"Publishing from another language\"")
	}
	_, block, _ := strings.Cut(section, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	srv := redistest.Start(t)
	script := strings.ReplaceAll(block, "redis-cli ", fmt.Sprintf("redis-cli -p %d ", srv.Port()))
	run := func() string {
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = filepath.Join("..", "..", "..")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the README's command: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	first := strings.Fields(run())
	if len(first) != 3 || first[0] != "1" {
		t.Fatalf("the README's command answered %q, want 1, the entry id, 0", first)
	}
	rdb, ctx := srv.Client(t), context.Background()
	msgs := rdb.XRange(ctx, "order:c-9", "-", "+").Val()
	if len(msgs) != 1 || msgs[0].ID != first[1] {
		t.Fatalf("order:c-9 holds %v, want the entry %s", msgs, first[1])
	}
	ev, err := engine.EventFromMessage(msgs[0])
	if err != nil || ev.ID != "e-1" || ev.Type != "OrderPlaced" || ev.Key != "c-9" || string(ev.Data) != `{"order_id":"o-1","client_id":"c-9"}` {
		t.Errorf("the entry decodes to %+v, %v", ev, err)
	}
	if !rdb.SIsMember(ctx, "order:__partitions__", "c-9").Val() {
		t.Error("c-9 is not in the index")
	}
	if n := rdb.XLen(ctx, "__seqctl__:control").Val(); n != 1 {
		t.Errorf("%d notices on the control stream, want 1", n)
	}
	again := strings.Fields(run())
	if len(again) != 3 || again[0] != "0" || again[1] != first[1] || rdb.XLen(ctx, "order:c-9").Val() != 1 {
		t.Errorf("run again, the command answered %q and the stream holds %d entries; want 0, %s and 1", again, rdb.XLen(ctx, "order:c-9").Val(), first[1])
	}
}
