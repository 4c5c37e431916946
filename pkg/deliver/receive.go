package deliver

import (
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

// MaxBodyBytes is the largest request body Receive reads (an event envelope).
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
		env, d, err := receivedDelivery(r, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := ib.Apply(r.Context(), d, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx, env) })
		switch {
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

// receivedDelivery reads the envelope and the delivery a request carries.
func receivedDelivery(r *http.Request, body []byte) (Envelope, engine.Delivery, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return env, engine.Delivery{}, fmt.Errorf("the body is not a seqctl event envelope: %v", err)
	}
	gen, err := strconv.ParseInt(r.Header.Get(HeaderGeneration), 10, 64)
	if err != nil {
		return env, engine.Delivery{}, fmt.Errorf("%s %q is not a generation", HeaderGeneration, r.Header.Get(HeaderGeneration))
	}
	attempt, _ := strconv.Atoi(r.Header.Get(HeaderAttempt))
	d := engine.Delivery{Handler: r.Header.Get(HeaderHandler), Category: env.Category, Key: env.Key,
		Stream: env.Stream, EntryID: env.EntryID, Generation: gen, Attempt: attempt}
	if d.Handler == "" || d.Stream == "" || d.EntryID == "" {
		return env, engine.Delivery{}, fmt.Errorf("not a seqctl delivery: %s, the envelope's stream and entry_id are required", HeaderHandler)
	}
	return env, d, nil
}
