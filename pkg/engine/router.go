package engine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Route is where one event goes.
type Route struct {
	Category string
	Key      string // "" when the category is not partitioned (or partitioning inactive)
	Stream   string // the target stream
	Index    string // the discovery index to add Key to, "" when not partitioned
	Backfill bool   // routed to the backfill lane
	Suffix   string // the backfill suffix when Backfill
}

// Place names a route's streams in the layout k: Domain.Route and the outbox give
// single-node names, and the Redis broker places them for the server it writes to.
func (k Keys) Place(r Route) Route {
	if r.Key == "" || (!k.cluster && r.Stream != "") {
		return r // single-node names are the ones routes are built with
	}
	if r.Backfill && r.Suffix == "" {
		// A route built by hand with only the single-node lane name: take its suffix.
		r.Suffix = strings.TrimPrefix(r.Stream, PartitionStream(r.Category, r.Key)+":")
		if r.Suffix == r.Stream || r.Suffix == "" {
			r.Suffix = DefaultBackfillSuffix
		}
	}
	r.Index = k.PartitionIndex(r.Category)
	r.Stream = k.PartitionStream(r.Category, r.Key)
	if r.Backfill {
		r.Stream = k.LaneStream(r.Category, r.Key, r.Suffix)
	}
	return r
}

// ErrUnknownEvent is returned when routing an event type the domain does not declare.
var ErrUnknownEvent = errors.New("engine: unknown event type")

// Route computes the stream of an event: {category}:{key} for a partitioned category on a
// broker with STREAM_PARTITIONING (plus :{backfill_suffix} when lanes are on and priority
// is below the threshold), else the base category. The key is extracted from the payload
// and validated; an invalid key is a *InvalidKeyError and nothing should be written.
// The domain must be initialized.
func (d *Domain) Route(eventType string, data []byte, priority int) (Route, error) {
	if !d.initialized {
		return Route{}, errors.New("engine: domain not initialized: call Init first")
	}
	et, ok := d.eventsByName[eventType]
	if !ok {
		return Route{}, fmt.Errorf("%w %q: declare it in the domain", ErrUnknownEvent, eventType)
	}
	r := Route{Category: et.Category, Stream: CategoryStream(et.Category)}
	field, partitioned := d.PartitionField(et.Category)
	if !partitioned {
		return r, nil
	}
	key, err := ExtractKey(data, field, d.backfillSuffix())
	if err != nil {
		var ike *InvalidKeyError
		if errors.As(err, &ike) {
			ike.Category = et.Category
		}
		return Route{}, err
	}
	r.Key = key
	r.Index = PartitionIndex(et.Category)
	r.Stream = PartitionStream(et.Category, key)
	if d.LanesEnabled && priority < d.LanesThreshold {
		r.Backfill, r.Suffix = true, d.backfillSuffix()
		r.Stream = LaneStream(et.Category, key, d.backfillSuffix())
	}
	return r, nil
}

// Envelope field names of a stream entry (documented in the README).
const (
	fieldID          = "id"
	fieldType        = "type"
	fieldCategory    = "category"
	fieldKey         = "key"
	fieldData        = "data"
	fieldPriority    = "priority"
	fieldPublishedAt = "published_at"
)

// NewEventID returns a random 128-bit event id in UUID text form.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// envelopeArgs renders the envelope as field/value pairs (published_at is added by the
// publish script from Redis TIME).
func envelopeArgs(ev Event) []any {
	return []any{
		fieldID, ev.ID, fieldType, ev.Type, fieldCategory, ev.Category,
		fieldKey, ev.Key, fieldData, string(ev.Data), fieldPriority, strconv.Itoa(ev.Priority),
	}
}

// EventFromMessage decodes a stream entry's envelope.
func EventFromMessage(m redis.XMessage) (Event, error) {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	ev := Event{
		ID: str(fieldID), Type: str(fieldType), Category: str(fieldCategory),
		Key: str(fieldKey), Data: []byte(str(fieldData)),
	}
	if ev.ID == "" || ev.Type == "" {
		return ev, fmt.Errorf("engine: entry %s is not a seqctl envelope (missing id or type)", m.ID)
	}
	if p := str(fieldPriority); p != "" {
		ev.Priority, _ = strconv.Atoi(p)
	}
	if ms, err := strconv.ParseInt(str(fieldPublishedAt), 10, 64); err == nil {
		ev.PublishedAt = time.UnixMilli(ms)
	}
	return ev, nil
}
