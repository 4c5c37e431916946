package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
)

// BatchEvent is one event of a PublishMany call.
type BatchEvent struct {
	Type string // the event type's name
	Data []byte // the JSON payload
	// ID is the event id; a random one is assigned when empty. Give every event an id
	// when the batch may be sent again after an error: the events that were appended then
	// append nothing the second time.
	ID       string
	Priority int // the lane priority, as PublishOptions.Priority
}

// BatchOptions are the optional parts of a PublishMany call.
type BatchOptions struct {
	// SkipReplicaWait leaves out the one wait for replicas after the batch (see
	// PublishOptions.SkipReplicaWait).
	SkipReplicaWait bool
}

// BatchError says which event of a PublishMany call failed: Index is its place in the
// batch, -1 when the batch as a whole got no answer (whether any event was appended is
// then unknown: send the same events again, with their ids).
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("engine: publish of the batch: %v", e.Err)
	}
	return fmt.Sprintf("engine: publish of event %d of the batch: %v", e.Index, e.Err)
}

func (e *BatchError) Unwrap() error { return e.Err }

// PublishMany publishes events in one round trip: on one Redis node publishbatch.lua calls
// of up to 100 events each, in one pipeline; on Redis Cluster the publish script of each
// event, in one pipeline (the client sends each master its part at once). Each event
// gets what Publish gives it: its key extracted and validated first, the index written in
// the same step as the append, the owner woken, and an event id remembered for
// PublishDedupeWindow, so that sending an event again appends nothing (Duplicate). The
// events of one key are appended in the order of the slice; ctx's span context is stored
// with each, as Publish does.
//
// Every event is routed before anything is sent: when one cannot be (an unknown event
// type, a *InvalidKeyError), nothing is written and a *BatchError names it. When Redis
// refuses an event (out of memory, say) the *BatchError names the first one refused; the
// events after it of the same stream (its key and lane) are not appended either
// (ErrPublishAfterRefused), those of other streams may be, and those that Redis appended
// have their Published filled in (an EntryID): send the refused event and the ones after
// it again, with their ids, once the cause is gone, and publish order holds. The results
// are in the order of events; an entry of an event that was not appended is zero.
//
// With a broker made WithReplicas it then waits once for the replicas (unless
// opt.SkipReplicaWait), as Publish does for one event.
func (b *RedisBroker) PublishMany(ctx context.Context, d *Domain, events []BatchEvent, opt BatchOptions) ([]Published, error) {
	routes := make([]Route, len(events))
	evs := make([]Event, len(events))
	for i, be := range events {
		r, ev, err := d.routeEvent(be.Type, be.Data, PublishOptions{ID: be.ID, Priority: be.Priority})
		if err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
		stampTrace(ctx, &ev)
		routes[i], evs[i] = r.In(b.keys), ev
	}
	out := make([]Published, len(events))
	if len(events) == 0 {
		return out, nil
	}
	// Each event after the first of its stream in the batch is appended only after the
	// one before it: when Redis refuses an event, the later ones of its stream are not
	// appended either, so the documented recovery keeps publish order.
	calls := make([]scripts.Publish, len(events))
	for i := range events {
		calls[i] = b.publishCall(routes[i], evs[i], 0)
	}
	prev := predecessors(routes)
	var replies []scripts.PublishReply
	var errs []error
	var err error
	if b.keys.IsCluster() {
		replies, errs, err = b.publishEach(ctx, prev, calls)
	} else {
		replies, errs, err = b.publishBatches(ctx, prev, calls)
	}
	if err != nil {
		return out, &BatchError{Index: -1, Err: err}
	}
	var first *BatchError
	fail := func(i int, err error) {
		if first == nil || i < first.Index {
			first = &BatchError{Index: i, Err: translateRedisErr(err)}
		}
	}
	for i := range events {
		res, err := replies[i], errs[i]
		if err == nil && res.AfterRefused {
			err = fmt.Errorf("%w: event %d, the one before it on %s, was not appended", ErrPublishAfterRefused, prev[i], routes[i].Stream)
		}
		if err != nil {
			fail(i, err)
			continue
		}
		ev := evs[i]
		out[i] = Published{EventID: ev.ID, Category: routes[i].Category, Key: routes[i].Key, Stream: routes[i].Stream,
			EntryID: res.EntryID, Duplicate: !res.Appended}
	}
	// On Redis Cluster a new partition's index is written after its append: once per
	// partition of the batch, with the last of its entries (the script reports the mark
	// missing for each of them, the batch being sent before any index write).
	unindexed := map[string]int{}
	for i := range events {
		if errs[i] == nil && replies[i].IndexNeeded {
			unindexed[routes[i].Category+"\x00"+routes[i].Key] = i
		}
	}
	for _, i := range unindexed {
		if err := b.indexAfterAppend(ctx, routes[i], out[i].EntryID); err != nil {
			fail(i, err)
		}
	}
	if first != nil {
		return out, first
	}
	if opt.SkipReplicaWait {
		return out, nil
	}
	return out, b.waitReplicas(ctx, fmt.Sprintf("publish of %d events", len(events)))
}

// publishBatchMax is the most events of one publishbatch.lua call: a call holds Redis for
// about 5 µs an event, so a call of this size keeps other clients' commands waiting well
// under a millisecond.
const publishBatchMax = 100

// publishBatches sends the events on one Redis node: publishbatch.lua calls of up to
// publishBatchMax events each, all in one pipeline. An event whose predecessor on its
// stream is in an earlier call names that one's event mark (After), so the calls keep
// the order the whole batch would. When Redis refuses a call as a whole (an ACL user
// that may not write one of its keys), the events not appended are sent again one by one
// with publish.lua, so that each gets its own answer, as on Redis Cluster.
func (b *RedisBroker) publishBatches(ctx context.Context, prev []int, calls []scripts.Publish) ([]scripts.PublishReply, []error, error) {
	n := (len(calls) + publishBatchMax - 1) / publishBatchMax
	batches := make([]scripts.PublishBatch, n)
	for i := range calls {
		if j := prev[i]; j >= 0 && j/publishBatchMax != i/publishBatchMax {
			calls[i].After = calls[j].EventMark
		}
	}
	for c := range batches {
		batches[c] = scripts.PublishBatch{Control: b.keys.ControlStream(), WindowMS: PublishDedupeWindow.Milliseconds(),
			Events: calls[c*publishBatchMax : min((c+1)*publishBatchMax, len(calls))]}
	}
	cmds, err := runPipelined(ctx, b.rdb, n, func(pipe redis.Pipeliner, c int) *redis.Cmd {
		return batches[c].EvalSha(ctx, pipe)
	})
	if err != nil {
		return nil, nil, err
	}
	replies := make([]scripts.PublishReply, 0, len(calls))
	errs := make([]error, 0, len(calls))
	refusedCall := false
	for c, cmd := range cmds {
		res, err := scripts.ParsePublishBatch(cmd, len(batches[c].Events))
		if err != nil {
			// Refused as a whole before it ran (NOPERM for one of its keys, say): its
			// events, and the later ones of their streams, are taken again one by one.
			refusedCall = true
			for range batches[c].Events {
				replies, errs = append(replies, scripts.PublishReply{}), append(errs, err)
			}
			continue
		}
		for _, r := range res {
			replies, errs = append(replies, r.PublishReply), append(errs, r.Err)
		}
	}
	if !refusedCall {
		return replies, errs, nil
	}
	// Each event as publish.lua alone, as on Redis Cluster: the events that the calls
	// appended answer as duplicates there and keep their first answer; the others get
	// their own (appended, or refused with the reason that is theirs).
	again, againErrs, err := b.publishEach(ctx, prev, calls)
	if err != nil {
		return nil, nil, err
	}
	for i := range calls {
		if errs[i] != nil || replies[i].AfterRefused {
			replies[i], errs[i] = again[i], againErrs[i]
		}
	}
	return replies, errs, nil
}

// publishEach sends the events on Redis Cluster: publish.lua per event (their keys are
// in different slots), in one pipeline; each event after the first of its stream names
// the event mark of the one before it (After).
func (b *RedisBroker) publishEach(ctx context.Context, prev []int, calls []scripts.Publish) ([]scripts.PublishReply, []error, error) {
	for i := range calls {
		calls[i].After = ""
		if j := prev[i]; j >= 0 {
			calls[i].After = calls[j].EventMark
		}
	}
	cmds, err := runPipelined(ctx, b.rdb, len(calls), func(pipe redis.Pipeliner, i int) *redis.Cmd {
		return calls[i].EvalSha(ctx, pipe)
	})
	if err != nil {
		return nil, nil, err
	}
	replies := make([]scripts.PublishReply, len(calls))
	errs := make([]error, len(calls))
	for i, cmd := range cmds {
		replies[i], errs[i] = scripts.ParsePublish(cmd)
	}
	return replies, errs, nil
}

// ErrPublishAfterRefused: PublishMany did not append an event because the event before it
// on the same stream in the batch was not appended.
var ErrPublishAfterRefused = errors.New("engine: not appended after a refused event of the same stream")

// predecessors returns, for each event of a batch, the index of the event before it on
// its stream (-1 for the first of its stream).
func predecessors(routes []Route) []int {
	prev := make([]int, len(routes))
	last := map[string]int{} // stream -> index of its last event so far
	for i, r := range routes {
		j, ok := last[r.Stream]
		if !ok {
			j = -1
		}
		prev[i], last[r.Stream] = j, i
	}
	return prev
}
