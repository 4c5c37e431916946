// Package admin is the operator's view of a live seqctl deployment: it lists partitions
// with their owner, generation, lease, lag, pending entries, pause, limit and halt state,
// inspects a partition and its head entry, resolves a halted head (skip, move to the DLQ,
// retry), pauses and resumes a key, sets and clears the overrides of limit keys, lists,
// replays and purges DLQ entries, lists the consumer groups each category waits for and
// removes a retired one, lists the running instances, and keeps the audit log of every
// operator action.
//
// It reads and writes Redis only, through the key names and record codecs of package
// keyspace, and returns plain structs with JSON tags. Every write is a compare-and-act
// done by an engine operation (engine.RedisBroker's Skip, MoveToDLQ, Retry, Pause,
// Resume, SetLimit, ClearLimit and RetireGroup): it names what the operator inspected
// (the head entry, a group's read figure) and changes nothing when that has changed.
// Redis errors are translated at this boundary: a network failure matches
// engine.ErrRedisUnavailable.
//
// An Admin works on one Redis node (or a primary) or on a Redis Cluster, as the engine
// does: every key name comes from the deployment's layout (keyspace.Keys), reads that
// span partitions are pipelined (the cluster client splits a pipeline per node) and never
// one command over keys of different slots, and SCANs cover every master. It is safe for
// concurrent use; it starts no goroutines.
//
// Files:
//
//   - admin.go: New, Options, partition names (ParseStream), the handlers of a
//     partition, error translation; scan.go: SCAN over every master.
//   - Reading: partitions.go (the Partition row, its State, Filter and sorting),
//     listing.go (ListPartitions, Streams), inspect.go (Inspect), head.go (Head: the
//     head entry of a partition for a handler), lease.go (a lease and whether it is live,
//     by keyspace.LeaseLife), groups.go (Groups, RemoveGroup), instances.go (Instances).
//   - Acting on one head: actions.go (Act: skip, move to the DLQ, retry, each audited);
//     on many halted heads: heads.go (HeadRetries: retry each, audited, counted).
//   - Pausing a key: pause.go (Pause, Resume, PauseOf).
//   - Limit keys: limits.go (Limit, Limits: caps, overrides and use per value),
//     limitset.go (SetLimit, ClearLimit).
//   - DLQs: dlq.go (DLQ, PlanReplay, Replay), dlqs.go (DLQs, PurgeDLQ).
//   - audit.go: the audit log (Record, Audit, AuditEntries) and the outcome of an action.
package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Options configure an Admin. The zero value discovers everything from Redis.
type Options struct {
	// Topology lists the categories and their consumer groups. nil means discover them:
	// categories from the *:__partitions__ index keys (SCAN), groups from each category's
	// GroupRegistry; a group is then taken for a sequential process manager on a
	// correlation value when a lease or a halt record exists under its process-manager
	// unit (engine.PMUnit) and not under the partition stream. A process manager that
	// neither holds nor halted a value reads like an unowned plain partition, which is
	// what it is until an instance takes the value.
	Topology *Topology
	// BackfillSuffix is the backfill-lane token (default engine.DefaultBackfillSuffix).
	BackfillSuffix string
	// Lanes says whether priority lanes are on, so that backfill lanes are read: LanesOn
	// (from a config with lanes enabled), LanesOff (from a config without), or LanesProbe
	// (the zero value: look for a backfill lane and read it when it exists).
	Lanes LaneMode
	// LanesThreshold is the priority below which an event belongs to the backfill lane;
	// used to choose the lane a DLQ entry without halt metadata is replayed to.
	LanesThreshold int
	// Declared lists, per category, the consumer groups the domain declares
	// (engine.DeclaredGroups); nil without a config. Groups shows it beside the registry,
	// and RemoveGroup refuses to retire a group it still holds.
	Declared map[string][]string
	// Now returns the local time, for audit records (default time.Now). Ages and TTLs
	// are computed from Redis TIME, never from the local clock.
	Now func() time.Time
	// MinReplicas is how many Redis replicas must acknowledge each action (skip, move to
	// DLQ, retry, DLQ replay) before it is reported done ([broker] min_replicas; default 0:
	// no wait). On a shortfall the action is done on the primary, the call returns an
	// error matching engine.ErrReplicaShortfall (it may be lost on failover), and the
	// audit outcome is OutcomeNotReplicated.
	MinReplicas int
	// ReplicaTimeout bounds that wait ([broker] replica_timeout_ms; default
	// engine.DefaultReplicaTimeout).
	ReplicaTimeout time.Duration
	// Limits is the limit key of every handler the domain declares with one (limit_by),
	// by handler; nil without a config. The limit commands take a handler's domain caps
	// from it and refuse a handler without one (see SetLimit).
	Limits map[string]engine.HandlerLimit
}

// LaneMode says whether backfill lanes are read.
type LaneMode int

const (
	// LanesProbe reads a partition's backfill lane when it exists.
	LanesProbe LaneMode = iota
	// LanesOn reads backfill lanes (priority lanes enabled in the config).
	LanesOn
	// LanesOff ignores backfill lanes (priority lanes disabled in the config).
	LanesOff
)

// Topology is what a config says about the consumers: every partitioned category and the
// consumer groups reading it.
type Topology struct {
	Categories []CategoryTopology `json:"categories"`
}

// CategoryTopology is one partitioned category and its consumer groups.
type CategoryTopology struct {
	Name   string          `json:"name"`
	Groups []GroupTopology `json:"groups"`
}

// GroupTopology is one consumer group of a category.
type GroupTopology struct {
	// Name is the handler or process manager name (the consumer group).
	Name string `json:"name"`
	// ProcessManager is set for a sequential process manager: its lease and halt record
	// belong to a correlation value (engine.PMUnit) across all its categories.
	ProcessManager bool `json:"process_manager"`
}

// Admin runs operator operations over a Redis client the caller owns.
type Admin struct {
	rdb    redis.UniversalClient
	keys   keyspace.Keys // the deployment's key layout, from the client (engine.KeysFor)
	broker *engine.RedisBroker
	opts   Options

	whoMu  sync.Mutex
	whoami string // the ACL user, once known; guarded by whoMu
}

// New returns an Admin over rdb. The caller owns rdb and closes it.
func New(rdb redis.UniversalClient, opts Options) *Admin {
	if opts.BackfillSuffix == "" {
		opts.BackfillSuffix = engine.DefaultBackfillSuffix
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Admin{rdb: rdb, keys: keyspace.For(rdb), broker: engine.NewRedisBroker(rdb).WithReplicas(opts.MinReplicas, opts.ReplicaTimeout), opts: opts}
}

// FromConfig derives Options from a domain.toml: the partitioned event categories with
// their handlers and process managers, the backfill suffix and whether lanes are on. A
// process manager is sequential (one lease per correlation value) when it declares
// sequential_by and every category it handles is partitioned, as the engine decides.
func FromConfig(cfg *config.Config) (Options, error) {
	dom, err := cfg.InitDomain()
	if err != nil {
		return Options{}, err
	}
	opts := Options{
		BackfillSuffix: cfg.Server.PriorityLanes.BackfillSuffix,
		Lanes:          LanesOff,
		LanesThreshold: cfg.Server.PriorityLanes.Threshold,
		Topology:       &Topology{},
		Declared:       engine.DeclaredGroups(dom),
		MinReplicas:    cfg.Broker.MinReplicas,
		ReplicaTimeout: cfg.Broker.ReplicaTimeout,
		Limits:         map[string]engine.HandlerLimit{},
	}
	for _, h := range cfg.Handlers {
		if h.Limit.By != "" {
			opts.Limits[h.Name] = h.Limit
		}
	}
	if cfg.Server.PriorityLanes.Enabled {
		opts.Lanes = LanesOn
	}
	category := map[string]string{}
	for _, e := range cfg.Events {
		category[e.Name] = e.Category
	}
	groups := map[string][]GroupTopology{}
	var order []string
	add := func(cat string, g GroupTopology) {
		if _, part := dom.PartitionField(cat); !part {
			return
		}
		if _, seen := groups[cat]; !seen {
			order = append(order, cat)
		}
		for _, x := range groups[cat] {
			if x.Name == g.Name {
				return
			}
		}
		groups[cat] = append(groups[cat], g)
	}
	for _, h := range cfg.Handlers {
		if h.Kind == engine.CommandHandlerKind {
			continue // command handlers never read streams
		}
		cat := h.PartOf
		if cat == "" && len(h.Handles) > 0 {
			cat = category[h.Handles[0]]
		}
		add(cat, GroupTopology{Name: h.Name})
	}
	for _, pm := range cfg.ProcessManagers {
		var cats []string
		all := true
		for _, ph := range pm.Handles {
			c := category[ph.Event]
			if !slices.Contains(cats, c) {
				cats = append(cats, c)
			}
			if _, part := dom.PartitionField(c); !part {
				all = false
			}
		}
		for _, c := range cats {
			add(c, GroupTopology{Name: pm.Name, ProcessManager: pm.SequentialBy && all})
		}
	}
	for _, c := range order {
		opts.Topology.Categories = append(opts.Topology.Categories, CategoryTopology{Name: c, Groups: groups[c]})
	}
	return opts, nil
}

// ErrNotFound is matched by every *NotFoundError.
var ErrNotFound = errors.New("admin: not found")

// NotFoundError says which partition, handler, head entry or DLQ entry does not exist.
type NotFoundError struct {
	What string // "partition", "handler", "head", "DLQ entry", "DLQ"
	Name string
	Hint string // what to do, "" for nothing
}

func (e *NotFoundError) Error() string {
	msg := fmt.Sprintf("%s %s not found", e.What, e.Name)
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ErrInvalidStream is returned for a stream name that is not a partition (or category)
// stream.
var ErrInvalidStream = errors.New("admin: invalid stream name")

// PartitionName is a parsed partition stream name.
type PartitionName struct {
	Category string
	Key      string // "" for an unpartitioned category stream

	keys keyspace.Keys // the layout its stream names are built in; the zero value is a single node
}

// Stream is the primary stream of the partition, in the layout of the Admin that parsed
// or listed it: "order:client-123" on one node, "order:{client-123}" on Redis Cluster.
func (p PartitionName) Stream() string {
	if p.Key == "" {
		return p.keys.CategoryStream(p.Category)
	}
	return p.keys.PartitionStream(p.Category, p.Key)
}

// laneStream is the backfill lane of the partition.
func (p PartitionName) laneStream(suffix string) string {
	return p.keys.LaneStream(p.Category, p.Key, suffix)
}

// dlqStream is the partition's dead-letter stream.
func (p PartitionName) dlqStream() string { return p.keys.DLQStream(p.Category, p.Key) }

// name returns the partition of a category and key in the Admin's layout.
func (a *Admin) name(category, key string) PartitionName {
	return PartitionName{Category: category, Key: key, keys: a.keys}
}

// ParseStream parses "order:client-123" (a partition), "order:client-123:backfill" (its
// backfill lane), "order:client-123:dlq" (its DLQ) or "order" (an unpartitioned category
// stream) into the partition it names. The Redis Cluster form, with the key as the hash
// tag ("order:{client-123}", "order:{client-123}:dlq"), names the same partition, on
// either deployment: a partition key never contains '{' or '}' (engine.ValidateKey), so
// the braces are only ever the layout's.
func (a *Admin) ParseStream(s string) (PartitionName, error) {
	parts := strings.Split(s, ":")
	if len(parts) == 3 && (parts[2] == "dlq" || parts[2] == a.opts.BackfillSuffix) {
		parts = parts[:2]
	}
	if len(parts) == 2 && len(parts[1]) > 2 && strings.HasPrefix(parts[1], "{") && strings.HasSuffix(parts[1], "}") {
		parts[1] = parts[1][1 : len(parts[1])-1]
	}
	switch len(parts) {
	case 1:
		if err := engine.ValidateCategory(parts[0]); err != nil {
			return PartitionName{}, fmt.Errorf("%w %q: %v", ErrInvalidStream, s, err)
		}
		return a.name(parts[0], ""), nil
	case 2:
		if err := engine.ValidateCategory(parts[0]); err != nil {
			return PartitionName{}, fmt.Errorf("%w %q: %v", ErrInvalidStream, s, err)
		}
		if err := engine.ValidateStreamKey(parts[1], a.opts.BackfillSuffix); err != nil {
			return PartitionName{}, fmt.Errorf("%w %q: %v", ErrInvalidStream, s, err)
		}
		return a.name(parts[0], parts[1]), nil
	}
	return PartitionName{}, fmt.Errorf("%w %q: want {category}:{key}, e.g. order:client-123", ErrInvalidStream, s)
}

// lanes returns the lane streams of a partition that are read: the primary lane, then
// the backfill lane unless lanes are off.
func (a *Admin) lanes(p PartitionName) []string {
	if p.Key == "" || a.opts.Lanes == LanesOff {
		return []string{p.Stream()}
	}
	return []string{p.Stream(), p.laneStream(a.opts.BackfillSuffix)}
}

// groupsOf returns the consumer groups of a category: the topology's, or the category's
// GroupRegistry. pm reports the process managers known from the topology (without one,
// detection happens per unit, see isPM).
func (a *Admin) groupsOf(ctx context.Context, category string) ([]GroupTopology, error) {
	if a.opts.Topology != nil {
		for _, c := range a.opts.Topology.Categories {
			if c.Name == category {
				return c.Groups, nil
			}
		}
		return nil, nil
	}
	names, err := a.rdb.SMembers(ctx, a.keys.GroupRegistry(category)).Result()
	if err != nil {
		return nil, translate(err)
	}
	slices.Sort(names)
	out := make([]GroupTopology, len(names))
	for i, n := range names {
		out[i] = GroupTopology{Name: n}
	}
	return out, nil
}

// ref resolves a partition and handler into an engine.HeadRef, checking that the handler
// is a consumer group of the category and whether it is a sequential process manager.
func (a *Admin) ref(ctx context.Context, p PartitionName, handler string) (engine.HeadRef, error) {
	groups, err := a.groupsOf(ctx, p.Category)
	if err != nil {
		return engine.HeadRef{}, err
	}
	ref := engine.HeadRef{Group: handler, Category: p.Category, Key: p.Key, BackfillSuffix: a.opts.BackfillSuffix}
	for _, g := range groups {
		if g.Name == handler {
			ref.ProcessManager = g.ProcessManager
			if a.opts.Topology == nil && p.Key != "" {
				if ref.ProcessManager, err = a.isPM(ctx, handler, p.Key); err != nil {
					return engine.HeadRef{}, err
				}
			}
			return ref, nil
		}
	}
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name
	}
	hint := "the category has no consumer groups"
	if len(names) > 0 {
		hint = "the handlers of " + p.Category + " are " + strings.Join(names, ", ")
	}
	return engine.HeadRef{}, &NotFoundError{What: "handler", Name: fmt.Sprintf("%q of %s", handler, p.Category), Hint: hint}
}

// isPM is the process-manager detection used without a config: a group is treated as a
// sequential process manager for a correlation value when a lease or a halt record
// exists under the process-manager unit (engine.PMUnit). Without either, nobody owns the
// value and nothing is halted, so reading it as a plain partition shows the same state.
func (a *Admin) isPM(ctx context.Context, group, key string) (bool, error) {
	// One EXISTS per key: on Redis Cluster the lease and the halt record share the unit's
	// slot, but a pipeline needs no such reasoning and costs the same round trip.
	unit := a.keys.PMUnit(group, key)
	pipe := a.rdb.Pipeline()
	lease, halt := pipe.Exists(ctx, a.keys.LeaseKey(unit, group)), pipe.Exists(ctx, a.keys.HaltKey(unit, group))
	if _, err := pipe.Exec(ctx); err != nil {
		return false, translate(err)
	}
	return lease.Val()+halt.Val() > 0, nil
}

// Handlers lists the consumer groups of a stream's category (for completion and for a
// helpful error).
func (a *Admin) Handlers(ctx context.Context, stream string) ([]string, error) {
	p, err := a.ParseStream(stream)
	if err != nil {
		return nil, err
	}
	groups, err := a.groupsOf(ctx, p.Category)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = g.Name
	}
	return out, nil
}

// translate turns go-redis errors into errors callers can test: a failure that passes
// with time (engine.Transient: a network failure, a reply Redis gives while not ready)
// matches engine.ErrRedisUnavailable; a missing permission matches engine.ErrNoPermission;
// any other Redis reply is wrapped with "admin: redis". The engine's errors, translated
// already, are returned as they are.
func translate(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, engine.ErrRedisUnavailable) || errors.Is(err, engine.ErrHeadMoved) ||
		errors.Is(err, engine.ErrNotHalted) || errors.Is(err, engine.ErrEntryGone) ||
		errors.Is(err, engine.ErrFenced) || errors.Is(err, engine.ErrInvalidKey) ||
		errors.Is(err, engine.ErrReplicaShortfall) || errors.Is(err, engine.ErrHalted) || errors.Is(err, engine.ErrNotPaused) ||
		errors.Is(err, engine.ErrNoOverride) {
		return err
	}
	if errors.Is(err, engine.ErrNoPermission) {
		return err
	}
	if missing, _ := engine.MissingPermission(err); missing != "" {
		return fmt.Errorf("%w: %s; grant the ACL of its role as %s shows (%w)", engine.ErrNoPermission, missing, engine.SecurityDoc, err)
	}
	if engine.Transient(err) {
		return fmt.Errorf("%w: %w", engine.ErrRedisUnavailable, err)
	}
	var re redis.Error
	if errors.As(err, &re) {
		return fmt.Errorf("admin: redis: %w", err)
	}
	return err
}

// unit is the lease unit of a head in the Admin's layout: the primary stream, or the
// process manager's correlation unit (engine.HeadRef.Unit gives the single-node name).
func (a *Admin) unit(ref engine.HeadRef) string {
	if ref.ProcessManager {
		return a.keys.PMUnit(ref.Group, ref.Key)
	}
	return a.name(ref.Category, ref.Key).Stream()
}

// indexed queues the check that a partition's key is in its category's index: a set on
// one node, a hash on Redis Cluster (see keyspace.Keys.PartitionIndex).
func (a *Admin) indexed(ctx context.Context, c redis.Cmdable, p PartitionName) *redis.BoolCmd {
	if a.keys.IsCluster() {
		return c.HExists(ctx, a.keys.PartitionIndex(p.Category), p.Key)
	}
	return c.SIsMember(ctx, a.keys.PartitionIndex(p.Category), p.Key)
}

// execTolerant runs a pipeline, accepting Redis reply errors of single commands (a
// missing stream answers XINFO with an error, a missing key GET with nil) and failing on
// anything else (the connection).
func execTolerant(ctx context.Context, pipe redis.Pipeliner) error {
	_, err := pipe.Exec(ctx)
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return nil
	}
	return translate(err)
}
