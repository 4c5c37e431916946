package partitions

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestPartitionsListParse(t *testing.T) {
	def := PartitionsListOptions{Sort: "name", Interval: 2 * time.Second}
	cmdtest.ParseTable(t, "partitions", newCmdPartitionsList, []cmdtest.ParseCase[PartitionsListOptions]{
		{Name: "defaults", Want: def},
		{Name: "filters", Argv: []string{"--category", "order", "--handler", "P", "--halted", "--owner", "w-1"},
			Want: PartitionsListOptions{Category: "order", Handler: "P", Halted: true, Owner: "w-1", Sort: "name", Interval: 2 * time.Second}},
		{Name: "sort and watch", Argv: []string{"--sort", "lag", "--watch", "--interval", "500ms"},
			Want: PartitionsListOptions{Sort: "lag", SortGiven: true, Watch: true, Interval: 500 * time.Millisecond}},
		{Name: "json", Argv: []string{"-o", "json"}, Want: PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Sort: "name", Interval: 2 * time.Second}},
		{Name: "wide, long form", Argv: []string{"--output=wide"}, Want: PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{Output: "wide"}, Sort: "name", Interval: 2 * time.Second}},
		{Name: "yaml", Argv: []string{"-o", "yaml"}, Want: PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{Output: "yaml"}, Sort: "name", Interval: 2 * time.Second}},
		{Name: "no headers", Argv: []string{"--no-headers"}, Want: PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{NoHeaders: true}, Sort: "name", Interval: 2 * time.Second}},
		{Name: "states and key", Argv: []string{"--state", "running,idle", "--state", "halted", "--key", "client-1*"},
			Want: PartitionsListOptions{States: []string{"running", "idle", "halted"}, Key: "client-1*", Sort: "name", Interval: 2 * time.Second}},
		{Name: "--halted with another state", Argv: []string{"--halted", "--state", "idle"}, WantErr: "--halted keeps only halted partitions and --state idle none of them"},
		{Name: "bad state", Argv: []string{"--state", "stuck"}, WantErr: `invalid value for --state: unknown state "stuck": want running, idle, halted, paused, throttled or unowned`},
		{Name: "bad key glob", Argv: []string{"--key", "client-[1"}, WantErr: `invalid value for --key: invalid key pattern "client-[1"`},
		{Name: "sort by backlog", Argv: []string{"--sort", "backlog"}, Want: PartitionsListOptions{Sort: "backlog", SortGiven: true, Interval: 2 * time.Second}},
		{Name: "rebuild the state index", Argv: []string{"--rebuild-index", "--state", "halted"}, Want: PartitionsListOptions{Sort: "name", States: []string{"halted"}, RebuildIndex: true, Interval: 2 * time.Second}},
		{Name: "bad output", Argv: []string{"-o", "csv"}, WantErr: `invalid value "csv" for --output: want table, wide, json or yaml`},
		{Name: "bad sort", Argv: []string{"--sort", "size"}, WantErr: `invalid value "size" for --sort`},
		{Name: "bad interval", Argv: []string{"--interval", "0s"}, WantErr: "--interval must be positive"},
		{Name: "argument", Argv: []string{"order:a"}, WantErr: `unexpected argument "order:a"`},
		{Name: "unknown flag", Argv: []string{"--stale"}, WantErr: "unknown flag: --stale"},
	}, cmdtest.IgnoreOpsInputs(PartitionsListOptions{}))
}

func TestPartitionsListRun(t *testing.T) {
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{Partitions: cmdtest.SamplePartitions()} }, []cmdtest.RunCase{
		{Name: "terminal table", Args: []string{"partitions", "list"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/partitions-list.tty.golden"},
		{Name: "pipe rows", Args: []string{"partitions", "list"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/partitions-list.pipe.golden"},
		{Name: "wide", Args: []string{"partitions", "list", "-o", "wide"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/partitions-list.wide.golden"},
		{Name: "json", Args: []string{"partitions", "list", "-o", "json"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/partitions-list.json.golden"},
		{Name: "sorted by lag", Args: []string{"partitions", "list", "--sort", "lag"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/partitions-list.lag.golden"},
		{Name: "sorted by age", Args: []string{"partitions", "list", "--sort", "age"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/partitions-list.age.golden"},
		{Name: "yaml", Args: []string{"partitions", "list", "-o", "yaml"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/partitions-list.yaml.golden"},
		{Name: "-o table in a pipe keeps its header", Args: []string{"partitions", "list", "-o", "table"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/partitions-list.table-pipe.golden"},
		{Name: "--no-headers on a terminal", Args: []string{"partitions", "list", "--no-headers"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/partitions-list.no-headers.golden"},
		{Name: "-o wide in a pipe is the wide table", Args: []string{"partitions", "list", "-o", "wide", "--no-headers"}, TTY: cmdtest.InPipe,
			StdoutHas: []string{"5m30s  halted   order:client-1   1738317600000-0  3  projector: total must be positive …  -  -  -  -\n"}},
		{
			Name: "state and key filters reach the admin", Args: []string{"partitions", "list", "--state", "idle,halted", "--key", "client-1*"},
			TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{}, WantFilter: admin.Filter{States: []admin.State{admin.StateIdle, admin.StateHalted}, KeyGlob: "client-1*"},
		},
		{
			Name: "filters reach the admin", Args: []string{"partitions", "list", "--halted", "--handler", "P", "--category", "order", "--owner", "w"},
			TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{}, WantFilter: admin.Filter{Category: "order", Handler: "P", Halted: true, Owner: "w"},
		},
		{Name: "nothing on a terminal", Args: []string{"partitions", "list"}, TTY: cmdtest.OnTTY, FA: &cmdtest.FakeAdmin{}, StderrHas: []string{"No partitions match."}},
		{Name: "nothing in a pipe", Args: []string{"partitions", "list"}, TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{}},
		{Name: "empty json is an array", Args: []string{"partitions", "list", "-o", "json"}, TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{Partitions: []admin.Partition{}}, StdoutHas: []string{"[]"}},
		{
			Name: "a listing that fails halfway leaves its JSON array open", Args: []string{"partitions", "list", "-o", "json"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA:        &cmdtest.FakeAdmin{Partitions: cmdtest.SamplePartitions(), PageErr: errors.New("engine: redis unavailable: i/o timeout")},
			StdoutHas: []string{"[\n  {", `"key": "client-2"`}, StdoutLacks: []string{"client-3", "]"},
			StderrHas: []string{"seqctl: engine: redis unavailable"},
		},
		{
			Name: "a state filter over an index not built says so", Args: []string{"partitions", "list", "--state", "halted"}, TTY: cmdtest.InPipe,
			FA:         &cmdtest.FakeAdmin{Unindexed: []string{"order", "order"}},
			StderrHas:  []string{"note: the state index of order is not built", "--rebuild-index"},
			WantFilter: admin.Filter{States: []admin.State{admin.StateHalted}},
		},
		{
			Name: "--rebuild-index rebuilds before listing", Args: []string{"partitions", "list", "--rebuild-index", "--category", "order"}, TTY: cmdtest.InPipe,
			FA:         &cmdtest.FakeAdmin{},
			StderrHas:  []string{"state index of order rebuilt: 0 halted, 0 paused"},
			WantFilter: admin.Filter{Category: "order"},
		},
		{
			Name: "redis down", Args: []string{"partitions", "list"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA:        &cmdtest.FakeAdmin{ListErr: errors.New("engine: redis unavailable: dial tcp: connection refused")},
			StderrHas: []string{"seqctl: engine: redis unavailable"},
		},
	})
}

// Two partitions whose generations (Redis times in microseconds) differ only in their
// last digits: the table on a 120-column terminal tells them apart; the rows of a pipe,
// -o wide and -o json keep the whole numbers.
func TestPartitionsListTellsGenerationsApart(t *testing.T) {
	const genA, genB = 1796123456789012, 1796123456789047
	ps := func() []admin.Partition {
		p := admin.Partition{Category: "order", Stream: "order:client-1042", Key: "client-1042", Handler: "OrderProjector",
			Owner: "worker-1.k7x2mq3a", Generation: genA, LeaseRemainingMS: 12000, Backlog: 1, Lag: 1, HeadAgeMS: 1500,
			State: admin.StateRunning, HeadID: "1738317601000-0"}
		q := p
		q.Key, q.Stream, q.Generation = "client-1043", "order:client-1043", genB
		return []admin.Partition{p, q}
	}
	tests := []struct {
		name      string
		args      []string
		tm        cmdtest.TTYMode
		fits120   bool     // every line fits in 120 columns and the two rows differ but for the key
		stdoutHas []string // the whole numbers, where they are kept
	}{
		{name: "terminal", args: []string{"partitions", "list"}, tm: cmdtest.OnTTY, fits120: true},
		{name: "-o table in a pipe", args: []string{"partitions", "list", "-o", "table"}, tm: cmdtest.InPipe, fits120: true},
		{name: "pipe rows", args: []string{"partitions", "list"}, tm: cmdtest.InPipe, stdoutHas: []string{"\t1796123456789012\t", "\t1796123456789047\t"}},
		{name: "wide", args: []string{"partitions", "list", "-o", "wide"}, tm: cmdtest.OnTTY, stdoutHas: []string{" 1796123456789012 ", " 1796123456789047 "}},
		{name: "json", args: []string{"partitions", "list", "-o", "json"}, tm: cmdtest.InPipe, stdoutHas: []string{`"generation": 1796123456789012,`, `"generation": 1796123456789047,`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cmdtest.RunOps(t, &cmdtest.FakeAdmin{Partitions: ps()}, tt.tm, "", tt.args...)
			cmdtest.CheckResult(t, r, 0, "", tt.stdoutHas, nil)
			if !tt.fits120 {
				return
			}
			lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
			for i, l := range lines {
				if n := utf8.RuneCountInString(l); n > 120 {
					t.Errorf("line %d is %d columns wide, more than 120:\n%s", i+1, n, r.Stdout)
					break
				}
			}
			if len(lines) != 3 {
				t.Fatalf("want a header and two rows:\n%s", r.Stdout)
			}
			a, b := strings.Replace(lines[1], "client-1042", "KEY", 1), strings.Replace(lines[2], "client-1043", "KEY", 1)
			if a == b {
				t.Errorf("the rows of generations %d and %d differ only by key:\n%s", genA, genB, r.Stdout)
			}
		})
	}
}

func TestPartitionsListColor(t *testing.T) {
	ios, _, out, _ := cmdutil.NewTestIOStreams()
	ios.IsTerminal, ios.Color = true, true
	fa := &cmdtest.FakeAdmin{Partitions: cmdtest.SamplePartitions()}
	f := &cmdutil.Factory{IOStreams: ios, OpenAdmin: fa.Opener()}
	if code := cmdtest.RunRoot(context.Background(), f, []string{"partitions", "list"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), cmdutil.AnsiRed+"halted"+cmdutil.AnsiReset) {
		t.Errorf("a halted state is not red on a colour terminal:\n%q", out.String())
	}
	out.Reset()
	ios.Color = true
	if code := cmdtest.RunRoot(context.Background(), f, []string{"partitions", "list", "--no-color"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Errorf("--no-color still printed escapes:\n%q", out.String())
	}
}

func TestPartitionsListWatch(t *testing.T) {
	for _, tm := range []cmdtest.TTYMode{cmdtest.OnTTY, cmdtest.InPipe} {
		ios, _, out, _ := cmdutil.NewTestIOStreams()
		ios.IsTerminal = tm.Out
		ctx, cancel := context.WithCancel(context.Background())
		fa := &cmdtest.FakeAdmin{Partitions: cmdtest.SamplePartitions()[:1], OnList: func(n int) {
			if n == 3 {
				cancel()
			}
		}}
		opts := &PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{IO: ios, Ctx: ctx, Admin: fa.Opener()},
			Sort: "name", Watch: true, Interval: time.Millisecond}
		if err := cmdutil.RunWithAdmin(opts, partitionsListRun); err != nil {
			t.Fatal(err)
		}
		if fa.ListCalls != 3 {
			t.Errorf("terminal %v: %d refreshes, want 3", tm.Out, fa.ListCalls)
		}
		if got := strings.Count(out.String(), "client-2"); got != 2 {
			t.Errorf("terminal %v: %d lists printed, want 2 (the third call was interrupted):\n%s", tm.Out, got, out.String())
		}
		if tm.Out && !strings.Contains(out.String(), "\x1b[H\x1b[2J") {
			t.Errorf("a terminal watch does not redraw in place")
		}
	}
}

// --watch -o json prints NDJSON: every partition on the first refresh, then one compact
// object per change (a lease that only ticks down is no change), and a removed object
// for a partition that is gone; never a pretty array.
func TestPartitionsListWatchNDJSON(t *testing.T) {
	ios, _, out, _ := cmdutil.NewTestIOStreams()
	ctx, cancel := context.WithCancel(context.Background())
	fa := &cmdtest.FakeAdmin{Partitions: cmdtest.SamplePartitions()[:3]}
	fa.OnList = func(n int) {
		switch n {
		case 1: // only the lease and head age move: nothing to print
			fa.Partitions[0].LeaseRemainingMS -= 1000
			fa.Partitions[1].HeadAgeMS += 1000
		case 2: // client-2 catches up, client-3 is reaped
			fa.Partitions[1].Lag, fa.Partitions[1].Backlog, fa.Partitions[1].Pending, fa.Partitions[1].State = 0, 0, 0, admin.StateIdle
			fa.Partitions = fa.Partitions[:2]
		case 4: // the fourth refresh is interrupted: nothing of it is printed
			cancel()
		}
	}
	n := 0
	opts := &PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{IO: ios, Output: "json", Ctx: ctx, Admin: fa.Opener()},
		Sort: "name", Watch: true, Interval: time.Millisecond,
		Now: func() time.Time { n++; return cmdtest.T0.Add(time.Duration(n) * time.Second) }}
	if err := cmdutil.RunWithAdmin(opts, partitionsListRun); err != nil {
		t.Fatal(err)
	}
	cmdtest.Golden(t, "testdata/ops/partitions-list.watch.ndjson.golden", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Errorf("%d lines, want 5 (3 partitions, nothing for the second refresh, then a change and a removal)", len(lines))
	}
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["stream"] == nil || m["observed_at"] == nil {
			t.Errorf("line %d is not one partition object with observed_at: %v\n%s", i+1, err, line)
		}
	}
}

func TestPartitionsInspectParse(t *testing.T) {
	cmdtest.ParseTable(t, "partitions", newCmdPartitionsInspect, []cmdtest.ParseCase[PartitionsInspectOptions]{
		{Name: "stream", Argv: []string{"order:client-1"}, Want: PartitionsInspectOptions{Stream: "order:client-1"}},
		{Name: "handler and json", Argv: []string{"order:client-1", "--handler", "P", "-o", "json"},
			Want: PartitionsInspectOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Stream: "order:client-1", Handler: "P"}},
		{Name: "global flags before the command", Argv: []string{"order:c", "--redis-url", "redis://x:1/0", "--config", "d.toml"},
			Want: PartitionsInspectOptions{Stream: "order:c"}},
		{Name: "no stream", Argv: nil, WantErr: "missing the STREAM argument"},
		{Name: "two streams", Argv: []string{"a:b", "c:d"}, WantErr: `unexpected argument "c:d"`},
	}, cmdtest.IgnoreOpsInputs(PartitionsInspectOptions{}))
	// The global flags land in the factory.
	f := cmdtest.NewFactory()
	cmd := newCmdPartitionsInspect(f, func(*PartitionsInspectOptions) error { return nil })
	if err := cmdtest.ParseOps(t, f, "partitions", cmd, "order:c", "--redis-url", "rediss://h:6380/1", "--config", "d.toml", "--no-color"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cmdutil.GlobalOptions{ConfigPath: "d.toml", RedisURL: "rediss://h:6380/1", NoColor: true}, f.Global); diff != "" {
		t.Errorf("global options (-want +got):\n%s", diff)
	}
}

func TestPartitionsInspectRun(t *testing.T) {
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{Inspection: cmdtest.SampleInspection()} }, []cmdtest.RunCase{
		{Name: "terminal", Args: []string{"partitions", "inspect", "order:client-1"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/partitions-inspect.tty.golden"},
		{Name: "pipe", Args: []string{"partitions", "inspect", "order:client-1"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/partitions-inspect.pipe.golden"},
		{Name: "json", Args: []string{"partitions", "inspect", "order:client-1", "-o", "json"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/partitions-inspect.json.golden"},
		{
			Name: "not found", Args: []string{"partitions", "inspect", "order:nope"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitNotFound,
			FA:        &cmdtest.FakeAdmin{InspectErr: &admin.NotFoundError{What: "partition", Name: "order:nope"}},
			StderrHas: []string{"seqctl: partition order:nope not found"},
		},
		{
			Name: "invalid stream", Args: []string{"partitions", "inspect", "order:a:b"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			FA:        &cmdtest.FakeAdmin{InspectErr: errors.Join(admin.ErrInvalidStream, &engine.InvalidKeyError{Key: "x"})},
			StderrHas: []string{"invalid stream name"},
		},
	})
}

// A coloured STATE in the middle of -o wide does not move the columns after it: the table
// in colour, stripped of its escapes, is the table without colour.
func TestWideTableColourKeepsAlignment(t *testing.T) {
	render := func(color bool) string {
		ios, _, out, _ := cmdutil.NewTestIOStreams()
		ios.IsTerminal, ios.Color = true, color
		opts := &PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{IO: ios, Output: "wide"}, Sort: "name"}
		if err := printPartitions(opts, cmdtest.SamplePartitions()); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	plain, coloured := render(false), render(true)
	if !strings.Contains(coloured, cmdutil.AnsiRed+"halted"+cmdutil.AnsiReset) {
		t.Fatalf("no colour in the coloured table:\n%q", coloured)
	}
	if got := ansiEscape.ReplaceAllString(coloured, ""); got != plain {
		t.Errorf("coloured table, stripped:\n%s\nplain table:\n%s", got, plain)
	}
}

var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// A partition waiting for a permit lists as throttled (--state throttled keeps it), -o
// wide names the value, and inspect says what it waits for and where to look.
func TestPartitionsShowThrottled(t *testing.T) {
	fa := &cmdtest.FakeAdmin{Partitions: cmdtest.SamplePartitions(), HandlerNames: []string{"OrderProjector"}}
	fa.Partitions[0].State, fa.Partitions[0].LimitValue = admin.StateThrottled, "acme"
	r := cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "partitions", "list", "--state", "throttled", "-o", "wide", "--no-headers")
	cmdtest.CheckResult(t, r, 0, "", []string{"  throttled  order:client-2  -  -  -  -  -  -  acme\n"}, nil)
	if strings.Count(r.Stdout, "\n") != 1 || len(fa.Filter.States) != 1 || fa.Filter.States[0] != admin.StateThrottled {
		t.Errorf("--state throttled: filter %+v, rows:\n%s", fa.Filter, r.Stdout)
	}

	in := cmdtest.SampleInspection()
	in.Stream, in.Key = "order:client-2", "client-2"
	in.Handlers[0].State, in.Handlers[0].Halt, in.Handlers[0].LimitValue = admin.StateThrottled, nil, "acme"
	fa.Inspection = in
	r = cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "partitions", "inspect", "order:client-2")
	cmdtest.CheckResult(t, r, 0, "", []string{"handler OrderProjector  throttled\n",
		"  throttled   waiting for a permit of limit value acme ('seqctl limits get acme --handler OrderProjector')\n"}, nil)
	r = cmdtest.RunOps(t, fa, cmdtest.InPipe, "", "partitions", "inspect", "order:client-2", "-o", "json")
	if !strings.Contains(r.Stdout, `"state": "throttled",`) || !strings.Contains(r.Stdout, `"limit_value": "acme",`) {
		t.Errorf("inspect -o json:\n%s", r.Stdout)
	}
}
