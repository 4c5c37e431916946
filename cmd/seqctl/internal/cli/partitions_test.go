package cli

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestPartitionsListParse(t *testing.T) {
	def := PartitionsListOptions{Sort: "name", Interval: 2 * time.Second}
	testParse(t, "partitions", newCmdPartitionsList, []parseCase[PartitionsListOptions]{
		{name: "defaults", want: def},
		{name: "filters", argv: []string{"--category", "order", "--handler", "P", "--halted", "--owner", "w-1"},
			want: PartitionsListOptions{Category: "order", Handler: "P", Halted: true, Owner: "w-1", Sort: "name", Interval: 2 * time.Second}},
		{name: "sort and watch", argv: []string{"--sort", "lag", "--watch", "--interval", "500ms"},
			want: PartitionsListOptions{Sort: "lag", Watch: true, Interval: 500 * time.Millisecond}},
		{name: "json", argv: []string{"-o", "json"}, want: PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Sort: "name", Interval: 2 * time.Second}},
		{name: "wide, long form", argv: []string{"--output=wide"}, want: PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{Output: "wide"}, Sort: "name", Interval: 2 * time.Second}},
		{name: "yaml", argv: []string{"-o", "yaml"}, want: PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{Output: "yaml"}, Sort: "name", Interval: 2 * time.Second}},
		{name: "no headers", argv: []string{"--no-headers"}, want: PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{NoHeaders: true}, Sort: "name", Interval: 2 * time.Second}},
		{name: "states and key", argv: []string{"--state", "running,idle", "--state", "halted", "--key", "client-1*"},
			want: PartitionsListOptions{States: []string{"running", "idle", "halted"}, Key: "client-1*", Sort: "name", Interval: 2 * time.Second}},
		{name: "--halted with another state", argv: []string{"--halted", "--state", "idle"}, wantErr: "--halted keeps only halted partitions and --state idle none of them"},
		{name: "bad state", argv: []string{"--state", "stuck"}, wantErr: `invalid value for --state: unknown state "stuck": want running, idle, halted, paused, throttled or unowned`},
		{name: "bad key glob", argv: []string{"--key", "client-[1"}, wantErr: `invalid value for --key: invalid key pattern "client-[1"`},
		{name: "sort by backlog", argv: []string{"--sort", "backlog"}, want: PartitionsListOptions{Sort: "backlog", Interval: 2 * time.Second}},
		{name: "bad output", argv: []string{"-o", "csv"}, wantErr: `invalid value "csv" for --output: want table, wide, json or yaml`},
		{name: "bad sort", argv: []string{"--sort", "size"}, wantErr: `invalid value "size" for --sort`},
		{name: "bad interval", argv: []string{"--interval", "0s"}, wantErr: "--interval must be positive"},
		{name: "argument", argv: []string{"order:a"}, wantErr: `unexpected argument "order:a"`},
		{name: "unknown flag", argv: []string{"--stale"}, wantErr: "unknown flag: --stale"},
	}, ignoreOpsInputs(PartitionsListOptions{}))
}

func TestPartitionsListRun(t *testing.T) {
	testRun(t, func() *fakeAdmin { return &fakeAdmin{partitions: samplePartitions()} }, []runCase{
		{name: "terminal table", args: []string{"partitions", "list"}, tm: onTTY, golden: "testdata/ops/partitions-list.tty.golden"},
		{name: "pipe rows", args: []string{"partitions", "list"}, tm: inPipe, golden: "testdata/ops/partitions-list.pipe.golden"},
		{name: "wide", args: []string{"partitions", "list", "-o", "wide"}, tm: onTTY, golden: "testdata/ops/partitions-list.wide.golden"},
		{name: "json", args: []string{"partitions", "list", "-o", "json"}, tm: onTTY, golden: "testdata/ops/partitions-list.json.golden"},
		{name: "sorted by lag", args: []string{"partitions", "list", "--sort", "lag"}, tm: inPipe, golden: "testdata/ops/partitions-list.lag.golden"},
		{name: "sorted by age", args: []string{"partitions", "list", "--sort", "age"}, tm: inPipe, golden: "testdata/ops/partitions-list.age.golden"},
		{name: "yaml", args: []string{"partitions", "list", "-o", "yaml"}, tm: inPipe, golden: "testdata/ops/partitions-list.yaml.golden"},
		{name: "-o table in a pipe keeps its header", args: []string{"partitions", "list", "-o", "table"}, tm: inPipe, golden: "testdata/ops/partitions-list.table-pipe.golden"},
		{name: "--no-headers on a terminal", args: []string{"partitions", "list", "--no-headers"}, tm: onTTY, golden: "testdata/ops/partitions-list.no-headers.golden"},
		{name: "-o wide in a pipe is the wide table", args: []string{"partitions", "list", "-o", "wide", "--no-headers"}, tm: inPipe,
			stdoutHas: []string{"5m30s  halted   order:client-1   1738317600000-0  3  projector: total must be positive …  -  -  -  -\n"}},
		{
			name: "state and key filters reach the admin", args: []string{"partitions", "list", "--state", "idle,halted", "--key", "client-1*"},
			tm: inPipe, fa: &fakeAdmin{}, wantFilter: admin.Filter{States: []admin.State{admin.StateIdle, admin.StateHalted}, KeyGlob: "client-1*"},
		},
		{
			name: "filters reach the admin", args: []string{"partitions", "list", "--halted", "--handler", "P", "--category", "order", "--owner", "w"},
			tm: inPipe, fa: &fakeAdmin{}, wantFilter: admin.Filter{Category: "order", Handler: "P", Halted: true, Owner: "w"},
		},
		{name: "nothing on a terminal", args: []string{"partitions", "list"}, tm: onTTY, fa: &fakeAdmin{}, stderrHas: []string{"No partitions match."}},
		{name: "nothing in a pipe", args: []string{"partitions", "list"}, tm: inPipe, fa: &fakeAdmin{}},
		{name: "empty json is an array", args: []string{"partitions", "list", "-o", "json"}, tm: inPipe, fa: &fakeAdmin{partitions: []admin.Partition{}}, stdoutHas: []string{"[]"}},
		{
			name: "redis down", args: []string{"partitions", "list"}, tm: inPipe, code: cmdutil.ExitFailure,
			fa:        &fakeAdmin{listErr: errors.New("engine: redis unavailable: dial tcp: connection refused")},
			stderrHas: []string{"seqctl: engine: redis unavailable"},
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
		tm        ttyMode
		fits120   bool     // every line fits in 120 columns and the two rows differ but for the key
		stdoutHas []string // the whole numbers, where they are kept
	}{
		{name: "terminal", args: []string{"partitions", "list"}, tm: onTTY, fits120: true},
		{name: "-o table in a pipe", args: []string{"partitions", "list", "-o", "table"}, tm: inPipe, fits120: true},
		{name: "pipe rows", args: []string{"partitions", "list"}, tm: inPipe, stdoutHas: []string{"\t1796123456789012\t", "\t1796123456789047\t"}},
		{name: "wide", args: []string{"partitions", "list", "-o", "wide"}, tm: onTTY, stdoutHas: []string{" 1796123456789012 ", " 1796123456789047 "}},
		{name: "json", args: []string{"partitions", "list", "-o", "json"}, tm: inPipe, stdoutHas: []string{`"generation": 1796123456789012,`, `"generation": 1796123456789047,`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runOps(t, &fakeAdmin{partitions: ps()}, tt.tm, "", tt.args...)
			checkResult(t, r, 0, "", tt.stdoutHas, nil)
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
	fa := &fakeAdmin{partitions: samplePartitions()}
	f := &cmdutil.Factory{IOStreams: ios, OpenAdmin: fa.opener()}
	if code := run(context.Background(), f, []string{"partitions", "list"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), cmdutil.AnsiRed+"halted"+cmdutil.AnsiReset) {
		t.Errorf("a halted state is not red on a colour terminal:\n%q", out.String())
	}
	out.Reset()
	ios.Color = true
	if code := run(context.Background(), f, []string{"partitions", "list", "--no-color"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Errorf("--no-color still printed escapes:\n%q", out.String())
	}
}

func TestPartitionsListWatch(t *testing.T) {
	for _, tm := range []ttyMode{onTTY, inPipe} {
		ios, _, out, _ := cmdutil.NewTestIOStreams()
		ios.IsTerminal = tm.out
		ctx, cancel := context.WithCancel(context.Background())
		fa := &fakeAdmin{partitions: samplePartitions()[:1], onList: func(n int) {
			if n == 3 {
				cancel()
			}
		}}
		opts := &PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{IO: ios, Ctx: ctx, Admin: fa.opener()},
			Sort: "name", Watch: true, Interval: time.Millisecond}
		if err := cmdutil.RunWithAdmin(opts, partitionsListRun); err != nil {
			t.Fatal(err)
		}
		if fa.listCalls != 3 {
			t.Errorf("terminal %v: %d refreshes, want 3", tm.out, fa.listCalls)
		}
		if got := strings.Count(out.String(), "client-2"); got != 2 {
			t.Errorf("terminal %v: %d lists printed, want 2 (the third call was interrupted):\n%s", tm.out, got, out.String())
		}
		if tm.out && !strings.Contains(out.String(), "\x1b[H\x1b[2J") {
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
	fa := &fakeAdmin{partitions: samplePartitions()[:3]}
	fa.onList = func(n int) {
		switch n {
		case 1: // only the lease and head age move: nothing to print
			fa.partitions[0].LeaseRemainingMS -= 1000
			fa.partitions[1].HeadAgeMS += 1000
		case 2: // client-2 catches up, client-3 is reaped
			fa.partitions[1].Lag, fa.partitions[1].Backlog, fa.partitions[1].Pending, fa.partitions[1].State = 0, 0, 0, admin.StateIdle
			fa.partitions = fa.partitions[:2]
		case 4: // the fourth refresh is interrupted: nothing of it is printed
			cancel()
		}
	}
	n := 0
	opts := &PartitionsListOptions{OpsOptions: cmdutil.OpsOptions{IO: ios, Output: "json", Ctx: ctx, Admin: fa.opener()},
		Sort: "name", Watch: true, Interval: time.Millisecond,
		Now: func() time.Time { n++; return t0.Add(time.Duration(n) * time.Second) }}
	if err := cmdutil.RunWithAdmin(opts, partitionsListRun); err != nil {
		t.Fatal(err)
	}
	golden(t, "testdata/ops/partitions-list.watch.ndjson.golden", out.String())
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
	testParse(t, "partitions", newCmdPartitionsInspect, []parseCase[PartitionsInspectOptions]{
		{name: "stream", argv: []string{"order:client-1"}, want: PartitionsInspectOptions{Stream: "order:client-1"}},
		{name: "handler and json", argv: []string{"order:client-1", "--handler", "P", "-o", "json"},
			want: PartitionsInspectOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Stream: "order:client-1", Handler: "P"}},
		{name: "global flags before the command", argv: []string{"order:c", "--redis-url", "redis://x:1/0", "--config", "d.toml"},
			want: PartitionsInspectOptions{Stream: "order:c"}},
		{name: "no stream", argv: nil, wantErr: "missing the STREAM argument"},
		{name: "two streams", argv: []string{"a:b", "c:d"}, wantErr: `unexpected argument "c:d"`},
	}, ignoreOpsInputs(PartitionsInspectOptions{}))
	// The global flags land in the factory.
	f := testFactory()
	cmd := newCmdPartitionsInspect(f, func(*PartitionsInspectOptions) error { return nil })
	if err := parseOps(t, f, "partitions", cmd, "order:c", "--redis-url", "rediss://h:6380/1", "--config", "d.toml", "--no-color"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cmdutil.GlobalOptions{ConfigPath: "d.toml", RedisURL: "rediss://h:6380/1", NoColor: true}, f.Global); diff != "" {
		t.Errorf("global options (-want +got):\n%s", diff)
	}
}

func TestPartitionsInspectRun(t *testing.T) {
	testRun(t, func() *fakeAdmin { return &fakeAdmin{inspection: sampleInspection()} }, []runCase{
		{name: "terminal", args: []string{"partitions", "inspect", "order:client-1"}, tm: onTTY, golden: "testdata/ops/partitions-inspect.tty.golden"},
		{name: "pipe", args: []string{"partitions", "inspect", "order:client-1"}, tm: inPipe, golden: "testdata/ops/partitions-inspect.pipe.golden"},
		{name: "json", args: []string{"partitions", "inspect", "order:client-1", "-o", "json"}, tm: inPipe, golden: "testdata/ops/partitions-inspect.json.golden"},
		{
			name: "not found", args: []string{"partitions", "inspect", "order:nope"}, tm: inPipe, code: cmdutil.ExitNotFound,
			fa:        &fakeAdmin{inspectErr: &admin.NotFoundError{What: "partition", Name: "order:nope"}},
			stderrHas: []string{"seqctl: partition order:nope not found"},
		},
		{
			name: "invalid stream", args: []string{"partitions", "inspect", "order:a:b"}, tm: inPipe, code: cmdutil.ExitUsage,
			fa:        &fakeAdmin{inspectErr: errors.Join(admin.ErrInvalidStream, &engine.InvalidKeyError{Key: "x"})},
			stderrHas: []string{"invalid stream name"},
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
		if err := printPartitions(opts, samplePartitions()); err != nil {
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
