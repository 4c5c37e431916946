package deliver

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/inbox"
)

// HeaderInbox is the answer header of a receiver built with Receive: "applied",
// "duplicate" (acknowledged without running) or "stale" (with status 409: a newer owner
// applied the partition's effects; the sender gives the partition up).
const HeaderInbox = "X-Seq-Inbox"

// MaxBodyBytes is the largest request body Receive reads (an event envelope, or the array
// of a batch).
const MaxBodyBytes = 16 << 20

// ReceiveFunc applies an event's effects in the inbox's transaction. It must not commit
// or roll back tx.
type ReceiveFunc func(ctx context.Context, tx *sql.Tx, env Envelope) error

// Receive returns the http.Handler of an HTTP endpoint that seqctl delivers to (an
// [handlers.deliver] http table) in a service written in Go: it verifies the request's
// signature with v, reads the delivery from the X-Seq-* headers and the envelope, and
// applies fn through ib, in one transaction of the receiver's database. It answers:
//
//	200  applied: fn ran and its effects committed (the answer comes after the commit)
//	200  duplicate: the entry was applied before; fn did not run
//	400  a request that is not a delivery (no X-Seq-* headers, a body that is no envelope)
//	401  a forged signature, or one outside v's tolerance (a replayed request)
//	405  not a POST
//	409  stale: a newer owner of the partition applied its effects; nothing ran
//	500  fn failed, or the database did: the attempt failed and is retried
//
// A signed request replayed within the tolerance is the same delivery again: it is a
// duplicate.
//
// A batch (the array body of a handler with batch_max above 1, with X-Seq-Batch-Size,
// X-Seq-First-Entry and X-Seq-Last-Entry) is applied in one transaction with one claim for
// its last entry (inbox.ApplyBatch): fn runs once per envelope that was not applied
// before, in order, and the answer covers the whole batch: "applied" when fn ran for any
// of them, "duplicate" when every one was applied before, 500 when fn failed for any (none
// of the batch's effects commit).
func Receive(ib *inbox.Inbox, v *Verifier, fn ReceiveFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v == nil || ib == nil || fn == nil {
			http.Error(w, "deliver.Receive needs an inbox, a Verifier with the signing keys and a function", http.StatusInternalServerError)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "seqctl deliveries are POSTed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
		if err != nil {
			http.Error(w, "cannot read the request body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		if err := v.Verify(r, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		receive := receiveOne
		if isBatch(r, body) {
			receive = receiveBatch
		}
		out, err := receive(r, body, ib, fn)
		var bad badRequest
		switch {
		case errors.As(err, &bad):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case errors.Is(err, inbox.ErrStale):
			w.Header().Set(HeaderInbox, "stale")
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.Header().Set(HeaderInbox, out.String())
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, out.String()+"\n")
		}
	})
}

// badRequest is a request that is not a seqctl delivery (400).
type badRequest struct{ error }

// receiveOne applies the delivery of one event through the inbox.
func receiveOne(r *http.Request, body []byte, ib *inbox.Inbox, fn ReceiveFunc) (inbox.Outcome, error) {
	env, d, err := receivedDelivery(r, body)
	if err != nil {
		return 0, badRequest{err}
	}
	return ib.Apply(r.Context(), d, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx, env) })
}

// receiveBatch applies a batch through the inbox, in one transaction: fn runs for each
// envelope not applied before, in order.
func receiveBatch(r *http.Request, body []byte, ib *inbox.Inbox, fn ReceiveFunc) (inbox.Outcome, error) {
	envs, d, err := receivedBatch(r, body)
	if err != nil {
		return 0, badRequest{err}
	}
	evs := make([]engine.Event, len(envs))
	byEntry := make(map[string]Envelope, len(envs))
	for k, env := range envs {
		evs[k] = engine.Event{ID: env.ID, Type: env.Type, Category: env.Category, Key: env.Key, Data: env.Data, Priority: env.Priority}
		byEntry[env.EntryID] = env
	}
	return ib.ApplyBatch(r.Context(), d, evs, func(ctx context.Context, tx *sql.Tx, _ engine.Event) error {
		one, _ := engine.DeliveryFrom(ctx) // the event's own delivery (inbox.ApplyBatch)
		return fn(ctx, tx, byEntry[one.EntryID])
	})
}

// receivedDelivery reads the envelope and the delivery a request carries.
func receivedDelivery(r *http.Request, body []byte) (Envelope, engine.Delivery, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return env, engine.Delivery{}, fmt.Errorf("the body is not a seqctl event envelope: %v", err)
	}
	d, err := deliveryHeaders(r, env)
	return env, d, err
}

// deliveryHeaders reads the delivery of a request from its headers and its (first)
// envelope.
func deliveryHeaders(r *http.Request, env Envelope) (engine.Delivery, error) {
	gen, err := strconv.ParseInt(r.Header.Get(HeaderGeneration), 10, 64)
	if err != nil {
		return engine.Delivery{}, fmt.Errorf("%s %q is not a generation", HeaderGeneration, r.Header.Get(HeaderGeneration))
	}
	attempt, _ := strconv.Atoi(r.Header.Get(HeaderAttempt))
	d := engine.Delivery{Handler: r.Header.Get(HeaderHandler), Category: env.Category, Key: env.Key,
		Stream: env.Stream, EntryID: env.EntryID, Generation: gen, Attempt: attempt}
	if d.Handler == "" || d.Stream == "" || d.EntryID == "" {
		return engine.Delivery{}, fmt.Errorf("not a seqctl delivery: %s, the envelope's stream and entry_id are required", HeaderHandler)
	}
	return d, nil
}

// isBatch reports whether a request is a batch: it says so in X-Seq-Batch-Size, or its
// body is a JSON array.
func isBatch(r *http.Request, body []byte) bool {
	if r.Header.Get(HeaderBatchSize) != "" {
		return true
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '['
}

// receivedBatch reads the envelopes and the delivery of a batch, and checks that the
// headers describe the body: its size and its first and last entries, one stream, entry
// ids in stream order (inbox.ApplyBatch checks the order).
func receivedBatch(r *http.Request, body []byte) ([]Envelope, engine.Delivery, error) {
	var envs []Envelope
	if err := json.Unmarshal(body, &envs); err != nil {
		return nil, engine.Delivery{}, fmt.Errorf("the body is not a seqctl batch (a JSON array of event envelopes): %v", err)
	}
	if len(envs) == 0 {
		return nil, engine.Delivery{}, errors.New("the batch is empty: a seqctl batch holds at least one event envelope")
	}
	size, first, last := r.Header.Get(HeaderBatchSize), r.Header.Get(HeaderFirstEntry), r.Header.Get(HeaderLastEntry)
	switch {
	case size != strconv.Itoa(len(envs)):
		return nil, engine.Delivery{}, fmt.Errorf("%s %q does not match the body's %d envelopes", HeaderBatchSize, size, len(envs))
	case first != envs[0].EntryID || last != envs[len(envs)-1].EntryID:
		return nil, engine.Delivery{}, fmt.Errorf("%s %q and %s %q do not match the body's first and last entry_id (%q, %q)",
			HeaderFirstEntry, first, HeaderLastEntry, last, envs[0].EntryID, envs[len(envs)-1].EntryID)
	}
	d, err := deliveryHeaders(r, envs[0])
	if err != nil {
		return nil, engine.Delivery{}, err
	}
	d.Entries = make([]string, len(envs))
	for k, env := range envs {
		if env.Stream != d.Stream || env.EntryID == "" {
			return nil, engine.Delivery{}, fmt.Errorf("envelope %d of the batch is on stream %q with entry_id %q: a batch holds entries of one stream (%q), each with its entry_id", k+1, env.Stream, env.EntryID, d.Stream)
		}
		d.Entries[k] = env.EntryID
	}
	return envs, d, nil
}
