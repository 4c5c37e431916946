package engine

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// startWorker indexes a worker's first lane under the unit's id itself (one string for
// both): laneKey of a unit's name is its id, for every kind of unit.
func TestUnitIDIsLaneKeyOfItsName(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used
	defer rdb.Close()
	nop := func(context.Context, Event) error { return nil }
	for _, d := range []*Domain{twoHandlerDomain(t, nop), pmDomain(t, nop), testDomain(t, nop, func(d *Domain) {
		d.AddHandler(Handler{Name: "Audit", Kind: EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"}, Func: nop})
	})} {
		e, err := New(EngineConfig{Domain: d, Client: rdb, InstanceID: "i"})
		if err != nil {
			t.Fatal(err)
		}
		for _, keys := range []keyspace.Keys{keyspace.SingleNode, keyspace.Cluster} {
			e.keys = keys
			for _, s := range e.subs {
				u := e.unitFor(s, "A")
				if u.id() != laneKey(s.group, u.name) {
					t.Errorf("cluster %v: unit id %q, laneKey of its name %q", keys.IsCluster(), u.id(), laneKey(s.group, u.name))
				}
			}
		}
	}
}
