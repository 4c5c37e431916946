package admin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// clusterWorld is a running engine on a 3-master Redis Cluster with one poison partition
// halted on each master (halted[i] is served by master i) and one healthy partition,
// drained.
type clusterWorld struct {
	cl      *redistest.Cluster
	rdb     *redis.ClusterClient
	broker  *engine.RedisBroker
	dom     *engine.Domain
	halted  []string           // partition keys, one per master
	poison  []engine.Published // their poison entries
	healthy string
}

// keysOnEachMaster returns n partition keys ("client-N") whose streams are served by n
// different masters, so a read that reaches one node only misses some of them.
func keysOnEachMaster(tb testing.TB, cl *redistest.Cluster, n int) []string {
	tb.Helper()
	return cl.OnEachMaster(tb, n, func(j int) (string, string) {
		k := fmt.Sprintf("client-%d", j)
		return k, keyspace.Cluster.PartitionStream("order", k)
	})
}

func haltedClusterWorld(t *testing.T) *clusterWorld {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	w := &clusterWorld{cl: cl, rdb: cl.Client(t)}
	w.broker = engine.NewRedisBroker(w.rdb)
	w.dom = orderDomain(t, poisonHandler(cl.Client(t)))
	startEngineOn(t, w.rdb, w.dom, "i1")
	keys := keysOnEachMaster(t, cl, 3)
	w.halted, w.healthy = keys, "healthy"
	for _, k := range w.halted {
		for seq := 0; seq < 3; seq++ {
			p := publish(t, w.broker, w.dom, k, seq, seq == 1)
			if seq == 1 {
				w.poison = append(w.poison, p)
			}
		}
	}
	for seq := 0; seq < 2; seq++ {
		publish(t, w.broker, w.dom, w.healthy, seq, false)
	}
	for _, k := range w.halted {
		waitHalted(t, w.broker, k)
	}
	testkit.WaitFor(t, 10*time.Second, "the healthy partition drained", func() bool { return len(logOf(t, w.rdb, w.healthy)) == 2 })
	return w
}

// stream is a partition's primary stream as Redis Cluster names it.
func clusterStream(key string) string { return "order:{" + key + "}" }

// On Redis Cluster the listing names every partition as the cluster does, finds the
// category through a SCAN of every master, and reads the index hash, the leases, the
// halt records and the DLQ lengths of partitions spread over every master.
func TestClusterListPartitions(t *testing.T) {
	w := haltedClusterWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	type summary struct {
		Stream, State, Halted string
		Owned                 bool
		Backlog               int64
	}
	want := []summary{{clusterStream(w.healthy), "idle", "", true, 0}}
	for i, k := range w.halted {
		want = append(want, summary{clusterStream(k), "halted", w.poison[i].EntryID, true, 2})
	}
	slices.SortFunc(want, func(x, y summary) int { return admin.NaturalCompare(x.Stream, y.Stream) })
	var got []summary
	testkit.WaitFor(t, 5*time.Second, "every partition listed as expected", func() bool {
		all, err := adm.ListPartitions(ctx, admin.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, p := range all {
			got = append(got, summary{p.Stream, string(p.State), p.HaltedEntryID, p.Owner != "", p.Backlog})
			if p.Owner != "" && (p.Generation <= 0 || p.LeaseRemainingMS <= 0 || !strings.HasPrefix(p.Owner, "i1.")) {
				t.Errorf("%s: owner %q generation %d lease %d ms, want i1.N, a generation and a lease", p.Stream, p.Owner, p.Generation, p.LeaseRemainingMS)
			}
		}
		return cmp.Equal(want, got)
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("partitions (-want +got):\n%s", diff)
	}
	halted, err := adm.ListPartitions(ctx, admin.Filter{Halted: true})
	if err != nil || len(halted) != 3 || halted[0].Halt == nil || halted[0].Halt.Attempts != 2 {
		t.Errorf("halted partitions = %+v, %v; want 3 with their halt records", halted, err)
	}
	streams, err := adm.Streams(ctx)
	if err != nil || len(streams) != 4 || !slices.Contains(streams, clusterStream(w.healthy)) {
		t.Errorf("streams = %q, %v; want the 4 partitions in the cluster form", streams, err)
	}
	ins, err := adm.Instances(ctx)
	if err != nil || len(ins) != 1 || !ins[0].Live || ins[0].SessionTTLMS <= 0 {
		t.Errorf("instances = %+v, %v; want i1, live", ins, err)
	}
	gs, err := adm.Groups(ctx, "")
	if err != nil || len(gs) != 1 || gs[0].Category != "order" || gs[0].Name != "Projector" {
		t.Errorf("groups = %+v, %v; want Projector of order", gs, err)
	}
}

// Both forms of a partition's name, "order:client-1" and "order:{client-1}", name the
// same partition on Redis Cluster, and what is printed is the cluster's name.
func TestClusterHeadInspectAndNames(t *testing.T) {
	w := haltedClusterWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	k := w.halted[1]
	for _, name := range []string{"order:" + k, clusterStream(k), clusterStream(k) + ":dlq"} {
		p, err := adm.ParseStream(name)
		if err != nil || p.Category != "order" || p.Key != k || p.Stream() != clusterStream(k) {
			t.Errorf("ParseStream(%q) = %+v (%q), %v; want order/%s named %s", name, p, p.Stream(), err, k, clusterStream(k))
		}
		h, err := adm.Head(ctx, name, "Projector")
		if err != nil {
			t.Fatalf("head of %s: %v", name, err)
		}
		if h.ID != w.poison[1].EntryID || h.Status != admin.HeadHalted || h.Stream != clusterStream(k) || h.Lane != clusterStream(k) {
			t.Errorf("head of %s = %+v, want the halted poison entry of %s", name, h, clusterStream(k))
		}
	}
	in, err := adm.Inspect(ctx, "order:"+k, "")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Indexed || in.Stream != clusterStream(k) || in.DLQStream != clusterStream(k)+":dlq" || len(in.Lanes) != 1 ||
		in.Lanes[0].Length != 3 || len(in.Handlers) != 1 {
		t.Fatalf("inspection = %+v", in)
	}
	if hs := in.Handlers[0]; hs.State != admin.StateHalted || hs.Unit != clusterStream(k) || hs.Lease == nil || !hs.Lease.Live ||
		hs.Head == nil || hs.Head.ID != w.poison[1].EntryID {
		t.Errorf("Projector state = %+v", hs)
	}
	var nf *admin.NotFoundError
	if _, err := adm.Head(ctx, "order:nobody", "Projector"); !errors.As(err, &nf) || nf.What != "partition" || nf.Name != clusterStream("nobody") {
		t.Errorf("head of an unknown partition: err = %v, want partition %s not found", err, clusterStream("nobody"))
	}
}

// Skip one halted head, move two others to their DLQs (on two other masters), list the
// DLQs, replay one: every partition resumes and the replayed event is handled.
func TestClusterActionsAndDLQ(t *testing.T) {
	w := haltedClusterWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	actor := admin.Actor{User: "ops", Host: "laptop", Command: "head"}
	skipped, moved := w.halted[0], w.halted[1:]

	res, err := adm.Act(ctx, admin.Action{Kind: admin.ActionSkip, Stream: "order:" + skipped, Handler: "Projector", ExpectID: w.poison[0].EntryID, Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stream != clusterStream(skipped) || res.Outcome != admin.OutcomeOK {
		t.Errorf("skip result = %+v", res)
	}
	for i, k := range moved {
		res, err := adm.Act(ctx, admin.Action{Kind: admin.ActionDLQ, Stream: clusterStream(k), Handler: "Projector", ExpectID: w.poison[i+1].EntryID, Reason: "bad", Actor: actor})
		if err != nil {
			t.Fatal(err)
		}
		if res.DLQStream != clusterStream(k)+":dlq" || res.Outcome != admin.OutcomeOK {
			t.Errorf("dlq result = %+v", res)
		}
	}
	for _, k := range w.halted {
		testkit.WaitFor(t, 10*time.Second, "order:"+k+" resumed", func() bool { return cmp.Equal(logOf(t, w.rdb, k), []string{"0", "2"}) })
	}

	dlqs, err := adm.DLQs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dlqs {
		names = append(names, d.DLQStream)
		if d.Length != 1 || d.Stream != strings.TrimSuffix(d.DLQStream, ":dlq") {
			t.Errorf("DLQ summary = %+v, want one entry", d)
		}
	}
	wantNames := []string{clusterStream(moved[0]) + ":dlq", clusterStream(moved[1]) + ":dlq"}
	slices.SortFunc(wantNames, admin.NaturalCompare)
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("DLQs, from every master (-want +got):\n%s", diff)
	}

	k := moved[0]
	entries, err := adm.DLQ(ctx, "order:"+k)
	if err != nil || len(entries) != 1 || entries[0].Envelope.ID != w.poison[1].EventID || entries[0].Lane != clusterStream(k) {
		t.Fatalf("DLQ of order:%s = %+v, %v; want the poison entry, from %s", k, entries, err, clusterStream(k))
	}
	plan, err := adm.PlanReplay(ctx, clusterStream(k), entries[0].ID)
	if err != nil || plan.Stream != clusterStream(k) {
		t.Fatalf("replay plan = %+v, %v; want the primary lane %s", plan, err, clusterStream(k))
	}
	if err := w.rdb.Set(ctx, "t:cured:"+k, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	rr, err := adm.Replay(ctx, "order:"+k, entries[0].ID, actor)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Stream != clusterStream(k) {
		t.Errorf("replay result = %+v, want it published to %s", rr, clusterStream(k))
	}
	testkit.WaitFor(t, 10*time.Second, "the replayed event handled", func() bool { return cmp.Equal(logOf(t, w.rdb, k), []string{"0", "2", "1"}) })
	if left, err := adm.DLQ(ctx, clusterStream(k)); err != nil || len(left) != 0 {
		t.Errorf("DLQ after the replay = %+v, %v; want empty", left, err)
	}

	// The audit log, read with either form of a name.
	for _, name := range []string{"order:" + skipped, clusterStream(skipped)} {
		recs, err := adm.AuditEntries(ctx, admin.AuditQuery{Stream: name})
		if err != nil || len(recs) != 1 || recs[0].EntryID != w.poison[0].EntryID {
			t.Errorf("audit of %s = %+v, %v; want the skip", name, recs, err)
		}
	}
}
