package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// linesWith returns the lines of a log that contain substr.
func linesWith(log, substr string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// With min_replicas = 1, one discovery pass that takes three leases waits for the
// replica once (WAIT counted on the primary), the grants are on the replica before any
// event is handled, and every event is handled.
func TestReplicaWaitAtLeaseTaking(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	prc, rrc := primary.Client(t), replica.Client(t)
	ctx := context.Background()
	b := NewRedisBroker(prc)
	d := sinkDomain(t, primary.Client(t), "i1", nil)
	keys := []string{"A", "B", "C"}
	for _, k := range keys {
		publish(t, b, d, k, 1, false)
	}
	before := redistest.CommandCalls(t, prc, "wait")
	startEngineWith(t, primary, d, "i1", func(c *EngineConfig) { c.MinReplicas = 1 })
	testkit.WaitFor(t, 5*time.Second, "every key handled", func() bool {
		for _, k := range keys {
			if len(logOf(t, prc, k)) != 1 {
				return false
			}
		}
		return true
	})
	waits := redistest.CommandCalls(t, prc, "wait") - before
	t.Logf("WAIT calls on the primary for taking %d leases: %d", len(keys), waits)
	if waits != 1 {
		t.Errorf("WAIT calls = %d, want 1 (one per discovery pass that took leases)", waits)
	}
	for _, k := range keys {
		lk := keyspace.SingleNode.LeaseKey(keyspace.SingleNode.PartitionStream("order", k), "Projector")
		if p, r := prc.Get(ctx, lk).Val(), rrc.Get(ctx, lk).Val(); p == "" || p != r {
			t.Errorf("lease %s: primary %q, replica %q; want the grant replicated", lk, p, r)
		}
	}
}

// With min_replicas = 0 (the default) nothing waits: no WAIT at lease taking nor after an
// operator action, even with a replica attached.
func TestReplicaNoWaitByDefault(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	prc := primary.Client(t)
	ctx := context.Background()
	b := NewRedisBroker(prc)
	d := sinkDomain(t, primary.Client(t), "i1", func(d *Domain) { d.Handlers[0].MaxRetries = 1 })
	publish(t, b, d, "A", 1, false)
	poison := publish(t, b, d, "B", 1, true)
	before := redistest.CommandCalls(t, prc, "wait")
	startEngine(t, primary, d, "i1", time.Second)
	ref := HeadRef{Group: "Projector", Category: "order", Key: "B"}
	testkit.WaitFor(t, 5*time.Second, "B halted", func() bool { h, _ := b.Halt(ctx, ref); return h != nil })
	if err := b.Skip(ctx, ref, poison.EntryID, false); err != nil {
		t.Fatal(err)
	}
	if n := redistest.CommandCalls(t, prc, "wait") - before; n != 0 {
		t.Errorf("WAIT calls = %d with min_replicas = 0, want none", n)
	}
}

// With the replica stopped, leases taken under min_replicas = 1 are given back without
// being worked, with one warning per discovery pass (not per partition); once the replica
// is back, the partitions are taken and their events handled.
func TestReplicaShortfallAtLeaseTaking(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	prc := primary.Client(t)
	b := NewRedisBroker(prc)
	d := sinkDomain(t, primary.Client(t), "i1", nil)
	keys := []string{"A", "B", "C"}
	for _, k := range keys {
		publish(t, b, d, k, 1, false)
	}
	replica.Stop()
	var logs testkit.Buffer
	e := startEngineWith(t, primary, d, "i1", func(c *EngineConfig) {
		c.MinReplicas = 1
		c.ReplicaTimeout = 200 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	time.Sleep(1500 * time.Millisecond)
	for _, k := range keys {
		if got := logOf(t, prc, k); len(got) != 0 {
			t.Errorf("key %s handled %v while its lease grant was not replicated", k, got)
		}
	}
	if owned := e.Owned(); len(owned) != 0 {
		t.Errorf("owned %v while the replica is down, want none", owned)
	}
	warns := linesWith(logs.String(), "not replicated")
	t.Logf("%d shortfall warnings in 1.5 s; first: %s", len(warns), warns[0])
	if len(warns) == 0 || len(warns) > 10 {
		t.Fatalf("%d shortfall warnings, want one per pass (1.5 s / 200 ms timeout: at most about 7)", len(warns))
	}
	for _, w := range warns {
		if !strings.Contains(w, "leases=3") || !strings.Contains(w, "min_replicas=1") || !strings.Contains(w, "0 of the 1 required replicas") {
			t.Errorf("warning %q: want the three leases of the pass, the requirement and the count in one line", w)
		}
	}

	replica.StartAgain()
	replica.WaitLinkUp(t)
	testkit.WaitFor(t, 5*time.Second, "every key handled after the replica came back", func() bool {
		for _, k := range keys {
			if len(logOf(t, prc, k)) != 1 {
				return false
			}
		}
		return true
	})
}

// With min_replicas = 1, every operator action (retry, move to DLQ, DLQ replay, skip)
// waits for the replica once; with the replica stopped, an action is done on the primary
// and returns a *ReplicaShortfallError saying it may be lost.
func TestReplicaWaitAfterOperatorActions(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	prc := primary.Client(t)
	ctx := context.Background()
	plain := NewRedisBroker(prc)
	b := plain.WithReplicas(1, time.Second)
	d := sinkDomain(t, primary.Client(t), "i1", func(d *Domain) { d.Handlers[0].MaxRetries = 1 })
	startEngine(t, primary, d, "i1", time.Second) // min_replicas 0: the engine itself never waits
	ref := HeadRef{Group: "Projector", Category: "order", Key: "A"}
	haltedOn := func() string {
		t.Helper()
		var h *HaltRecord
		testkit.WaitFor(t, 5*time.Second, "A halted", func() bool { h, _ = b.Halt(ctx, ref); return h != nil })
		return h.EntryID
	}
	waits := func() int64 { return redistest.CommandCalls(t, prc, "wait") }
	publish(t, plain, d, "A", 1, true)

	step := func(name string, act func(head string) error) {
		t.Helper()
		head := haltedOn()
		before := waits()
		if err := act(head); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := waits() - before
		t.Logf("%s: %d WAIT call(s)", name, n)
		if n != 1 {
			t.Errorf("%s: %d WAIT calls, want 1", name, n)
		}
	}
	step("retry", func(head string) error { return b.Retry(ctx, ref, head) })
	step("move to DLQ", func(head string) error { return b.MoveToDLQ(ctx, ref, head, false, "moved_by", "test") })
	before := waits()
	dl := prc.XRange(ctx, keyspace.SingleNode.DLQStream("order", "A"), "-", "+").Val()
	if len(dl) != 1 {
		t.Fatalf("DLQ = %v", dl)
	}
	if _, err := b.ReplayDLQ(ctx, keyspace.SingleNode.DLQStream("order", "A"), dl[0].ID, Route{Category: "order", Key: "A", Stream: "order:A", Index: keyspace.SingleNode.PartitionIndex("order")}); err != nil {
		t.Fatal(err)
	}
	if n := waits() - before; n != 1 {
		t.Errorf("DLQ replay: %d WAIT calls, want 1", n)
	} else {
		t.Logf("DLQ replay: %d WAIT call(s)", n)
	}
	step("skip", func(head string) error { return b.Skip(ctx, ref, head, false) })

	// The replica goes away: the next skip is done, and says it may be lost.
	publish(t, plain, d, "A", 2, true)
	head := haltedOn()
	replica.Stop()
	err := b.Skip(ctx, ref, head, false)
	var se *ReplicaShortfallError
	if !errors.As(err, &se) || !errors.Is(err, ErrReplicaShortfall) {
		t.Fatalf("skip with the replica down: err = %v, want a *ReplicaShortfallError", err)
	}
	if se.Want != 1 || se.Got != 0 || se.Write != "skip" || !strings.Contains(err.Error(), "may lose it") {
		t.Errorf("shortfall = %+v (%q)", se, err)
	}
	t.Logf("skip with the replica down: %v", err)
	if h, _ := b.Halt(ctx, ref); h != nil && h.EntryID == head {
		t.Errorf("the skip was not done on the primary: still halted on %s", head)
	}
}

// On Redis Cluster a WAIT would cover one master's writes only: min_replicas is refused
// rather than pretended.
func TestReplicaWaitRefusedOnCluster(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer c.Close()
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	_, err := New(EngineConfig{Domain: d, Client: c, InstanceID: "i1", MinReplicas: 1})
	if err == nil || !strings.Contains(err.Error(), "min_replicas is not available on Redis Cluster") {
		t.Fatalf("New with MinReplicas on a cluster client: err = %v", err)
	}
	if err := WaitReplicas(context.Background(), c, "test", 1, time.Second); err == nil || !strings.Contains(err.Error(), "set min_replicas = 0") {
		t.Fatalf("WaitReplicas on a cluster client: err = %v", err)
	}
}

// A broker with min_replicas waits for the replicas after a publish too: one WAIT per
// Publish call, or one for many events (SkipReplicaWait on each, then AwaitReplicas).
// With the replica gone, the publish is done on the primary and says it may be lost.
func TestReplicaWaitAfterPublish(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	prc := primary.Client(t)
	ctx := context.Background()
	b := NewRedisBroker(prc).WithReplicas(1, 300*time.Millisecond)
	d := testDomain(t, nil, nil)
	waits := func() int64 { return redistest.CommandCalls(t, prc, "wait") }
	data := []byte(`{"client_id":"A","seq":1}`)

	before := waits()
	if _, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := waits() - before; n != 1 {
		t.Errorf("one publish: %d WAIT calls, want 1", n)
	}
	before = waits()
	for i := 0; i < 10; i++ {
		if _, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{SkipReplicaWait: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AwaitReplicas(ctx, "publish of 10 events"); err != nil {
		t.Fatal(err)
	}
	if n := waits() - before; n != 1 {
		t.Errorf("ten publishes and one AwaitReplicas: %d WAIT calls, want 1", n)
	}

	replica.Stop()
	pub, err := b.Publish(ctx, d, "OrderPlaced", data, PublishOptions{})
	var se *ReplicaShortfallError
	if !errors.As(err, &se) || se.Write != "publish" || !strings.Contains(err.Error(), "may lose it") {
		t.Fatalf("publish with the replica down: err = %v, want a *ReplicaShortfallError for the publish", err)
	}
	if pub.EntryID == "" || prc.XLen(ctx, pub.Stream).Val() != 12 {
		t.Errorf("the publish with the replica down was not done on the primary: %+v", pub)
	}
}
