package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// The group registry ({category}:__groups__) is what trim and reap protect: a lane is
// trimmed only up to the slowest group present on it, and only when every registered
// group is present; a partition is reaped only when every registered group has read and
// acknowledged everything. A handler that is declared but that no running instance
// serves (not deployed yet, scaled to zero, excluded with EngineConfig.Handlers) must
// therefore be registered too, or its events are trimmed and reaped before it reads them.
//
// So every engine registers every consumer group its Domain declares, not only the ones
// it runs, and does so again whenever a session opens: a Redis that lost its data (a
// restart without persistence, a failover to a stale replica) has lost the registry as
// well. Registration only ever adds; a removed handler is retired by an operator with
// RetireGroup (seqctl groups remove), which is what lets trim and reap resume.

// DeclaredGroups returns, per category, the consumer groups the domain declares on it,
// sorted: every event handler on its category and every process manager on each
// category it handles, with or without a Func. Command handlers never read streams and
// are left out. d must be initialized.
func DeclaredGroups(d *Domain) map[string][]string {
	out := map[string][]string{}
	add := func(cat, group string) {
		if cat != "" && !slices.Contains(out[cat], group) {
			out[cat] = append(out[cat], group)
		}
	}
	for _, h := range d.Handlers {
		if h.Kind == CommandHandlerKind {
			continue
		}
		cat := h.PartOf
		if cat == "" && len(h.Handles) > 0 {
			et, _ := d.Event(h.Handles[0])
			cat = et.Category
		}
		add(cat, h.Name)
	}
	for _, pm := range d.ProcessManagers {
		for _, ph := range pm.Handles {
			et, _ := d.Event(ph.Event)
			add(et.Category, pm.Name)
		}
	}
	for _, gs := range out {
		slices.Sort(gs)
	}
	return out
}

// registerGroups adds every consumer group the domain declares to its categories' group
// registries, in one pipelined round trip. It runs at Start and before every session
// opens, so that no lease of a session is ever used while the registry lacks a declared
// group: after a loss of data, the registry is complete again before any trim or reap.
func (e *Engine) registerGroups(ctx context.Context) error {
	declared := DeclaredGroups(e.dom)
	if len(declared) == 0 {
		return nil
	}
	pipe := e.rdb.Pipeline()
	for cat, groups := range declared {
		members := make([]any, len(groups))
		for i, g := range groups {
			members[i] = g
		}
		pipe.SAdd(ctx, e.keys.GroupRegistry(cat), members...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("engine: registering the consumer groups: %w", translateRedisErr(err))
	}
	return nil
}

// Errors of RetireGroup. Nothing was changed when one is returned.
var (
	// ErrGroupNotRegistered: the group is not in the category's registry (never
	// registered, or already retired).
	ErrGroupNotRegistered = errors.New("engine: consumer group not registered for the category")
	// ErrGroupLive: a lease of the group in the category is held by a live session, so
	// the handler is running somewhere (see *GroupLiveError).
	ErrGroupLive = errors.New("engine: consumer group holds a live lease")
	// ErrGroupRead: the group has read a different number of entries than the caller
	// expected: it read something since the caller looked (see *GroupReadError).
	ErrGroupRead = errors.New("engine: consumer group read entries since inspected")
)

// GroupLiveError says which lease shows the group is running.
type GroupLiveError struct {
	Group, Category string
	LeaseKey        string
	Lease           string // "{owner}:{generation}"
}

func (e *GroupLiveError) Error() string {
	return fmt.Sprintf("engine: consumer group %s holds a live lease in %s (%s = %s): it is running; stop it first, nothing was changed",
		e.Group, e.Category, e.LeaseKey, e.Lease)
}

func (e *GroupLiveError) Unwrap() error { return ErrGroupLive }

// GroupReadError says how many entries the group has read, against the expectation.
type GroupReadError struct {
	Group, Category string
	Expected, Read  int64
}

func (e *GroupReadError) Error() string {
	return fmt.Sprintf("engine: consumer group %s has read %d entries of %s, expected %d: it read since you looked; nothing was changed (inspect it again)",
		e.Group, e.Read, e.Category, e.Expected)
}

func (e *GroupReadError) Unwrap() error { return ErrGroupRead }

// GroupRetirement names a consumer group to retire from a category.
type GroupRetirement struct {
	Category string
	Group    string
	// BackfillSuffix is the backfill-lane token ("" for DefaultBackfillSuffix). Backfill
	// lanes are retired whether or not priority lanes are on now.
	BackfillSuffix string
	// ExpectRead, when set, is the number of entries the group has read over the
	// category's streams as the operator inspected it; nothing changes when it differs.
	ExpectRead *int64
	// DryRun checks everything and changes nothing.
	DryRun bool
}

// GroupRetired says what RetireGroup did (or, for a dry run, would do).
type GroupRetired struct {
	// Partitions is the number of partitions in the category's index.
	Partitions int `json:"partitions"`
	// Read is the entries the group had read over the category's streams.
	Read int64 `json:"read"`
	// Destroyed is the number of streams whose consumer group was destroyed.
	Destroyed int `json:"destroyed"`
	// Halts is the number of the group's halt records deleted.
	Halts int `json:"halts"`
}

// retireAttempts bounds the re-reads of a partition index that changes under RetireGroup.
const retireAttempts = 5

// RetireGroup takes a consumer group out of a category's registry and destroys its
// consumer group on every stream of the category (the category stream, each partition's
// primary and backfill lanes), deleting its halt records there, in one compare-and-act
// script: trim and reap stop waiting for it. It refuses, changing nothing, when the group
// is not registered (ErrGroupNotRegistered), when one of its leases in the category is
// held by a live session (*GroupLiveError), or when ExpectRead is set and differs
// (*GroupReadError).
//
// A sequential process manager's leases and halt records belong to a correlation value
// across all its categories; they are checked for liveness but kept. An instance whose
// domain still declares the group registers it again when its next session opens:
// remove the handler from every instance's domain first.
func (b *RedisBroker) RetireGroup(ctx context.Context, r GroupRetirement) (GroupRetired, error) {
	if err := ValidateCategory(r.Category); err != nil {
		return GroupRetired{}, err
	}
	if r.Group == "" {
		return GroupRetired{}, errors.New("engine: the consumer group to retire is required")
	}
	suffix := r.BackfillSuffix
	if suffix == "" {
		suffix = DefaultBackfillSuffix
	}
	expect := ""
	if r.ExpectRead != nil {
		expect = strconv.FormatInt(*r.ExpectRead, 10)
	}
	ks := keyspace.SingleNode
	if b.keys.IsCluster() {
		return GroupRetired{}, fmt.Errorf("%w: retiring a consumer group checks and deletes every partition of the category in one script, which Redis Cluster cannot run across slots; on Redis Cluster, stop the handler and delete the group from each stream with XGROUP DESTROY, then remove it from %s with SREM", ErrNotSupported, ks.GroupRegistry(r.Category))
	}
	for attempt := 0; attempt < retireAttempts; attempt++ {
		members, err := b.rdb.SMembers(ctx, ks.PartitionIndex(r.Category)).Result()
		if err != nil {
			return GroupRetired{}, translateRedisErr(err)
		}
		lanes := []string{ks.CategoryStream(r.Category)}
		leases := []string{ks.LeaseKey(ks.CategoryStream(r.Category), r.Group)}
		halts := []string{ks.HaltKey(ks.CategoryStream(r.Category), r.Group)}
		for _, k := range members {
			if ValidateStreamKey(k, suffix) != nil {
				continue // never written by the publisher
			}
			s := ks.PartitionStream(r.Category, k)
			lanes = append(lanes, s, ks.LaneStream(r.Category, k, suffix))
			leases = append(leases, ks.LeaseKey(s, r.Group), ks.LeaseKey(ks.PMUnit(r.Group, k), r.Group))
			halts = append(halts, ks.HaltKey(s, r.Group))
		}
		res, err := scripts.Retire{
			Registry: ks.GroupRegistry(r.Category), Index: ks.PartitionIndex(r.Category),
			Lanes: lanes, Leases: leases, Halts: halts,
			Group: r.Group, SessionPrefix: ks.SessionPrefix(), ExpectRead: expect,
			Apply: !r.DryRun, Members: members,
		}.Run(ctx, b.rdb)
		if err != nil {
			return GroupRetired{}, translateRedisErr(err)
		}
		switch res.Code {
		case scripts.Retired:
			return GroupRetired{Partitions: len(members), Read: res.Read, Destroyed: int(res.Destroyed), Halts: int(res.HaltsGone)}, nil
		case scripts.RetireUnknown:
			return GroupRetired{}, fmt.Errorf("%w: %s is not in %s", ErrGroupNotRegistered, r.Group, ks.GroupRegistry(r.Category))
		case scripts.RetireIndexMoved:
			continue // a partition was created or reaped meanwhile
		case scripts.RetireLeaseHeld:
			return GroupRetired{}, &GroupLiveError{Group: r.Group, Category: r.Category, LeaseKey: res.LeaseKey, Lease: res.LeaseValue}
		case scripts.RetireReadMoved:
			return GroupRetired{}, &GroupReadError{Group: r.Group, Category: r.Category, Expected: *r.ExpectRead, Read: res.Read}
		}
		return GroupRetired{}, fmt.Errorf("engine: unexpected retire reply %+v", res)
	}
	return GroupRetired{}, fmt.Errorf("engine: the partition index of %s kept changing during %d attempts; try again", r.Category, retireAttempts)
}
