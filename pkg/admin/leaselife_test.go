package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// leaseCase is one state of a partition's lease in Redis.
type leaseCase struct {
	name      string
	value     string        // the lease value ("" is "i9.dead:7", the default owner)
	leasePX   time.Duration // the lease's own expiry (Redis Cluster: set while busy); 0 none (one node; dormant on Redis Cluster)
	session   time.Duration // the owner's session key: its expiry, -1 without one, 0 missing
	want      bool          // the lease is live
	onCluster bool          // the case exists on Redis Cluster only
}

const leaseOwner = "i9.dead"

var leaseCases = []leaseCase{
	{name: "a live session", session: 15 * time.Second, want: true},
	{name: "a session without an expiry", session: -1, want: true},
	{name: "the session is gone", want: false},
	{name: "not a lease value", value: "garbage", session: 15 * time.Second, want: false},
	// On Redis Cluster a lease with an expiry is live until it expires, whatever its
	// owner's session: the owner may be running an event (acquire.lua).
	{name: "an expiry, the session gone", leasePX: 15 * time.Second, want: true, onCluster: true},
	{name: "an expiry, a live session", leasePX: 15 * time.Second, session: 15 * time.Second, want: true, onCluster: true},
	{name: "an expiry sooner than the session's", leasePX: 5 * time.Second, session: 15 * time.Second, want: true, onCluster: true},
	// A dormant lease (no expiry) lives as long as its owner's session.
	{name: "dormant, a live session", session: 15 * time.Second, want: true, onCluster: true},
	{name: "dormant, the session gone", want: false, onCluster: true},
}

// Every admin view (partitions list, partitions inspect, groups list) calls a lease live
// exactly when the engine does: when acquire.lua refuses it to another instance, which
// found the owner's session gone (a discovery pass names such owners on Redis Cluster).
func TestLeaseLivenessAgrees(t *testing.T) {
	t.Run("one node", func(t *testing.T) {
		testLeaseLiveness(t, redistest.Start(t).Client(t), false)
	})
	t.Run("cluster", func(t *testing.T) {
		testLeaseLiveness(t, redistest.StartCluster(t, 3).Client(t), true)
	})
}

func testLeaseLiveness(t *testing.T, rdb redis.UniversalClient, cluster bool) {
	ctx := context.Background()
	k := keyspace.For(rdb)
	adm := admin.New(rdb, admin.Options{})
	// The instance that would take the lease: its own session is live.
	const caller = "i8.alive"
	for i, tc := range leaseCases {
		if tc.onCluster && !cluster {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			key, group := fmt.Sprintf("client-%d", i), fmt.Sprintf("G%d", i)
			stream := k.PartitionStream("order", key)
			lease := k.LeaseKey(stream, group)
			value := tc.value
			if value == "" {
				value = leaseOwner + ":7"
			}
			must(t, rdb.SAdd(ctx, k.GroupRegistry("order"), group).Err())
			if cluster {
				must(t, rdb.HSet(ctx, k.PartitionIndex("order"), key, keyspace.IndexValue("1-0", "r")).Err())
			} else {
				must(t, rdb.SAdd(ctx, k.PartitionIndex("order"), key).Err())
			}
			must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "1-0", Values: []any{"id", "e-1", "type", "OrderPlaced"}}).Err())
			must(t, rdb.Set(ctx, lease, value, tc.leasePX).Err())
			must(t, rdb.Del(ctx, k.SessionKey(leaseOwner)).Err())
			switch {
			case tc.session > 0:
				must(t, rdb.Set(ctx, k.SessionKey(leaseOwner), "i9", tc.session).Err())
			case tc.session < 0:
				must(t, rdb.Set(ctx, k.SessionKey(leaseOwner), "i9", 0).Err())
			}
			must(t, rdb.Set(ctx, k.SessionKey(caller), "i8", 15*time.Second).Err())

			var listed string
			var listedMS, inspectedMS int64
			parts, err := adm.ListPartitions(ctx, admin.Filter{Category: "order", Handler: group})
			must(t, err)
			for _, p := range parts {
				if p.Key == key {
					listed, listedMS = p.Owner, p.LeaseRemainingMS
				}
			}
			in, err := adm.Inspect(ctx, stream, group)
			must(t, err)
			inspected := len(in.Handlers) == 1 && in.Handlers[0].Lease != nil && in.Handlers[0].Lease.Live
			if inspected {
				inspectedMS = in.Handlers[0].Lease.RemainingMS
			}
			groups, err := adm.Groups(ctx, "order")
			must(t, err)
			liveLeases := -1
			for _, g := range groups {
				if g.Name == group {
					liveLeases = g.LiveLeases
				}
			}
			held := engineHolds(t, rdb, k, stream, group, caller, tc.session == 0)

			views := fmt.Sprintf("partitions list owner %q, inspect live %v, groups live leases %d, the engine (acquire.lua) holds it %v",
				listed, inspected, liveLeases, held)
			if held != tc.want || (listed != "") != tc.want || inspected != tc.want || (liveLeases == 1) != tc.want {
				t.Errorf("lease %q (expiry %v, session %v): %s; want live = %v in every view", value, tc.leasePX, tc.session, views, tc.want)
			}
			// A live lease lives, without a renewal, until its own expiry on Redis
			// Cluster, else as long as its owner's session (0: no expiry bounds it).
			bound := max(tc.session, 0)
			if cluster && tc.leasePX > 0 {
				bound = tc.leasePX
			}
			for _, ms := range []int64{listedMS, inspectedMS} {
				if got := time.Duration(ms) * time.Millisecond; tc.want && (got > bound || got < bound-5*time.Second || (bound == 0) != (got == 0)) {
					t.Errorf("lease %q (expiry %v, session %v): remaining %v in partitions list, %v in inspect; want about %v",
						value, tc.leasePX, tc.session, time.Duration(listedMS)*time.Millisecond, time.Duration(inspectedMS)*time.Millisecond, bound)
					break
				}
			}
		})
	}
}

// engineHolds reports whether acquire.lua refuses the lease to caller (it is live), as a
// discovery pass calls it; ownerGone names the owner whose session the pass found gone.
// A lease that is not live is taken.
func engineHolds(t *testing.T, rdb redis.UniversalClient, k keyspace.Keys, stream, group, caller string, ownerGone bool) bool {
	t.Helper()
	lease := k.LeaseKey(stream, group)
	u := scripts.AcquireUnit{Lease: lease, Generation: k.GenerationKey(stream, group), Live: k.SessionKey(caller), Lanes: []string{stream}}
	c := scripts.AcquireMany{Owner: caller, SessionPrefix: k.SessionPrefix()}
	if k.IsCluster() {
		u.Live, c.LeasePX = lease, 15000
		if ownerGone {
			c.DeadOwners = []string{leaseOwner}
		}
	}
	c.Units = []scripts.AcquireUnit{u}
	cmds, err := scripts.RunPipelined(context.Background(), rdb, 1, func(pipe redis.Pipeliner, _ int) *redis.Cmd {
		return c.EvalSha(context.Background(), pipe)
	})
	must(t, err)
	rs, err := scripts.ParseAcquireMany(cmds[0])
	must(t, err)
	if len(rs) != 1 {
		t.Fatalf("%d replies for one unit", len(rs))
	}
	return rs[0].Code == scripts.HeldByOther
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
