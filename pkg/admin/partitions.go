package admin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/seqctl/seqctl/pkg/engine"
)

// State is the state of one partition for one handler.
type State string

// The partition states, in the order they are decided:
const (
	// StateHalted: a halt record exists; the partition waits for an operator.
	StateHalted State = "halted"
	// StatePaused: an operator paused the partition for the handler ('seqctl partitions
	// pause'); its owner, if any, starts none of its events until it is resumed or the
	// pause ends.
	StatePaused State = "paused"
	// StateThrottled: its live owner holds its next event until a permit of the
	// handler's limit key is free (Partition.LimitValue names the value), as the owner's
	// registry entry says at its last heartbeat. Waiting is not an attempt.
	StateThrottled State = "throttled"
	// StateUnowned: no live lease (no lease, or one whose owner is gone: see
	// Partition.Owner); nothing reads the partition until an instance takes it.
	StateUnowned State = "unowned"
	// StateRunning: owned, with entries pending or not yet delivered.
	StateRunning State = "running"
	// StateIdle: owned and caught up.
	StateIdle State = "idle"
)

func (s State) String() string { return string(s) }

// Partition is one partition as one handler sees it: one row of 'seqctl partitions list'.
// Its JSON form (see MarshalJSON) carries every field, with null for a value that is
// absent (no owner, not halted, caught up) or unknown.
type Partition struct {
	Category string
	Key      string
	// Stream is the primary stream, {category}:{key}.
	Stream string
	// Handler is the consumer group (handler or process manager name).
	Handler string
	// Owner is the live lease owner "{instance}.{incarnation}", "" when unowned. Live is
	// the engine's rule (keyspace.Keys.LeaseLife): the owner's session exists, or on
	// Redis Cluster the lease has an expiry of its own that has not passed.
	Owner string
	// Generation is the fencing generation of the live lease, 0 when unowned.
	Generation int64
	// LeaseRemainingMS is how long the lease stays live without another heartbeat, in
	// milliseconds: until its own expiry on Redis Cluster, else as long as its owner's
	// session; 0 when unowned, or when no expiry bounds it.
	LeaseRemainingMS int64
	// Backlog is the number of entries the handler has not handled yet: those not
	// delivered (Lag) plus those delivered and not acknowledged (Pending: the entry in
	// the handler, and the entries read ahead with it, or the halted head and everything
	// read behind it). -1 when Lag is unknown.
	Backlog int64
	// Lag is the number of entries not yet delivered to the handler, over every lane;
	// -1 when Redis cannot tell (entries were deleted inside the undelivered range).
	Lag int64
	// Pending is the number of entries delivered but not acknowledged.
	Pending int64
	// DLQ is the length of the partition's dead-letter stream {category}:{key}:dlq
	// (shared by every handler of the partition).
	DLQ int64
	// HeadAgeMS is the age of the head entry (the halted entry, else the oldest pending,
	// else the next undelivered) by Redis TIME, in milliseconds; 0 when caught up.
	HeadAgeMS int64
	// State is halted, paused, throttled, unowned, running or idle (see State).
	State State
	// HaltedEntryID is the entry the partition halted on, "" when not halted.
	HaltedEntryID string

	// ProcessManager is set when Handler is a sequential process manager; its lease
	// and halt record belong to the correlation value Key across its categories.
	ProcessManager bool
	// Halt is the halt record, nil when not halted.
	Halt *engine.HaltRecord
	// Pause is the operator's pause record, nil when not paused.
	Pause *engine.PauseRecord
	// LimitValue is the value of the handler's limit key (a tenant) whose permit the
	// partition waits for, "" when it is not throttled.
	LimitValue string
	// HeadID is the head entry id, "" when caught up.
	HeadID string
	// Handled is how many entries the group has read and acknowledged on the current
	// lanes (entries-read minus pending): a counter for rates, reset when the partition is
	// reaped and re-created.
	Handled int64
}

// partitionJSON is the JSON form of a Partition. docs/json-output.md documents every
// field; keep the two in step.
type partitionJSON struct {
	Category         string              `json:"category"`
	Key              string              `json:"key"`
	Stream           string              `json:"stream"`
	Handler          string              `json:"handler"`
	ProcessManager   bool                `json:"process_manager"`
	State            State               `json:"state"`
	Owner            *string             `json:"owner"`
	Generation       *int64              `json:"generation"`
	LeaseRemainingMS *int64              `json:"lease_remaining_ms"`
	Backlog          *int64              `json:"backlog"`
	Lag              *int64              `json:"lag"`
	Pending          int64               `json:"pending"`
	DLQ              int64               `json:"dlq"`
	HeadID           *string             `json:"head_id"`
	HeadAgeMS        *int64              `json:"head_age_ms"`
	HaltedEntryID    *string             `json:"halted_entry_id"`
	Halt             *engine.HaltRecord  `json:"halt"`
	Pause            *engine.PauseRecord `json:"pause"`
	LimitValue       *string             `json:"limit_value"`
	Handled          int64               `json:"handled"`
}

func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func knownOrNil(n int64) *int64 {
	if n < 0 {
		return nil
	}
	return &n
}

// MarshalJSON writes the partition with null for absent values: owner, generation and
// lease_remaining_ms when unowned; backlog and lag when unknown; head_id and head_age_ms
// when caught up; halted_entry_id and halt when not halted; pause when not paused;
// limit_value when not throttled.
func (p Partition) MarshalJSON() ([]byte, error) {
	j := partitionJSON{
		Category: p.Category, Key: p.Key, Stream: p.Stream, Handler: p.Handler, ProcessManager: p.ProcessManager,
		State: p.State, Owner: strOrNil(p.Owner), Backlog: knownOrNil(p.Backlog), Lag: knownOrNil(p.Lag),
		Pending: p.Pending, DLQ: p.DLQ, HeadID: strOrNil(p.HeadID), HaltedEntryID: strOrNil(p.HaltedEntryID),
		Halt: p.Halt, Pause: p.Pause, LimitValue: strOrNil(p.LimitValue), Handled: p.Handled,
	}
	if p.Owner != "" {
		j.Generation, j.LeaseRemainingMS = &p.Generation, &p.LeaseRemainingMS
	}
	if p.HeadID != "" {
		j.HeadAgeMS = &p.HeadAgeMS
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes (null becomes the zero value, an unknown
// backlog or lag -1).
func (p *Partition) UnmarshalJSON(b []byte) error {
	var j partitionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	num := func(n *int64, none int64) int64 {
		if n == nil {
			return none
		}
		return *n
	}
	*p = Partition{
		Category: j.Category, Key: j.Key, Stream: j.Stream, Handler: j.Handler, ProcessManager: j.ProcessManager,
		State: j.State, Owner: deref(j.Owner), Generation: num(j.Generation, 0), LeaseRemainingMS: num(j.LeaseRemainingMS, 0),
		Backlog: num(j.Backlog, -1), Lag: num(j.Lag, -1), Pending: j.Pending, DLQ: j.DLQ, HeadID: deref(j.HeadID),
		HeadAgeMS: num(j.HeadAgeMS, 0), HaltedEntryID: deref(j.HaltedEntryID), Halt: j.Halt, Pause: j.Pause,
		LimitValue: deref(j.LimitValue), Handled: j.Handled,
	}
	return nil
}

// Filter selects partitions. The zero value selects every partition of every handler.
type Filter struct {
	Category string // only this category
	Handler  string // only this handler (consumer group)
	Halted   bool   // only halted partitions
	// States keeps partitions in one of these states; empty keeps every state.
	States []State
	// KeyGlob keeps partitions whose key matches this path.Match pattern ("client-1*",
	// "eu-?-*"); "" keeps every key. Checked before anything else is read.
	KeyGlob string
	// Owner keeps partitions whose live owner is this session owner
	// ("{instance}.{incarnation}") or belongs to this instance id.
	Owner string
	// OnUnindexed, when set, is called with each category that a filter of halted,
	// paused or throttled partitions reads in full because its state indexes are not
	// built yet (see Admin.RebuildStateIndex).
	OnUnindexed func(category string) `json:"-"`
}

// ParseState parses a state name.
func ParseState(s string) (State, error) {
	switch st := State(s); st {
	case StateHalted, StatePaused, StateThrottled, StateUnowned, StateRunning, StateIdle:
		return st, nil
	}
	return "", fmt.Errorf("unknown state %q: want running, idle, halted, paused, throttled or unowned", s)
}

// CheckKeyGlob reports a malformed --key pattern.
func CheckKeyGlob(glob string) error {
	if _, err := path.Match(glob, ""); err != nil {
		return fmt.Errorf("invalid key pattern %q: %v (use * for any run of characters, ? for one, [a-z] for a class)", glob, err)
	}
	return nil
}

// SortBy orders partitions.
type SortBy string

// The orders of SortPartitions.
const (
	SortName    SortBy = "name"    // category, key, handler (keys in natural order)
	SortLag     SortBy = "lag"     // largest lag first, then name
	SortAge     SortBy = "age"     // oldest head first, then name
	SortBacklog SortBy = "backlog" // largest backlog first, then name
	SortDLQ     SortBy = "dlq"     // longest DLQ first, then name
)

// SortPartitions sorts ps in place. Names compare in natural order: the digit runs of
// a key compare as numbers, so client-2 comes before client-10.
func SortPartitions(ps []Partition, by SortBy) {
	name := func(a, b Partition) int {
		return cmp.Or(NaturalCompare(a.Category, b.Category), NaturalCompare(a.Key, b.Key), NaturalCompare(a.Handler, b.Handler))
	}
	slices.SortStableFunc(ps, func(a, b Partition) int {
		switch by {
		case SortLag:
			return cmp.Or(cmp.Compare(b.Lag, a.Lag), name(a, b))
		case SortAge:
			return cmp.Or(cmp.Compare(b.HeadAgeMS, a.HeadAgeMS), name(a, b))
		case SortBacklog:
			return cmp.Or(cmp.Compare(b.Backlog, a.Backlog), name(a, b))
		case SortDLQ:
			return cmp.Or(cmp.Compare(b.DLQ, a.DLQ), name(a, b))
		}
		return name(a, b)
	})
}

// NaturalCompare compares two strings as people read them: runs of ASCII digits compare
// by their numeric value (client-9 < client-10), everything else byte by byte. Equal
// numbers with different leading zeros order the shorter first, so the order is total.
func NaturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb), cmp.Compare(da, db)); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitRun(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
