package groups

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/enginetest"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

func TestGroupsListParse(t *testing.T) {
	cmdtest.ParseTable(t, "groups", newCmdGroupsList, []cmdtest.ParseCase[GroupsListOptions]{
		{Name: "everything", Want: GroupsListOptions{}},
		{Name: "one category as json", Argv: []string{"--category", "order", "-o", "json"}, Want: GroupsListOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Category: "order"}},
		{Name: "no arguments", Argv: []string{"order"}, WantErr: `unexpected argument "order"`},
		{Name: "bad output", Argv: []string{"-o", "csv"}, WantErr: `invalid value "csv" for --output`},
	}, cmdtest.IgnoreOpsInputs(GroupsListOptions{}))
}

func TestGroupsRemoveParse(t *testing.T) {
	zero, seven := int64(0), int64(7)
	cmdtest.ParseTable(t, "groups", newCmdGroupsRemove, []cmdtest.ParseCase[GroupsRemoveOptions]{
		{Name: "minimal", Argv: []string{"Mailer", "--category", "order"}, Want: GroupsRemoveOptions{Group: "Mailer", Category: "order"}},
		{Name: "expect zero is a comparison", Argv: []string{"Mailer", "--category", "order", "--expect-read", "0", "--yes"},
			Want: GroupsRemoveOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Group: "Mailer", Category: "order", ExpectRead: &zero}},
		{Name: "everything", Argv: []string{"Mailer", "--category", "order", "--expect-read", "7", "-y", "--dry-run", "--reason", "OPS-7", "-o", "json"},
			Want: GroupsRemoveOptions{GuardedOptions: cmdutil.GuardedOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Yes: true, DryRun: true}, Group: "Mailer", Category: "order", ExpectRead: &seven, Reason: "OPS-7"}},
		{Name: "category required", Argv: []string{"Mailer"}, WantErr: "--category is required"},
		{Name: "name required", Argv: []string{"--category", "order"}, WantErr: "missing the NAME argument"},
		{Name: "one name", Argv: []string{"A", "B", "--category", "order"}, WantErr: `unexpected argument "B"`},
		{Name: "negative figure", Argv: []string{"Mailer", "--category", "order", "--expect-read", "-1"}, WantErr: "must not be negative"},
	}, cmdtest.IgnoreOpsInputs(GroupsRemoveOptions{}))
}

func TestGroupsListRun(t *testing.T) {
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{GroupList: cmdtest.SampleGroups()} }, []cmdtest.RunCase{
		{Name: "terminal", Args: []string{"groups", "list"}, TTY: cmdtest.OnTTY, Golden: "testdata/ops/groups-list.tty.golden"},
		{Name: "pipe", Args: []string{"groups", "list"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/groups-list.pipe.golden"},
		{Name: "json", Args: []string{"groups", "list", "-o", "json"}, TTY: cmdtest.InPipe, Golden: "testdata/ops/groups-list.json.golden"},
		{Name: "nothing on a terminal", Args: []string{"groups", "list"}, TTY: cmdtest.OnTTY, FA: &cmdtest.FakeAdmin{}, StderrHas: []string{"No consumer groups registered or declared."}},
		{Name: "nothing as json is an array", Args: []string{"groups", "list", "-o", "json"}, TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{}, StdoutHas: []string{"[]"}},
		{Name: "redis down", Args: []string{"groups", "list"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA: &cmdtest.FakeAdmin{GroupsErr: fmt.Errorf("%w: connection refused", engine.ErrRedisUnavailable)}, StderrHas: []string{"redis unavailable"}},
	})
}

func TestGroupsRemoveRun(t *testing.T) {
	remove := []string{"groups", "remove", "Mailer", "--category", "order"}
	with := func(more ...string) []string { return append(append([]string(nil), remove...), more...) }
	running := cmdtest.SampleGroups()
	running[0].LiveLeases = 1
	noConfig := cmdtest.SampleGroups()
	noConfig[0].Declared = nil
	read83 := int64(83)
	cmdtest.RunTable(t, func() *cmdtest.FakeAdmin { return &cmdtest.FakeAdmin{GroupList: cmdtest.SampleGroups()} }, []cmdtest.RunCase{
		{
			Name: "remove what was inspected", Args: with("--expect-read", "83", "--yes", "--reason", "OPS-7"), TTY: cmdtest.InPipe,
			StdoutHas:  []string{"Removed Mailer from order: its consumer group was destroyed on 1 streams and 1 halt records deleted. Trim and reap no longer wait for it."},
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83, Reason: "OPS-7"}},
		},
		{
			Name: "without --expect-read the current figure is shown and compared", Args: with("--yes"), TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{GroupList: noConfig},
			StderrHas:  []string{"Consumer group Mailer of order:", "declared unknown (no --config)", "behind on 20 of 20 partitions: 517 entries unread, 0 pending; 83 read"},
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
		{
			Name: "json result", Args: with("--expect-read", "83", "--yes", "-o", "json"), TTY: cmdtest.InPipe,
			StdoutHas:  []string{`"group": "Mailer"`, `"destroyed": 1`, `"outcome": "ok"`},
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
		{
			Name: "confirmed on a terminal", Args: remove, TTY: cmdtest.OnTTY, Stdin: "yes\n",
			StderrHas: []string{"Remove Mailer from order, giving up its 517 unread entries? [y/N]"},
			WantRemove: []admin.GroupRemoval{
				{Category: "order", Group: "Mailer", ExpectRead: &read83, DryRun: true}, // checked before the question
				{Category: "order", Group: "Mailer", ExpectRead: &read83},
			},
		},
		{
			Name: "declined on a terminal", Args: remove, TTY: cmdtest.OnTTY, Stdin: "n\n", Code: cmdutil.ExitFailure,
			StderrHas: []string{"cancelled; nothing changed"}, WantRecord: admin.OutcomeDeclined,
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83, DryRun: true}},
		},
		{
			Name: "Redis Cluster on a terminal: refused before the question", Args: remove, TTY: cmdtest.OnTTY, Stdin: "yes\n", Code: cmdutil.ExitFailure,
			FA:         &cmdtest.FakeAdmin{GroupList: cmdtest.SampleGroups(), RemoveErr: fmt.Errorf("%w: retiring a consumer group checks and deletes every partition of the category in one script, which Redis Cluster cannot run across slots", engine.ErrNotSupported)},
			StderrHas:  []string{"which Redis Cluster cannot run across slots"},
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83, DryRun: true}},
		},
		{
			Name: "no terminal and no --yes: exit 2", Args: remove, TTY: cmdtest.InPipe, Code: cmdutil.ExitUsage,
			StderrHas: []string{"refusing to remove Mailer from order without confirmation", "--expect-read 83"}, WantRecord: admin.OutcomeRefused,
		},
		{
			Name: "dry run checks in Redis and changes nothing", Args: with("--dry-run"), TTY: cmdtest.InPipe,
			StdoutHas:  []string{"Would remove Mailer from order: giving up 517 unread and 0 pending entries, destroying its consumer group on 1 streams, deleting 1 halt records. Nothing changed (--dry-run)."},
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83, DryRun: true}},
		},
		{
			Name: "stale --expect-read: exit 4", Args: with("--expect-read", "80", "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
			StderrHas: []string{"has read 83 entries of order, expected 80"}, WantRecord: admin.OutcomeReadMoved,
		},
		{
			Name: "running: exit 4", Args: with("--yes"), TTY: cmdtest.InPipe, FA: &cmdtest.FakeAdmin{GroupList: running}, Code: cmdutil.ExitConflict,
			StderrHas: []string{"Mailer holds 1 live leases in order: it is running"}, WantRecord: admin.OutcomeLiveLease,
		},
		{
			Name: "declared by the config: exit 4", Args: []string{"groups", "remove", "Projector", "--category", "order", "--yes"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
			StderrHas: []string{"the config declares Projector on order"}, WantRecord: admin.OutcomeDeclared,
		},
		{
			Name: "not registered: exit 4", Args: []string{"groups", "remove", "Ledger", "--category", "payment", "--yes"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
			StderrHas: []string{"Ledger is not registered for payment (the registered groups of payment are"}, WantRecord: admin.OutcomeNotRegistered,
		},
		{
			Name: "unknown: exit 4", Args: []string{"groups", "remove", "Nobody", "--category", "order", "--yes"}, TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
			StderrHas: []string{"the registered groups of order are Mailer, Projector"}, WantRecord: admin.OutcomeNotRegistered,
		},
		{
			Name: "a lease taken under the script: exit 4", Args: with("--expect-read", "83", "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitConflict,
			FA:         &cmdtest.FakeAdmin{GroupList: cmdtest.SampleGroups(), RemoveErr: &engine.GroupLiveError{Group: "Mailer", Category: "order", LeaseKey: "{order:a}:__lease__:Mailer", Lease: "w1.1:9"}},
			StderrHas:  []string{"holds a live lease in order"},
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
		{
			Name: "Redis Cluster cannot run the script: exit 1 with the engine's reason", Args: with("--expect-read", "83", "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA:         &cmdtest.FakeAdmin{GroupList: cmdtest.SampleGroups(), RemoveErr: fmt.Errorf("%w: retiring a consumer group checks and deletes every partition of the category in one script, which Redis Cluster cannot run across slots", engine.ErrNotSupported)},
			StderrHas:  []string{"engine: not supported by this broker: retiring a consumer group", "which Redis Cluster cannot run across slots"},
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
		{
			Name: "the connection fails during the script", Args: with("--expect-read", "83", "--yes"), TTY: cmdtest.InPipe, Code: cmdutil.ExitFailure,
			FA:         &cmdtest.FakeAdmin{GroupList: cmdtest.SampleGroups(), RemoveErr: fmt.Errorf("%w: connection reset", engine.ErrRedisUnavailable)},
			StderrHas:  []string{"it may or may not have been applied; check with 'seqctl groups list --category order'"},
			WantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
	})
}

// Retiring a removed handler, end to end: one engine runs only Projector of a domain
// that also declares Mailer. Nothing Mailer has not read is trimmed or reaped;
// 'groups list' shows Mailer behind; after the handler is removed from the domain,
// 'groups remove' (refused while it is declared, for the running handler and with a
// stale figure) retires it, and reap and trim resume.
func TestGroupsRemoveEndToEnd(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	oldConfig, newConfig := cmdtest.WriteDomain(t, "ops-mailer"), cmdtest.WriteDomain(t, "ops")
	_, dom := cmdtest.LoadDomain(t, oldConfig)
	var handled atomic.Int64
	for i := range dom.Handlers {
		dom.Handlers[i].Func = func(context.Context, engine.Event) error { handled.Add(1); return nil }
	}
	enginetest.Start(t, engine.EngineConfig{
		Domain: dom, Client: srv.Client(t), InstanceID: "w1", Handlers: []string{"Projector"},
		Timing: engine.LeaseTiming{LeaseTTL: time.Second, HeartbeatInterval: 200 * time.Millisecond,
			PollInterval: 50 * time.Millisecond, ReapIdle: time.Second},
		DiscoveryInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
	})
	orders := cmdtest.OpsEngine{Dom: dom, Broker: engine.NewRedisBroker(rdb)}
	const perKey = 300 // above the trim period of 256 handled events
	for seq := 0; seq < perKey; seq++ {
		for _, k := range []string{"A", "B"} {
			orders.Publish(t, cmdtest.OpsPayload{Client: k, Seq: seq})
		}
	}
	testkit.WaitFor(t, 20*time.Second, "Projector handled everything", func() bool { return handled.Load() == 2*perKey })
	time.Sleep(3 * time.Second) // three reap periods
	cli := func(config string, args ...string) cmdtest.Result { return cmdtest.CLIAt(t, srv.URL, config, args...) }
	left := rdb.XLen(ctx, "order:A").Val() + rdb.XLen(ctx, "order:B").Val()
	t.Logf("after %d events handled by Projector and 3 s idle: %d of %d entries left for Mailer", handled.Load(), left, 2*perKey)
	if left != 2*perKey || rdb.SCard(ctx, keyspace.SingleNode.PartitionIndex("order")).Val() != 2 {
		t.Fatalf("%d of %d entries left, %d partitions indexed: Mailer's entries were trimmed or reaped", left, 2*perKey, rdb.SCard(ctx, keyspace.SingleNode.PartitionIndex("order")).Val())
	}

	r := cli(newConfig, "groups", "list", "-o", "json")
	var gs []admin.Group
	if err := json.Unmarshal([]byte(r.Stdout), &gs); err != nil || r.Code != 0 {
		t.Fatalf("groups list -o json: exit %d %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	if len(gs) != 2 || gs[0].Name != "Mailer" || gs[0].Unread != 2*perKey || gs[0].Behind != 2 || gs[0].Read != 0 || gs[0].LiveLeases != 0 ||
		*gs[0].Declared || gs[1].Name != "Projector" || gs[1].LiveLeases != 2 || !*gs[1].Declared {
		t.Fatalf("groups = %+v", gs)
	}
	r = cli(newConfig, "groups", "list")
	if !strings.Contains(r.Stdout, "order\tMailer\tyes\t0\t2\t2\t600\t0\t0\t0\tno") {
		t.Errorf("groups list rows:\n%s", r.Stdout)
	}

	r = cli(oldConfig, "groups", "remove", "Mailer", "--category", "order", "--expect-read", "0", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitConflict, "", nil, []string{"the config declares Mailer on order"})
	r = cli("", "groups", "remove", "Projector", "--category", "order", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitConflict, "", nil, []string{"Projector holds 2 live leases in order"})
	r = cli(newConfig, "groups", "remove", "Mailer", "--category", "order", "--expect-read", "5", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitConflict, "", nil, []string{"has read 0 entries of order, expected 5"})
	r = cli(newConfig, "groups", "remove", "Mailer", "--category", "order", "--expect-read", "0", "--dry-run")
	cmdtest.CheckResult(t, r, 0, "", []string{"Nothing changed (--dry-run)"}, nil)
	if !rdb.SIsMember(ctx, keyspace.SingleNode.GroupRegistry("order"), "Mailer").Val() {
		t.Fatal("the refusals or the dry run removed Mailer")
	}
	r = cli(newConfig, "groups", "remove", "Mailer", "--category", "order", "--expect-read", "0", "--yes", "--reason", "retired")
	cmdtest.CheckResult(t, r, 0, "", []string{"Removed Mailer from order"}, nil)

	removed := time.Now()
	testkit.WaitFor(t, 10*time.Second, "order:A and order:B reaped", func() bool {
		return rdb.Exists(ctx, "order:A", "order:B").Val() == 0 && rdb.SCard(ctx, keyspace.SingleNode.PartitionIndex("order")).Val() == 0
	})
	t.Logf("reaped %v after 'groups remove'", time.Since(removed).Round(10*time.Millisecond))
	for seq := 0; seq < perKey; seq++ {
		orders.Publish(t, cmdtest.OpsPayload{Client: "C", Seq: seq})
	}
	testkit.WaitFor(t, 20*time.Second, "order:C handled", func() bool { return handled.Load() == 3*perKey })
	testkit.WaitFor(t, 5*time.Second, "order:C trimmed", func() bool { return rdb.XLen(ctx, "order:C").Val() < perKey })
	t.Logf("order:C holds %d of %d entries once handled", rdb.XLen(ctx, "order:C").Val(), perKey)

	var outcomes []string
	for _, a := range cmdtest.AuditOf(t, srv.URL) {
		outcomes = append(outcomes, a.Command+" "+a.Handler+" "+a.Outcome)
	}
	want := []string{"groups remove Mailer declared", "groups remove Projector live_lease", "groups remove Mailer read_moved", "groups remove Mailer ok"}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
}
