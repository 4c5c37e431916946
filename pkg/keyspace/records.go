package keyspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every record seqctl stores in Redis is written and read by the functions of this file,
// and only here (the Lua scripts, which cannot call Go, read a lease value and a halt
// record's fields as their headers say).

// Lease is the value of a lease key: "{owner}:{generation}". The same string is the
// owner's fencing token in the scripts and the name of its consumer in the partition's
// consumer groups.
type Lease struct {
	Owner      string
	Generation int64
}

// String encodes the lease value.
func (l Lease) String() string { return l.Owner + ":" + strconv.FormatInt(l.Generation, 10) }

// ParseLease decodes a lease value; ok is false for anything else (an empty value, a
// consumer name that is not an owner's).
func ParseLease(v string) (l Lease, ok bool) {
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return Lease{}, false
	}
	gen, err := strconv.ParseInt(v[i+1:], 10, 64)
	if err != nil {
		return Lease{}, false
	}
	return Lease{Owner: v[:i], Generation: gen}, true
}

// LeaseReading is what Redis holds about one lease: the lease key's value and expiry, and
// its owner's session key. Durations are PTTL replies as go-redis reads them: the time
// left, or -1 (time.Duration(-1)) for a key without an expiry, -2 for a missing key.
type LeaseReading struct {
	Value string // the lease key's value, "" when the key is missing
	// TTL is the lease key's PTTL. Only Redis Cluster gives a lease an expiry of its own:
	// one node's readers may leave it unread (zero).
	TTL time.Duration
	// SessionTTL is the PTTL of the owner's session key (SessionKey of the value's owner).
	SessionTTL time.Duration
}

// LeaseLife is what a LeaseReading says about the lease (see Keys.LeaseLife).
type LeaseLife struct {
	Lease Lease // the value, decoded; zero for a value that is not a lease's
	// Live says the lease is held by a live owner: no other instance may take it, and
	// its owner may be running an event of the unit.
	Live bool
	// Dormant is set for a live lease on Redis Cluster that has no expiry of its own: its
	// partition went idle, and the lease lives as long as its owner's session.
	Dormant bool
	// Remaining is how long a live lease stays live without a renewal: until its own
	// expiry on Redis Cluster, else (one node, dormant) as long as its owner's session.
	// 0 when it is not live, or when no expiry bounds it.
	Remaining time.Duration
}

// LeaseLife says whether a lease is held by a live owner: the one rule of it, which every
// reader of a lease applies. acquire.lua applies the same rule inside Redis (its alive
// function) before it takes a lease; retire.lua the one-node half of it.
//
//   - On one node a lease has no expiry of its own: it is live while its owner's session
//     key exists.
//   - On Redis Cluster a lease with an expiry is live until it expires, whatever became
//     of its owner's session: the owner may be running an event, and a script there
//     cannot read a session key in another slot.
//   - On Redis Cluster a dormant lease (no expiry) is live while its owner's session key
//     exists.
//
// A value that is not a lease's ("{owner}:{generation}") is never live.
func (k Keys) LeaseLife(r LeaseReading) LeaseLife {
	l, ok := ParseLease(r.Value)
	if !ok {
		return LeaseLife{}
	}
	life := LeaseLife{Lease: l}
	switch {
	case k.cluster && r.TTL == TTLMissing:
		// Expired between the read of its value and that of its expiry.
	case k.cluster && r.TTL != TTLNoExpiry:
		life.Live, life.Remaining = true, r.TTL
	default:
		life.Live, life.Remaining = SessionLife(r.SessionTTL)
		life.Dormant = life.Live && k.cluster
	}
	return life
}

// The PTTL replies of a key without an expiry and of a missing key, as go-redis reads
// them (a LeaseReading of a key not read says which it stands for).
const (
	TTLNoExpiry = time.Duration(-1)
	TTLMissing  = time.Duration(-2)
)

// SessionLife reads the PTTL of a session key (SessionKey): the session is live while the
// key exists, with remaining left (0 for a key without an expiry, which seqctl never
// writes but which is live).
func SessionLife(ttl time.Duration) (live bool, remaining time.Duration) {
	if ttl == TTLMissing {
		return false, 0
	}
	return true, max(ttl, 0)
}

// Owner names one incarnation of an instance: "{instance}.{incarnation}", a new random
// incarnation for every session, so that two processes started with one instance id
// never share a fence.
func Owner(instance, incarnation string) string { return instance + "." + incarnation }

// InstanceOfOwner returns the instance id of an owner name (the owner itself when it
// has no incarnation part).
func InstanceOfOwner(owner string) string {
	if i := strings.LastIndexByte(owner, '.'); i > 0 {
		return owner[:i]
	}
	return owner
}

// RegistryField is one process's field in the instance registry (InstancesKey):
// "{instance}#{random}", one per process for its whole life.
func RegistryField(instance, random string) string { return instance + "#" + random }

// Instance is an engine instance's registry entry (InstancesKey), JSON.
type Instance struct {
	ID          string `json:"id"`
	Owner       string `json:"owner"`
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	StartedMS   int64  `json:"started_ms"`
	HeartbeatMS int64  `json:"heartbeat_ms"`
	// Handler slots at the heartbeat: calls running, the instance's limit (0: unbounded)
	// and the partitions waiting for a slot.
	SlotsInUse   int `json:"slots_in_use"`
	SlotsLimit   int `json:"slots_limit"`
	SlotsWaiting int `json:"slots_waiting"`
	// Throttled lists the partitions waiting for a permit of their handler's limit key at
	// the heartbeat (at most MaxThrottledListed; ThrottledTotal counts them all).
	Throttled      []ThrottledUnit `json:"throttled,omitempty"`
	ThrottledTotal int             `json:"throttled_total,omitempty"`
}

// ThrottledUnit is a partition waiting for a permit of its handler's limit key.
type ThrottledUnit struct {
	Group string `json:"group"`
	Unit  string `json:"unit"`  // the lease unit as the instance names it: the primary stream
	Value string `json:"value"` // the limit key's value (a tenant id, say)
}

// MaxThrottledListed bounds the throttled partitions one registry entry lists.
const MaxThrottledListed = 1000

// Encode renders the registry entry.
func (i Instance) Encode() string {
	b, _ := json.Marshal(i) // plain fields: never fails
	return string(b)
}

// DecodeInstance reads a registry entry.
func DecodeInstance(raw string) (Instance, error) {
	var i Instance
	if err := json.Unmarshal([]byte(raw), &i); err != nil {
		return Instance{}, fmt.Errorf("keyspace: instance registry entry: %w", err)
	}
	return i, nil
}

// Halt is a partition's halt record (HaltKey, a hash with the fields entry, lane,
// stream, attempts, error, since_ms, owner, generation): the head that failed its
// retries, and the attempt that halted it.
type Halt struct {
	EntryID    string    `json:"entry_id"`
	Stream     string    `json:"stream"` // the lane the head is on
	Lane       int       `json:"lane"`   // 0 primary, 1 backfill
	Attempts   int       `json:"attempts"`
	Error      string    `json:"error"`
	Since      time.Time `json:"since"` // UTC
	Owner      string    `json:"owner"`
	Generation int64     `json:"generation"`
}

// Fields renders the record as field/value pairs for HSET, without since_ms, which
// halt.lua sets from Redis TIME.
func (h Halt) Fields() []any {
	return []any{
		"entry", h.EntryID, "lane", strconv.Itoa(h.Lane), "stream", h.Stream,
		"attempts", strconv.Itoa(h.Attempts), "error", h.Error,
		"owner", h.Owner, "generation", strconv.FormatInt(h.Generation, 10),
	}
}

// DecodeHalt reads a halt record (HGETALL of HaltKey); nil when there is none.
func DecodeHalt(m map[string]string) *Halt {
	if len(m) == 0 || m["entry"] == "" {
		return nil
	}
	h := &Halt{EntryID: m["entry"], Stream: m["stream"], Error: m["error"], Owner: m["owner"]}
	h.Lane, _ = strconv.Atoi(m["lane"])
	h.Attempts, _ = strconv.Atoi(m["attempts"])
	h.Generation, _ = strconv.ParseInt(m["generation"], 10, 64)
	if ms, err := strconv.ParseInt(m["since_ms"], 10, 64); err == nil {
		h.Since = time.UnixMilli(ms).UTC()
	}
	return h
}

// Pause is an operator's pause of a unit for one group (PauseKey, a hash with the fields
// reason, by, since_ms and until_ms). Until is zero for a pause without an end; with one,
// the key also carries a matching expiry, so it ends even when nothing runs.
type Pause struct {
	Reason string
	By     string    // who paused: the operator's actor string
	Since  time.Time // UTC
	Until  time.Time // UTC; zero: until resumed (null in JSON)
}

// pauseJSON is Pause's JSON form: until is null for a pause without an end.
type pauseJSON struct {
	Reason string     `json:"reason"`
	By     string     `json:"by"`
	Since  time.Time  `json:"since"`
	Until  *time.Time `json:"until"`
}

// MarshalJSON writes until as null for a pause without an end.
func (p Pause) MarshalJSON() ([]byte, error) {
	j := pauseJSON{Reason: p.Reason, By: p.By, Since: p.Since}
	if !p.Until.IsZero() {
		j.Until = &p.Until
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Pause) UnmarshalJSON(b []byte) error {
	var j pauseJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = Pause{Reason: j.Reason, By: j.By, Since: j.Since}
	if j.Until != nil {
		p.Until = *j.Until
	}
	return nil
}

// Fields renders the record as field/value pairs for HSET, without since_ms and
// until_ms, which pause.lua sets from Redis TIME.
func (p Pause) Fields() []any { return []any{"reason", p.Reason, "by", p.By} }

// DecodePause reads a pause record (HGETALL of PauseKey); nil when there is none.
func DecodePause(m map[string]string) *Pause {
	if len(m) == 0 {
		return nil
	}
	p := &Pause{Reason: m["reason"], By: m["by"]}
	if ms, err := strconv.ParseInt(m["since_ms"], 10, 64); err == nil && ms > 0 {
		p.Since = time.UnixMilli(ms).UTC()
	}
	if ms, err := strconv.ParseInt(m["until_ms"], 10, 64); err == nil && ms > 0 {
		p.Until = time.UnixMilli(ms).UTC()
	}
	return p
}

// Envelope is an event as a stream entry holds it (the README's envelope): the fields id,
// type, category, key, data, priority and published_at, and the publisher's W3C trace
// context (traceparent, tracestate) when it had one.
type Envelope struct {
	ID       string // the event id (unique, assigned at publish when empty)
	Type     string // the event type name
	Category string // the stream category
	Key      string // the partition key, "" when the category is not partitioned
	Data     []byte // the JSON payload
	// PublishedAt is when it was published (Redis server time): the entry's published_at
	// field when it has one (a producer's plain XADD, entries of earlier versions), else
	// the time in its entry id, which a publish script's XADD takes from Redis.
	PublishedAt time.Time
	Priority    int // lane priority; below the lanes threshold means backfill
	// TraceParent and TraceState are the publisher's W3C trace context headers
	// (https://www.w3.org/TR/trace-context/), "" without one. An entry whose traceparent
	// is not a valid one decodes with both empty: trace context never stops an event.
	TraceParent string
	TraceState  string
}

// Envelope field names of a stream entry.
const (
	FieldID          = "id"
	FieldType        = "type"
	FieldCategory    = "category"
	FieldKey         = "key"
	FieldData        = "data"
	FieldPriority    = "priority"
	FieldPublishedAt = "published_at"
	FieldTraceParent = "traceparent"
	FieldTraceState  = "tracestate"
)

// Fields renders the envelope as field/value pairs for XADD, without published_at: the
// entry id carries the time of the publish.
// The trace context fields are written only when there is one.
func (e Envelope) Fields() []any {
	f := []any{
		FieldID, e.ID, FieldType, e.Type, FieldCategory, e.Category,
		FieldKey, e.Key, FieldData, string(e.Data), FieldPriority, strconv.Itoa(e.Priority),
	}
	if e.TraceParent != "" {
		f = append(f, FieldTraceParent, e.TraceParent)
		if e.TraceState != "" {
			f = append(f, FieldTraceState, e.TraceState)
		}
	}
	return f
}

// DecodeEnvelope reads a stream entry. An entry without an id or a type is not a seqctl
// envelope: an error says so, in words an operator reads in a halt record (the other
// fields are read as far as they go).
func DecodeEnvelope(m redis.XMessage) (Envelope, error) {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	e := Envelope{
		ID: str(FieldID), Type: str(FieldType), Category: str(FieldCategory),
		Key: str(FieldKey), Data: []byte(str(FieldData)),
	}
	if p := str(FieldPriority); p != "" {
		e.Priority, _ = strconv.Atoi(p)
	}
	// The field is parsed only when present: publish.lua writes none, and a failed parse
	// of "" would cost an error value per event.
	if at := str(FieldPublishedAt); at != "" {
		if ms, err := strconv.ParseInt(at, 10, 64); err == nil {
			e.PublishedAt = time.UnixMilli(ms)
		}
	}
	if e.PublishedAt.IsZero() {
		if id, bare, ok := parseStreamID(m.ID); ok && !bare && id.MS > 0 && id.MS <= math.MaxInt64 {
			e.PublishedAt = time.UnixMilli(int64(id.MS))
		}
	}
	if tp := str(FieldTraceParent); tp != "" && ValidTraceParent(tp) == nil {
		e.TraceParent, e.TraceState = tp, str(FieldTraceState)
	}
	if e.ID == "" || e.Type == "" {
		return e, fmt.Errorf("entry %s is not a seqctl envelope (missing id or type)", m.ID)
	}
	return e, nil
}

// ValidTraceParent checks a W3C traceparent header value of version 00:
// "00-{32 hex trace id}-{16 hex parent span id}-{2 hex flags}", lowercase, with ids that
// are not all zeros. It says what is wrong.
func ValidTraceParent(tp string) error {
	const form = "want 00-{32 hex digits}-{16 hex digits}-{2 hex digits}, lowercase, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return fmt.Errorf("traceparent %q is not a W3C trace context: %s", tp, form)
	}
	for _, p := range parts[1:] {
		for _, c := range p {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return fmt.Errorf("traceparent %q is not a W3C trace context: %s", tp, form)
			}
		}
	}
	if strings.Trim(parts[1], "0") == "" || strings.Trim(parts[2], "0") == "" {
		return fmt.Errorf("traceparent %q has an all-zero trace or span id, which W3C trace context forbids", tp)
	}
	return nil
}

// StreamID is a stream entry id "{ms}-{seq}", parsed (keeping one allocates nothing).
//
// Every id seqctl reads is parsed here. An id given by a person says which of three
// things it is: one entry (ParseEntryID: "{ms}-{seq}" only), or the start or the end of a
// range (ParseRangeStart, ParseRangeEnd), where a bare "{ms}" stands for the first or
// the last entry of that millisecond, as XRANGE reads its start and its end.
type StreamID struct{ MS, Seq uint64 }

// MaxSeq is the largest sequence of a millisecond: a bare "{ms}" ending a range is
// {ms}-MaxSeq.
const MaxSeq = ^uint64(0)

// ErrInvalidStreamID is matched by every *StreamIDError through errors.Is.
var ErrInvalidStreamID = errors.New("keyspace: invalid stream entry id")

// StreamIDError says why a given id was refused, and what a valid one looks like.
type StreamIDError struct {
	ID string // the id as given
	// Reason says what a valid id is and, for a bare millisecond where one entry is
	// meant, that it names no entry.
	Reason string
}

func (e *StreamIDError) Error() string {
	return fmt.Sprintf("%v %q: %s", ErrInvalidStreamID, e.ID, e.Reason)
}

func (e *StreamIDError) Is(target error) bool { return target == ErrInvalidStreamID }

// ParseEntryID reads the id of one entry, "{ms}-{seq}", both unsigned decimal numbers. A
// bare "{ms}" is refused: it names every entry of a millisecond, and Redis would read it
// as the first of them in XRANGE and as {ms}-0 in XDEL and XACK.
func ParseEntryID(id string) (StreamID, error) {
	a, bare, ok := parseStreamID(id)
	switch {
	case !ok:
		return StreamID{}, &StreamIDError{ID: id, Reason: "an entry id is MILLISECONDS-SEQUENCE, e.g. 1718000000000-0"}
	case bare:
		return StreamID{}, &StreamIDError{ID: id, Reason: fmt.Sprintf(
			"an entry id is MILLISECONDS-SEQUENCE, e.g. %s-0; %q names a millisecond, not one entry", id, id)}
	}
	return a, nil
}

// ParseRangeStart reads the first id of a range: "{ms}-{seq}", or a bare "{ms}" for
// {ms}-0, the first entry the millisecond can hold.
func ParseRangeStart(id string) (StreamID, error) { return parseRangeBound(id, 0) }

// ParseRangeEnd reads the last id of a range: "{ms}-{seq}", or a bare "{ms}" for
// {ms}-MaxSeq, so that the range takes in every entry of the millisecond.
func ParseRangeEnd(id string) (StreamID, error) { return parseRangeBound(id, MaxSeq) }

// parseRangeBound reads a range bound; a bare millisecond gets the sequence bareSeq.
func parseRangeBound(id string, bareSeq uint64) (StreamID, error) {
	a, bare, ok := parseStreamID(id)
	if !ok {
		return StreamID{}, &StreamIDError{ID: id, Reason: "an entry id is MILLISECONDS-SEQUENCE, or MILLISECONDS for every entry of that millisecond, e.g. 1718000000000-0"}
	}
	if bare {
		a.Seq = bareSeq
	}
	return a, nil
}

// ParseStreamID reads an id Redis returned (an entry's, a group's last-delivered id), in
// the engine's hot paths: it allocates nothing and reports nothing. A bare "{ms}" reads
// as {ms}-0 (ParseRangeStart), anything that is not an id as 0-0. Parse an id a person
// gave with ParseEntryID, ParseRangeStart or ParseRangeEnd.
func ParseStreamID(id string) StreamID {
	a, _, _ := parseStreamID(id)
	return a
}

// parseStreamID is the one reading of an id: "{ms}-{seq}" or, with bare set, "{ms}"
// alone (sequence 0); ok is false (and a is 0-0) for anything else.
func parseStreamID(id string) (a StreamID, bare, ok bool) {
	msPart, seqPart, hasSeq := strings.Cut(id, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return StreamID{}, false, false
	}
	if !hasSeq {
		return StreamID{MS: ms}, true, true
	}
	seq, err := strconv.ParseUint(seqPart, 10, 64)
	if err != nil {
		return StreamID{}, false, false
	}
	return StreamID{MS: ms, Seq: seq}, false, true
}

// String formats the id as Redis does.
func (a StreamID) String() string {
	return strconv.FormatUint(a.MS, 10) + "-" + strconv.FormatUint(a.Seq, 10)
}

// Less orders ids as Redis does.
func (a StreamID) Less(b StreamID) bool { return a.MS < b.MS || (a.MS == b.MS && a.Seq < b.Seq) }

// Next returns the smallest id after a ({ms}-MaxSeq is followed by {ms+1}-0), and false
// for the largest id there is, which nothing follows.
func (a StreamID) Next() (StreamID, bool) {
	switch {
	case a.Seq < MaxSeq:
		return StreamID{MS: a.MS, Seq: a.Seq + 1}, true
	case a.MS < ^uint64(0):
		return StreamID{MS: a.MS + 1}, true
	}
	return a, false
}

// IndexValue is what an index write stores for a partition key in cluster mode (see
// PartitionIndex): the entry id it indexes and a random part, so that no two writes store
// the same value and a reaper's compare-and-remove never matches a write that came after
// its read.
func IndexValue(entryID, random string) string { return entryID + "/" + random }

// Notice is an entry of the control stream (ControlStream: what every instance must
// learn) or of an instance's wake stream (WakeStream: what that instance must do now).
// publish.lua, replay.lua, reap.lua, release.lua and resolve.lua write the same fields.
type Notice struct {
	Op       string // one of the Notice* operations
	Category string // NoticePartition, NoticeReaped: the partition's category
	Key      string // NoticePartition, NoticeReaped: the partition key
	Group    string // NoticeReleased, NoticeResume, NoticePause: the consumer group
	Unit     string // NoticeReleased, NoticeResume, NoticePause: the unit (lane stream or process-manager unit)
}

// The operations of a Notice.
const (
	NoticePartition = "partition" // control: a partition key was indexed (or again)
	NoticeReaped    = "reaped"    // control: a partition key left its index
	NoticeReleased  = "released"  // control: a lease was given back
	NoticeInstance  = "instance"  // control: an instance opened a session (it joins the share)
	NoticeResume    = "resume"    // wake: an operator resolved the unit's head, or resumed it
	NoticePause     = "pause"     // wake: an operator paused the unit: start no more of its events
	NoticeInterrupt = "interrupt" // wake: end the blocking read (shutdown)
)

// Capped lengths (approximate) of the notice streams.
const (
	ControlStreamCap = 1000
	WakeStreamCap    = 100
)

// Fields returns the notice as stream entry field/value pairs: op, then the fields the
// operation carries.
func (n Notice) Fields() []any {
	out := []any{"op", n.Op}
	if n.Category != "" || n.Key != "" {
		out = append(out, "category", n.Category, "key", n.Key)
	}
	if n.Group != "" || n.Unit != "" {
		out = append(out, "group", n.Group, "unit", n.Unit)
	}
	return out
}

// DecodeNotice reads a notice entry; fields it lacks read as "".
func DecodeNotice(m redis.XMessage) Notice {
	get := func(f string) string { s, _ := m.Values[f].(string); return s }
	return Notice{Op: get("op"), Category: get("category"), Key: get("key"), Group: get("group"), Unit: get("unit")}
}
