package keyspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// Each stored record reads back as it was written, and the forms other code relies on
// are the documented ones.
func TestRecordsRoundTrip(t *testing.T) {
	l := Lease{Owner: Owner("worker-1", "abc23xyz"), Generation: 1796169408080420}
	if got := l.String(); got != "worker-1.abc23xyz:1796169408080420" {
		t.Errorf("lease value %q", got)
	}
	if back, ok := ParseLease(l.String()); !ok || back != l {
		t.Errorf("ParseLease(%q) = %+v, %v", l.String(), back, ok)
	}
	for _, bad := range []string{"", "owner", ":5", "o:x"} {
		if _, ok := ParseLease(bad); ok {
			t.Errorf("ParseLease(%q) accepted a value that is not a lease", bad)
		}
	}
	for owner, want := range map[string]string{"worker-1.abc": "worker-1", "a.b.c": "a.b", "plain": "plain", ".x": ".x"} {
		if got := InstanceOfOwner(owner); got != want {
			t.Errorf("InstanceOfOwner(%q) = %q, want %q", owner, got, want)
		}
	}

	in := Instance{ID: "i1", Owner: "i1.abc", Host: "h", PID: 7, StartedMS: 1, HeartbeatMS: 2, SlotsInUse: 3, SlotsLimit: 4, SlotsWaiting: 5,
		Throttled: []ThrottledUnit{{Group: "P", Unit: "order:k", Value: "acme"}}, ThrottledTotal: 1}
	if out, err := DecodeInstance(in.Encode()); err != nil || !cmp.Equal(out, in) {
		t.Errorf("instance round trip: %+v, %v", out, err)
	}
	if _, err := DecodeInstance("{"); err == nil {
		t.Error("DecodeInstance accepted a broken entry")
	}

	h := Halt{EntryID: "1-0", Stream: "order:A", Lane: 1, Attempts: 3, Error: "boom", Owner: "i1.abc", Generation: 9}
	m := map[string]string{"since_ms": "1700000000000"}
	f := h.Fields()
	for i := 0; i < len(f); i += 2 {
		m[f[i].(string)] = f[i+1].(string)
	}
	h.Since = time.UnixMilli(1700000000000).UTC()
	if diff := cmp.Diff(&h, DecodeHalt(m)); diff != "" {
		t.Errorf("halt round trip (-want +got):\n%s", diff)
	}
	if DecodeHalt(map[string]string{}) != nil {
		t.Error("an empty hash read as a halt record")
	}

	e := Envelope{ID: "e-1", Type: "OrderPlaced", Category: "order", Key: "c-9", Data: []byte(`{"a":1}`), Priority: -1}
	vals := map[string]any{FieldPublishedAt: "1700000000000"}
	ef := e.Fields()
	for i := 0; i < len(ef); i += 2 {
		vals[ef[i].(string)] = ef[i+1]
	}
	e.PublishedAt = time.UnixMilli(1700000000000)
	got, err := DecodeEnvelope(redis.XMessage{ID: "1-0", Values: vals})
	if err != nil || !cmp.Equal(e, got) {
		t.Errorf("envelope round trip: %+v, %v", got, err)
	}
	if _, err := DecodeEnvelope(redis.XMessage{ID: "2-0", Values: map[string]any{"foo": "bar"}}); err == nil {
		t.Error("an entry without id and type read as an envelope")
	}

	for _, id := range []string{"0-0", "1796169408062-13", "18446744073709551615-18446744073709551615"} {
		if got := ParseStreamID(id).String(); got != id {
			t.Errorf("stream id %q reads back as %q", id, got)
		}
	}
	if !ParseStreamID("5-9").Less(ParseStreamID("6-0")) || ParseStreamID("6-0").Less(ParseStreamID("5-9")) {
		t.Error("stream ids out of order")
	}
	if ParseStreamID("12") != (StreamID{MS: 12}) {
		t.Error("a bare millisecond id")
	}
}

// A notice written by Fields reads back the same, and an entry a script wrote with the
// same fields reads as the notice it means.
// A pause record reads back from its hash and its JSON, with a null until for a pause
// without an end.
// Without a published_at field (publish.lua writes none), the time of the publish is the
// entry id's; an id without one gives none.
func TestEnvelopePublishedAtFromEntryID(t *testing.T) {
	e := Envelope{ID: "e-1", Type: "OrderPlaced", Category: "order", Key: "c-9", Data: []byte(`{"a":1}`), Priority: -1}
	vals := map[string]any{}
	ef := e.Fields()
	for i := 0; i < len(ef); i += 2 {
		vals[ef[i].(string)] = ef[i+1]
	}
	e.PublishedAt = time.UnixMilli(1796169408062)
	got, err := DecodeEnvelope(redis.XMessage{ID: "1796169408062-3", Values: vals})
	if err != nil || !cmp.Equal(e, got) {
		t.Errorf("envelope without published_at: %+v, %v (want the entry id's time)", got, err)
	}
	for _, id := range []string{"0-1", "junk", "1796169408062"} {
		if got, _ := DecodeEnvelope(redis.XMessage{ID: id, Values: vals}); !got.PublishedAt.IsZero() {
			t.Errorf("entry id %q gave the publish time %v, want none", id, got.PublishedAt)
		}
	}
}

func TestPauseRecord(t *testing.T) {
	since := time.UnixMilli(1796169408080).UTC()
	for _, p := range []Pause{
		{Reason: "migration", By: "ops@laptop", Since: since},
		{Reason: "locked", By: "ops@laptop", Since: since, Until: since.Add(10 * time.Minute)},
	} {
		until := "0"
		if !p.Until.IsZero() {
			until = "1796170008080"
		}
		stored := map[string]string{"since_ms": "1796169408080", "until_ms": until}
		f := p.Fields()
		for i := 0; i+1 < len(f); i += 2 {
			stored[f[i].(string)] = f[i+1].(string)
		}
		if got := DecodePause(stored); got == nil || *got != p {
			t.Errorf("DecodePause(%v) = %+v, want %+v", stored, got, p)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if p.Until.IsZero() != strings.Contains(string(b), `"until":null`) {
			t.Errorf("JSON %s: until must be null exactly when the pause has no end", b)
		}
		var back Pause
		if err := json.Unmarshal(b, &back); err != nil || back != p {
			t.Errorf("JSON round trip of %+v: %+v, %v", p, back, err)
		}
	}
	if DecodePause(nil) != nil {
		t.Error("no hash must decode to no pause")
	}
}

func TestNoticeRoundTrip(t *testing.T) {
	for _, n := range []Notice{
		{Op: NoticePartition, Category: "order", Key: "c-9"},
		{Op: NoticeReaped, Category: "order", Key: "c-9"},
		{Op: NoticeReleased, Group: "Projector", Unit: "order:c-9"},
		{Op: NoticeResume, Group: "Projector", Unit: "order:{c-9}"},
		{Op: NoticeInterrupt},
	} {
		f := n.Fields()
		vals := map[string]any{}
		for i := 0; i+1 < len(f); i += 2 {
			vals[f[i].(string)] = f[i+1]
		}
		if got := DecodeNotice(redis.XMessage{ID: "1-0", Values: vals}); got != n {
			t.Errorf("%+v read back as %+v", n, got)
		}
	}
	// release.lua's entry: op, group, unit.
	m := redis.XMessage{Values: map[string]any{"op": "released", "group": "G", "unit": "order:k"}}
	if got := DecodeNotice(m); got != (Notice{Op: NoticeReleased, Group: "G", Unit: "order:k"}) {
		t.Errorf("release.lua's notice read as %+v", got)
	}
}

// The trace context rides in the envelope when there is one, and only a valid
// traceparent is read back: a malformed one (another publisher's) reads as none.
func TestEnvelopeTraceContext(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	toValues := func(f []any) map[string]any {
		vals := map[string]any{}
		for i := 0; i < len(f); i += 2 {
			vals[f[i].(string)] = f[i+1]
		}
		return vals
	}
	plain := Envelope{ID: "e-1", Type: "T", Category: "c", Data: []byte(`{}`)}
	if n := len(plain.Fields()); n != 12 {
		t.Errorf("an envelope without trace context has %d field values, want 12 (no empty trace fields)", n)
	}
	traced := plain
	traced.TraceParent, traced.TraceState = tp, "rojo=00f067aa0ba902b7"
	got, err := DecodeEnvelope(redis.XMessage{ID: "1-0", Values: toValues(traced.Fields())})
	if err != nil {
		t.Fatal(err)
	}
	if got.TraceParent != tp || got.TraceState != "rojo=00f067aa0ba902b7" {
		t.Errorf("read back %q, %q", got.TraceParent, got.TraceState)
	}
	for _, bad := range []string{"", "nonsense", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"} {
		if bad != "" && ValidTraceParent(bad) == nil {
			t.Errorf("ValidTraceParent(%q) accepted it", bad)
		}
		vals := toValues(plain.Fields())
		vals[FieldTraceParent], vals[FieldTraceState] = bad, "x=1"
		got, err := DecodeEnvelope(redis.XMessage{ID: "2-0", Values: vals})
		if err != nil || got.TraceParent != "" || got.TraceState != "" {
			t.Errorf("traceparent %q: read as %q, %q (err %v), want none and no error", bad, got.TraceParent, got.TraceState, err)
		}
	}
	if err := ValidTraceParent(tp); err != nil {
		t.Error(err)
	}
}

// An id given by a person says what it is: one entry ("{ms}-{seq}" only), or the start or
// the end of a range, where a bare millisecond is its first or its last entry. Anything
// else is refused with an error naming the id and the form.
func TestParseStreamIDs(t *testing.T) {
	const form = "an entry id is MILLISECONDS-SEQUENCE"
	for _, tt := range []struct {
		id                string
		entry, start, end string // the id read, or the error it gives (containing form)
	}{
		{id: "5-3", entry: "5-3", start: "5-3", end: "5-3"},
		{id: "0-0", entry: "0-0", start: "0-0", end: "0-0"},
		{id: "18446744073709551615-18446744073709551615", entry: "18446744073709551615-18446744073709551615",
			start: "18446744073709551615-18446744073709551615", end: "18446744073709551615-18446744073709551615"},
		{id: "5", entry: `keyspace: invalid stream entry id "5": an entry id is MILLISECONDS-SEQUENCE, e.g. 5-0; "5" names a millisecond, not one entry`,
			start: "5-0", end: "5-18446744073709551615"},
		{id: "garbage", entry: form, start: form, end: form},
		{id: "", entry: form, start: form, end: form},
		{id: "5-", entry: form, start: form, end: form},
		{id: "-5", entry: form, start: form, end: form},
		{id: "+5-0", entry: form, start: form, end: form},
		{id: "5-+1", entry: form, start: form, end: form},
		{id: "5-1-2", entry: form, start: form, end: form},
		{id: "18446744073709551616-0", entry: form, start: form, end: form},
	} {
		for _, p := range []struct {
			name  string
			parse func(string) (StreamID, error)
			want  string
		}{{"ParseEntryID", ParseEntryID, tt.entry}, {"ParseRangeStart", ParseRangeStart, tt.start}, {"ParseRangeEnd", ParseRangeEnd, tt.end}} {
			a, err := p.parse(tt.id)
			switch {
			case strings.Contains(p.want, form):
				if !errors.Is(err, ErrInvalidStreamID) || !strings.Contains(err.Error(), p.want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.id)) {
					t.Errorf("%s(%q) = %v, %v; want an error naming the id and containing %q", p.name, tt.id, a, err, p.want)
				}
			case err != nil || a.String() != p.want:
				t.Errorf("%s(%q) = %v, %v; want %s", p.name, tt.id, a, err, p.want)
			}
		}
	}
	for _, tt := range []struct{ id, next string }{{"5-3", "5-4"}, {"5-18446744073709551615", "6-0"}} {
		if a, ok := ParseStreamID(tt.id).Next(); !ok || a.String() != tt.next {
			t.Errorf("%s.Next() = %v, %v; want %s", tt.id, a, ok, tt.next)
		}
	}
	if _, ok := (StreamID{MS: MaxSeq, Seq: MaxSeq}).Next(); ok {
		t.Error("the largest id has a next one")
	}
	if got := ParseStreamID("5-x"); got != (StreamID{}) {
		t.Errorf("ParseStreamID of a malformed id = %v, want 0-0", got)
	}
}

// A lease is live while its owner's session key exists, except on Redis Cluster where a
// lease with an expiry of its own is live until it expires; a dormant one (no expiry)
// lives with the session. acquire.lua applies the same rule (pkg/admin tests both).
func TestLeaseLife(t *testing.T) {
	const (
		none    = time.Duration(-1) // PTTL of a key without an expiry
		missing = time.Duration(-2) // PTTL of a missing key
		s15     = 15 * time.Second
	)
	lease := Lease{Owner: "i1.abc", Generation: 7}
	for _, tt := range []struct {
		name string
		k    Keys
		r    LeaseReading
		want LeaseLife
	}{
		{"one node, a live session", SingleNode, LeaseReading{Value: "i1.abc:7", SessionTTL: s15}, LeaseLife{Lease: lease, Live: true, Remaining: s15}},
		{"one node, a session without an expiry", SingleNode, LeaseReading{Value: "i1.abc:7", SessionTTL: none}, LeaseLife{Lease: lease, Live: true}},
		{"one node, the session about to expire", SingleNode, LeaseReading{Value: "i1.abc:7", SessionTTL: 0}, LeaseLife{Lease: lease, Live: true}},
		{"one node, the session gone", SingleNode, LeaseReading{Value: "i1.abc:7", SessionTTL: missing}, LeaseLife{Lease: lease}},
		{"one node, an expiry does not count", SingleNode, LeaseReading{Value: "i1.abc:7", TTL: s15, SessionTTL: missing}, LeaseLife{Lease: lease}},
		{"no lease", SingleNode, LeaseReading{SessionTTL: s15}, LeaseLife{}},
		{"not a lease value", Cluster, LeaseReading{Value: "garbage", TTL: s15, SessionTTL: s15}, LeaseLife{}},
		{"cluster, an expiry, the session gone", Cluster, LeaseReading{Value: "i1.abc:7", TTL: 5 * time.Second, SessionTTL: missing},
			LeaseLife{Lease: lease, Live: true, Remaining: 5 * time.Second}},
		{"cluster, an expiry sooner than the session's", Cluster, LeaseReading{Value: "i1.abc:7", TTL: 5 * time.Second, SessionTTL: s15},
			LeaseLife{Lease: lease, Live: true, Remaining: 5 * time.Second}},
		{"cluster, dormant, a live session", Cluster, LeaseReading{Value: "i1.abc:7", TTL: none, SessionTTL: s15},
			LeaseLife{Lease: lease, Live: true, Dormant: true, Remaining: s15}},
		{"cluster, dormant, the session gone", Cluster, LeaseReading{Value: "i1.abc:7", TTL: none, SessionTTL: missing}, LeaseLife{Lease: lease}},
		{"cluster, expired after its value was read", Cluster, LeaseReading{Value: "i1.abc:7", TTL: missing, SessionTTL: s15}, LeaseLife{Lease: lease}},
	} {
		if got := tt.k.LeaseLife(tt.r); got != tt.want {
			t.Errorf("%s: LeaseLife(%+v) = %+v, want %+v", tt.name, tt.r, got, tt.want)
		}
	}
}

// A limit override reads back as written; one not written yet (a dry run's) has no time,
// and its JSON says so with a null since rather than the zero time.
func TestLimitOverrideJSON(t *testing.T) {
	since := time.UnixMilli(1796169408080).UTC()
	for _, o := range []LimitOverride{
		{Concurrency: 8, Rate: 600, Per: time.Minute, Reason: "big tenant", By: "ops@laptop", Since: since},
		{Off: true, Reason: "trusted", By: "ops@laptop", Since: since},
		{Concurrency: 2, Reason: "dry run"},
	} {
		got, err := DecodeLimitOverride(o.Encode())
		if err != nil || got != o {
			t.Errorf("DecodeLimitOverride(Encode(%+v)) = %+v, %v", o, got, err)
		}
		b, _ := json.Marshal(o)
		if o.Since.IsZero() != strings.Contains(string(b), `"since":null`) {
			t.Errorf("JSON %s: since must be null exactly when the override has no time", b)
		}
	}
}
