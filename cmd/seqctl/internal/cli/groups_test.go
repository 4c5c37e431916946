package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/enginetest"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

func TestGroupsListParse(t *testing.T) {
	testParse(t, "groups", newCmdGroupsList, []parseCase[GroupsListOptions]{
		{name: "everything", want: GroupsListOptions{}},
		{name: "one category as json", argv: []string{"--category", "order", "-o", "json"}, want: GroupsListOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Category: "order"}},
		{name: "no arguments", argv: []string{"order"}, wantErr: `unexpected argument "order"`},
		{name: "bad output", argv: []string{"-o", "csv"}, wantErr: `invalid value "csv" for --output`},
	}, ignoreOpsInputs(GroupsListOptions{}))
}

func TestGroupsRemoveParse(t *testing.T) {
	zero, seven := int64(0), int64(7)
	testParse(t, "groups", newCmdGroupsRemove, []parseCase[GroupsRemoveOptions]{
		{name: "minimal", argv: []string{"Mailer", "--category", "order"}, want: GroupsRemoveOptions{Group: "Mailer", Category: "order"}},
		{name: "expect zero is a comparison", argv: []string{"Mailer", "--category", "order", "--expect-read", "0", "--yes"},
			want: GroupsRemoveOptions{GuardedOptions: cmdutil.GuardedOptions{Yes: true}, Group: "Mailer", Category: "order", ExpectRead: &zero}},
		{name: "everything", argv: []string{"Mailer", "--category", "order", "--expect-read", "7", "-y", "--dry-run", "--reason", "OPS-7", "-o", "json"},
			want: GroupsRemoveOptions{GuardedOptions: cmdutil.GuardedOptions{OpsOptions: cmdutil.OpsOptions{Output: "json"}, Yes: true, DryRun: true}, Group: "Mailer", Category: "order", ExpectRead: &seven, Reason: "OPS-7"}},
		{name: "category required", argv: []string{"Mailer"}, wantErr: "--category is required"},
		{name: "name required", argv: []string{"--category", "order"}, wantErr: "missing the NAME argument"},
		{name: "one name", argv: []string{"A", "B", "--category", "order"}, wantErr: `unexpected argument "B"`},
		{name: "negative figure", argv: []string{"Mailer", "--category", "order", "--expect-read", "-1"}, wantErr: "must not be negative"},
	}, ignoreOpsInputs(GroupsRemoveOptions{}))
}

func TestGroupsListRun(t *testing.T) {
	testRun(t, func() *fakeAdmin { return &fakeAdmin{groups: sampleGroups()} }, []runCase{
		{name: "terminal", args: []string{"groups", "list"}, tm: onTTY, golden: "testdata/ops/groups-list.tty.golden"},
		{name: "pipe", args: []string{"groups", "list"}, tm: inPipe, golden: "testdata/ops/groups-list.pipe.golden"},
		{name: "json", args: []string{"groups", "list", "-o", "json"}, tm: inPipe, golden: "testdata/ops/groups-list.json.golden"},
		{name: "nothing on a terminal", args: []string{"groups", "list"}, tm: onTTY, fa: &fakeAdmin{}, stderrHas: []string{"No consumer groups registered or declared."}},
		{name: "nothing as json is an array", args: []string{"groups", "list", "-o", "json"}, tm: inPipe, fa: &fakeAdmin{}, stdoutHas: []string{"[]"}},
		{name: "redis down", args: []string{"groups", "list"}, tm: inPipe, code: cmdutil.ExitFailure,
			fa: &fakeAdmin{groupsErr: fmt.Errorf("%w: connection refused", engine.ErrRedisUnavailable)}, stderrHas: []string{"redis unavailable"}},
	})
}

func TestGroupsRemoveRun(t *testing.T) {
	remove := []string{"groups", "remove", "Mailer", "--category", "order"}
	with := func(more ...string) []string { return append(append([]string(nil), remove...), more...) }
	running := sampleGroups()
	running[0].LiveLeases = 1
	noConfig := sampleGroups()
	noConfig[0].Declared = nil
	read83 := int64(83)
	testRun(t, func() *fakeAdmin { return &fakeAdmin{groups: sampleGroups()} }, []runCase{
		{
			name: "remove what was inspected", args: with("--expect-read", "83", "--yes", "--reason", "OPS-7"), tm: inPipe,
			stdoutHas:  []string{"Removed Mailer from order: its consumer group was destroyed on 1 streams and 1 halt records deleted. Trim and reap no longer wait for it."},
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83, Reason: "OPS-7"}},
		},
		{
			name: "without --expect-read the current figure is shown and compared", args: with("--yes"), tm: inPipe, fa: &fakeAdmin{groups: noConfig},
			stderrHas:  []string{"Consumer group Mailer of order:", "declared unknown (no --config)", "behind on 20 of 20 partitions: 517 entries unread, 0 pending; 83 read"},
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
		{
			name: "json result", args: with("--expect-read", "83", "--yes", "-o", "json"), tm: inPipe,
			stdoutHas:  []string{`"group": "Mailer"`, `"destroyed": 1`, `"outcome": "ok"`},
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
		{
			name: "confirmed on a terminal", args: remove, tm: onTTY, stdin: "yes\n",
			stderrHas: []string{"Remove Mailer from order, giving up its 517 unread entries? [y/N]"},
			wantRemove: []admin.GroupRemoval{
				{Category: "order", Group: "Mailer", ExpectRead: &read83, DryRun: true}, // checked before the question
				{Category: "order", Group: "Mailer", ExpectRead: &read83},
			},
		},
		{
			name: "declined on a terminal", args: remove, tm: onTTY, stdin: "n\n", code: cmdutil.ExitFailure,
			stderrHas: []string{"cancelled; nothing changed"}, wantRecord: admin.OutcomeDeclined,
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83, DryRun: true}},
		},
		{
			name: "Redis Cluster on a terminal: refused before the question", args: remove, tm: onTTY, stdin: "yes\n", code: cmdutil.ExitFailure,
			fa:         &fakeAdmin{groups: sampleGroups(), removeErr: fmt.Errorf("%w: retiring a consumer group checks and deletes every partition of the category in one script, which Redis Cluster cannot run across slots", engine.ErrNotSupported)},
			stderrHas:  []string{"which Redis Cluster cannot run across slots"},
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83, DryRun: true}},
		},
		{
			name: "no terminal and no --yes: exit 2", args: remove, tm: inPipe, code: cmdutil.ExitUsage,
			stderrHas: []string{"refusing to remove Mailer from order without confirmation", "--expect-read 83"}, wantRecord: admin.OutcomeRefused,
		},
		{
			name: "dry run checks in Redis and changes nothing", args: with("--dry-run"), tm: inPipe,
			stdoutHas:  []string{"Would remove Mailer from order: giving up 517 unread and 0 pending entries, destroying its consumer group on 1 streams, deleting 1 halt records. Nothing changed (--dry-run)."},
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83, DryRun: true}},
		},
		{
			name: "stale --expect-read: exit 4", args: with("--expect-read", "80", "--yes"), tm: inPipe, code: cmdutil.ExitConflict,
			stderrHas: []string{"has read 83 entries of order, expected 80"}, wantRecord: admin.OutcomeReadMoved,
		},
		{
			name: "running: exit 4", args: with("--yes"), tm: inPipe, fa: &fakeAdmin{groups: running}, code: cmdutil.ExitConflict,
			stderrHas: []string{"Mailer holds 1 live leases in order: it is running"}, wantRecord: admin.OutcomeLiveLease,
		},
		{
			name: "declared by the config: exit 4", args: []string{"groups", "remove", "Projector", "--category", "order", "--yes"}, tm: inPipe, code: cmdutil.ExitConflict,
			stderrHas: []string{"the config declares Projector on order"}, wantRecord: admin.OutcomeDeclared,
		},
		{
			name: "not registered: exit 4", args: []string{"groups", "remove", "Ledger", "--category", "payment", "--yes"}, tm: inPipe, code: cmdutil.ExitConflict,
			stderrHas: []string{"Ledger is not registered for payment (the registered groups of payment are"}, wantRecord: admin.OutcomeNotRegistered,
		},
		{
			name: "unknown: exit 4", args: []string{"groups", "remove", "Nobody", "--category", "order", "--yes"}, tm: inPipe, code: cmdutil.ExitConflict,
			stderrHas: []string{"the registered groups of order are Mailer, Projector"}, wantRecord: admin.OutcomeNotRegistered,
		},
		{
			name: "a lease taken under the script: exit 4", args: with("--expect-read", "83", "--yes"), tm: inPipe, code: cmdutil.ExitConflict,
			fa:         &fakeAdmin{groups: sampleGroups(), removeErr: &engine.GroupLiveError{Group: "Mailer", Category: "order", LeaseKey: "{order:a}:__lease__:Mailer", Lease: "w1.1:9"}},
			stderrHas:  []string{"holds a live lease in order"},
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
		{
			name: "Redis Cluster cannot run the script: exit 1 with the engine's reason", args: with("--expect-read", "83", "--yes"), tm: inPipe, code: cmdutil.ExitFailure,
			fa:         &fakeAdmin{groups: sampleGroups(), removeErr: fmt.Errorf("%w: retiring a consumer group checks and deletes every partition of the category in one script, which Redis Cluster cannot run across slots", engine.ErrNotSupported)},
			stderrHas:  []string{"engine: not supported by this broker: retiring a consumer group", "which Redis Cluster cannot run across slots"},
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
		},
		{
			name: "the connection fails during the script", args: with("--expect-read", "83", "--yes"), tm: inPipe, code: cmdutil.ExitFailure,
			fa:         &fakeAdmin{groups: sampleGroups(), removeErr: fmt.Errorf("%w: connection reset", engine.ErrRedisUnavailable)},
			stderrHas:  []string{"it may or may not have been applied; check with 'seqctl groups list --category order'"},
			wantRemove: []admin.GroupRemoval{{Category: "order", Group: "Mailer", ExpectRead: &read83}},
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
	oldConfig, newConfig := writeDomain(t, "ops-mailer"), writeDomain(t, "ops")
	_, dom := loadDomain(t, oldConfig)
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
	orders := opsEngine{dom: dom, broker: engine.NewRedisBroker(rdb)}
	const perKey = 300 // above the trim period of 256 handled events
	for seq := 0; seq < perKey; seq++ {
		for _, k := range []string{"A", "B"} {
			orders.publish(t, opsPayload{Client: k, Seq: seq})
		}
	}
	testkit.WaitFor(t, 20*time.Second, "Projector handled everything", func() bool { return handled.Load() == 2*perKey })
	time.Sleep(3 * time.Second) // three reap periods
	cli := func(config string, args ...string) result { return cliAt(t, srv.URL, config, args...) }
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
	checkResult(t, r, cmdutil.ExitConflict, "", nil, []string{"the config declares Mailer on order"})
	r = cli("", "groups", "remove", "Projector", "--category", "order", "--yes")
	checkResult(t, r, cmdutil.ExitConflict, "", nil, []string{"Projector holds 2 live leases in order"})
	r = cli(newConfig, "groups", "remove", "Mailer", "--category", "order", "--expect-read", "5", "--yes")
	checkResult(t, r, cmdutil.ExitConflict, "", nil, []string{"has read 0 entries of order, expected 5"})
	r = cli(newConfig, "groups", "remove", "Mailer", "--category", "order", "--expect-read", "0", "--dry-run")
	checkResult(t, r, 0, "", []string{"Nothing changed (--dry-run)"}, nil)
	if !rdb.SIsMember(ctx, keyspace.SingleNode.GroupRegistry("order"), "Mailer").Val() {
		t.Fatal("the refusals or the dry run removed Mailer")
	}
	r = cli(newConfig, "groups", "remove", "Mailer", "--category", "order", "--expect-read", "0", "--yes", "--reason", "retired")
	checkResult(t, r, 0, "", []string{"Removed Mailer from order"}, nil)

	removed := time.Now()
	testkit.WaitFor(t, 10*time.Second, "order:A and order:B reaped", func() bool {
		return rdb.Exists(ctx, "order:A", "order:B").Val() == 0 && rdb.SCard(ctx, keyspace.SingleNode.PartitionIndex("order")).Val() == 0
	})
	t.Logf("reaped %v after 'groups remove'", time.Since(removed).Round(10*time.Millisecond))
	for seq := 0; seq < perKey; seq++ {
		orders.publish(t, opsPayload{Client: "C", Seq: seq})
	}
	testkit.WaitFor(t, 20*time.Second, "order:C handled", func() bool { return handled.Load() == 3*perKey })
	testkit.WaitFor(t, 5*time.Second, "order:C trimmed", func() bool { return rdb.XLen(ctx, "order:C").Val() < perKey })
	t.Logf("order:C holds %d of %d entries once handled", rdb.XLen(ctx, "order:C").Val(), perKey)

	var outcomes []string
	for _, a := range auditOf(t, srv.URL) {
		outcomes = append(outcomes, a.Command+" "+a.Handler+" "+a.Outcome)
	}
	want := []string{"groups remove Mailer declared", "groups remove Projector live_lease", "groups remove Mailer read_moved", "groups remove Mailer ok"}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
}
