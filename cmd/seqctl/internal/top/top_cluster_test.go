package top

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
	"github.com/seqctl/seqctl/pkg/tui"
)

// clusterOpsWorld is a 3-master Redis Cluster and a running engine of opsDomain whose
// Projector refuses a poison payload and records every handled seq in "t:log:{key}".
// keys[i] is a partition key served by master i.
type clusterOpsWorld struct {
	cmdtest.OpsEngine
	cl   *redistest.Cluster
	rdb  *redis.ClusterClient
	keys []string
}

func startClusterOpsWorld(t *testing.T) *clusterOpsWorld {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	w := &clusterOpsWorld{cl: cl, rdb: cl.Client(t)}
	w.OpsEngine = cmdtest.StartOpsEngine(t, cmdtest.WriteDomain(t, "ops"), w.rdb, cl.Client(t), w.rdb)
	w.keys = cl.OnEachMaster(t, 3, func(j int) (string, string) {
		k := fmt.Sprintf("client-%d", j)
		return k, keyspace.Cluster.PartitionStream("order", k)
	})
	return w
}

// seqctl top --cluster draws the partitions of every master, the halted one marked, and
// its actions reach the cluster: the dashboard's skip resumes the halted partition.
func TestTopOnCluster(t *testing.T) {
	w := startClusterOpsWorld(t)
	halted := w.keys[1]
	var poison engine.Published
	for _, k := range w.keys {
		for seq := 0; seq < 3; seq++ {
			p := w.Publish(t, cmdtest.OpsPayload{Client: k, Seq: seq, Poison: k == halted && seq == 1})
			if k == halted && seq == 1 {
				poison = p
			}
		}
	}

	// The whole command, as an operator runs it: the dashboard on a pipe.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, inW := io.Pipe()
	defer inW.Close()
	out := &testkit.Buffer{}
	ios := &cmdutil.IOStreams{In: in, Out: out, ErrOut: io.Discard}
	done := make(chan int, 1)
	go func() {
		done <- cmdtest.RunRoot(ctx, &cmdutil.Factory{IOStreams: ios, Build: cmdtest.TestBuild},
			[]string{"top", "--cluster", "--redis-url", w.cl.URL, "--refresh", "200ms"})
	}()
	testkit.WaitFor(t, 20*time.Second, "the dashboard to show every partition and the halted one", func() bool {
		o := out.String()
		for _, k := range w.keys {
			if !strings.Contains(o, k) {
				return false
			}
		}
		return strings.Contains(o, "HALTED")
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("seqctl top exited %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("seqctl top did not return after the context ended")
	}

	// The dashboard's data source over the cluster client: the rows, the head detail and
	// an action.
	src := &Source{Admin: admin.New(w.cl.Client(t), admin.Options{}), Actor: cmdutil.Actor("top")}
	type row struct{ Stream, State, Halted string }
	var want []row
	for _, k := range w.keys {
		r := row{"order:{" + k + "}", tui.StateIdle, ""}
		if k == halted {
			r.State, r.Halted = tui.StateHalted, poison.EntryID
		}
		want = append(want, r)
	}
	byStream := func(x, y row) int { return strings.Compare(x.Stream, y.Stream) }
	slices.SortFunc(want, byStream)
	var snap tui.Snapshot
	var got []row
	testkit.WaitFor(t, 10*time.Second, "the healthy partitions drained", func() bool {
		var err error
		if snap, err = src.Snapshot(context.Background()); err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, p := range snap.Partitions {
			got = append(got, row{p.Stream, p.State, p.HaltedEntryID})
		}
		slices.SortFunc(got, byStream)
		return cmp.Equal(want, got)
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dashboard rows (-want +got):\n%s", diff)
	}
	if len(snap.Instances) != 1 || snap.Instances[0].ID != "w1" || snap.Instances[0].Owned != 3 {
		t.Errorf("instances = %+v, want w1 owning 3 partitions", snap.Instances)
	}
	ref := tui.PartitionRef{Category: "order", Key: halted, Handler: "Projector"}
	d, err := src.Head(context.Background(), ref)
	if err != nil || d.EntryID != poison.EntryID || d.Stream != "order:{"+halted+"}" {
		t.Fatalf("head detail = %+v, %v; want the poison entry on order:{%s}", d, err, halted)
	}
	if err := src.Skip(context.Background(), ref, poison.EntryID); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the halted partition resumed", func() bool {
		return cmp.Equal(w.rdb.LRange(context.Background(), "t:log:"+halted, 0, -1).Val(), []string{"0", "2"})
	})
}
