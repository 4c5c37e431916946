package engine

import "context"

// Delivery describes the attempt a handler is running. Handlers read it from their context
// with DeliveryFrom. Generation is the fencing token: a sink that remembers the highest
// generation it has seen per partition can reject a late write from a stalled owner.
type Delivery struct {
	Handler    string // consumer group (handler or process manager name)
	Category   string
	Key        string // partition key, "" when not partitioned
	Stream     string // the lane stream the entry is on
	EntryID    string // the stream entry id; for a BatchFunc's run, the first event's
	Generation int64  // the lease generation (fencing token)
	Attempt    int    // 1 for the first delivery; counted from the stream's delivery counter
	// Limit is set when the handler has a limit key (Handler.Limit): the event's value
	// and the permit this run holds.
	Limit *LimitPermit
	// Entries lists, for a BatchFunc's run, the stream entry ids of its events in order
	// (EntryID is the first); nil for a HandlerFunc's run.
	Entries []string
}

// LastEntryID returns the entry id of the run's last event: Entries' last for a batch,
// else EntryID.
func (d Delivery) LastEntryID() string {
	if len(d.Entries) > 0 {
		return d.Entries[len(d.Entries)-1]
	}
	return d.EntryID
}

// LimitPermit is the permit of a run under a limit key: the value it counts against, and
// the concurrency slot and generation that a downstream may check (a run with a lower
// generation for the same value and slot is a stalled holder's, superseded). Slot is -1
// when the value's concurrency is not capped (only its rate).
type LimitPermit struct {
	Value      string
	Slot       int
	Generation int64
}

type deliveryKey struct{}

// WithDelivery returns a context carrying d.
func WithDelivery(ctx context.Context, d Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

// DeliveryFrom returns the delivery carried by a handler's context.
func DeliveryFrom(ctx context.Context) (Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(Delivery)
	return d, ok
}
