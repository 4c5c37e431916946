package engine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
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

// In names the route's streams in the layout k: Domain.Route and the outbox give
// single-node names, and the Redis broker places them for the server it writes to.
func (r Route) In(k keyspace.Keys) Route {
	if r.Key == "" || (!k.IsCluster() && r.Stream != "") {
		return r // single-node names are the ones routes are built with
	}
	if r.Backfill && r.Suffix == "" {
		// A route built by hand with only the single-node lane name: take its suffix.
		r.Suffix = strings.TrimPrefix(r.Stream, keyspace.SingleNode.PartitionStream(r.Category, r.Key)+":")
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
	r := Route{Category: et.Category, Stream: keyspace.SingleNode.CategoryStream(et.Category)}
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
	r.Index = keyspace.SingleNode.PartitionIndex(et.Category)
	r.Stream = keyspace.SingleNode.PartitionStream(et.Category, key)
	if d.LanesEnabled && priority < d.LanesThreshold {
		r.Backfill, r.Suffix = true, d.backfillSuffix()
		r.Stream = keyspace.SingleNode.LaneStream(et.Category, key, d.backfillSuffix())
	}
	return r, nil
}

// routeEvent routes an event to publish and makes its envelope (with a new event id
// unless opt gives one).
func (d *Domain) routeEvent(eventType string, data []byte, opt PublishOptions) (Route, Event, error) {
	r, err := d.Route(eventType, data, opt.Priority)
	if err != nil {
		return Route{}, Event{}, err
	}
	ev := Event{ID: opt.ID, Type: eventType, Category: r.Category, Key: r.Key, Data: data, Priority: opt.Priority}
	if ev.ID == "" {
		ev.ID = NewEventID()
	}
	return r, ev, nil
}

// NewEventID returns a random 128-bit event id in UUID text form.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// EventFromMessage decodes a stream entry's envelope.
func EventFromMessage(m redis.XMessage) (Event, error) {
	env, err := keyspace.DecodeEnvelope(m)
	if err != nil {
		return env, fmt.Errorf("engine: %w", err)
	}
	return env, nil
}
