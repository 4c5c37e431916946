package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// InlineBroker runs handlers in-process, in strict submission order, one event at a time.
// It does not advertise StreamPartitioning: sequential_by is an accepted no-op there,
// since submission order already holds. Partition operations return ErrNotSupported.
type InlineBroker struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []inlineItem // guarded by mu
	busy   bool         // the dispatcher is handling an item; guarded by mu
	closed bool         // guarded by mu
	failed []InlineFailure
	dom    *Domain
	done   chan struct{}
}

type inlineItem struct {
	ev Event
}

// InlineFailure records an event a handler gave up on after its retries.
type InlineFailure struct {
	Handler string
	Event   Event
	Err     error
}

// NewInlineBroker returns an inline broker. Call Start with the initialized domain.
func NewInlineBroker() *InlineBroker {
	b := &InlineBroker{done: make(chan struct{})}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// Kind returns "inline".
func (b *InlineBroker) Kind() string { return BrokerKindInline }

// Has reports no capability.
func (b *InlineBroker) Has(Capability) bool { return false }

// Start begins dispatching to the domain's handlers (those with a Func).
func (b *InlineBroker) Start(d *Domain) error {
	if !d.Initialized() {
		return errors.New("engine: domain not initialized: call Init first")
	}
	b.mu.Lock()
	b.dom = d
	b.mu.Unlock()
	go b.dispatch()
	return nil
}

// Publish validates and enqueues an event; handlers run in submission order.
func (b *InlineBroker) Publish(ctx context.Context, d *Domain, eventType string, data []byte, opt PublishOptions) (Published, error) {
	r, ev, err := d.routeEvent(eventType, data, opt)
	if err != nil {
		return Published{}, err
	}
	stampTrace(ctx, &ev)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return Published{}, errors.New("engine: inline broker closed")
	}
	b.queue = append(b.queue, inlineItem{ev: ev})
	b.cond.Broadcast()
	return Published{EventID: ev.ID, Category: r.Category, Key: r.Key, Stream: r.Stream}, nil
}

func (b *InlineBroker) dispatch() {
	defer close(b.done)
	for {
		b.mu.Lock()
		for len(b.queue) == 0 && !b.closed {
			b.cond.Wait()
		}
		if len(b.queue) == 0 {
			b.mu.Unlock()
			return
		}
		it := b.queue[0]
		b.queue = b.queue[1:]
		b.busy = true
		d := b.dom
		b.mu.Unlock()
		for _, h := range d.Handlers {
			if (h.Func == nil && h.BatchFunc == nil) || !slices.Contains(h.Handles, it.ev.Type) {
				continue
			}
			var err error
			for attempt := 1; attempt <= orInt(h.MaxRetries, DefaultMaxRetries); attempt++ {
				d := Delivery{Handler: h.Name, Category: it.ev.Category, Key: it.ev.Key, Stream: it.ev.Category, Attempt: attempt}
				ctx := withTrace(context.Background(), it.ev)
				if h.BatchFunc != nil {
					// A batch handler takes each event in a run of its own: the inline
					// broker handles one event at a time.
					err = h.BatchFunc(WithDelivery(ctx, d), []Event{it.ev})
				} else {
					err = h.Func(WithDelivery(ctx, d), it.ev)
				}
				if err == nil {
					break
				}
			}
			if err != nil {
				b.mu.Lock()
				b.failed = append(b.failed, InlineFailure{Handler: h.Name, Event: it.ev, Err: err})
				b.mu.Unlock()
			}
		}
		b.mu.Lock()
		b.busy = false
		b.cond.Broadcast()
		b.mu.Unlock()
	}
}

// Wait blocks until every published event has been handled.
func (b *InlineBroker) Wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.queue) > 0 || b.busy {
		b.cond.Wait()
	}
}

// Failures returns the events handlers gave up on.
func (b *InlineBroker) Failures() []InlineFailure {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]InlineFailure(nil), b.failed...)
}

// Close stops the dispatcher after the queue is drained.
func (b *InlineBroker) Close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	started := b.dom != nil
	b.mu.Unlock()
	if started {
		<-b.done
	}
}

// Skip is not supported by the inline broker.
func (b *InlineBroker) Skip(context.Context, HeadRef, string, bool) error {
	return fmt.Errorf("%w: skip (the inline broker has no partitions)", ErrNotSupported)
}

// MoveToDLQ is not supported by the inline broker.
func (b *InlineBroker) MoveToDLQ(context.Context, HeadRef, string, bool) error {
	return fmt.Errorf("%w: move to DLQ (the inline broker has no partitions)", ErrNotSupported)
}

// Retry is not supported by the inline broker.
func (b *InlineBroker) Retry(context.Context, HeadRef, string) error {
	return fmt.Errorf("%w: retry (the inline broker has no partitions)", ErrNotSupported)
}

// Halt is not supported by the inline broker.
func (b *InlineBroker) Halt(context.Context, HeadRef) (*HaltRecord, error) {
	return nil, fmt.Errorf("%w: halt records (the inline broker has no partitions)", ErrNotSupported)
}
