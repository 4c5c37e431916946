package deliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/redact"
)

// HTTPConfig configures the delivery of one handler to an HTTP endpoint.
type HTTPConfig struct {
	// URL is the http:// or https:// endpoint the envelope is POSTed to.
	URL string
	// Timeout bounds one attempt, from sending the request to reading the answer's
	// status (default DefaultTimeout).
	Timeout time.Duration
	// Keys sign each request (X-Seq-Timestamp and X-Seq-Signature, see CanonicalString):
	// one signature per key, so while a key is rotated a receiver holding either key
	// accepts the request. None sends unsigned requests (X-Seq-Timestamp is sent anyway).
	Keys [][]byte
	// Client sends the requests. Share one across handlers so connections are kept alive
	// and reused (default: a NewHTTPClient of its own).
	Client *http.Client
}

// BodyExcerptBytes is how much of a failed answer's body goes into the failure reason.
const BodyExcerptBytes = 512

// drainBytes is how much of an answer is read and discarded so its connection can be
// reused; a longer body closes the connection instead.
const drainBytes = 64 << 10

// NewHTTPClient returns the client HTTP deliveries share: keep-alive connections with
// enough idle connections per host for every partition worker of an instance (each
// worker has at most one request in flight), no redirects (a 3xx answer is a failure,
// since a POST must not silently become a GET), and no overall client timeout (each
// attempt has its own).
func NewHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 512
	tr.IdleConnTimeout = 90 * time.Second
	tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// StatusError is an answer outside 2xx. Its message is the failure reason recorded when
// the partition halts: "http 500 Internal Server Error: <first 512 bytes of the body>".
type StatusError struct {
	StatusCode int
	// Status is the status line's code and reason, e.g. "500 Internal Server Error".
	Status string
	// Body is the start of the answer body (at most BodyExcerptBytes), valid UTF-8.
	Body string
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return "http " + e.Status + " (empty body)"
	}
	return "http " + e.Status + ": " + e.Body
}

type httpDeliverer struct {
	url     string
	shown   string // url with its secrets masked, for failure reasons (halt records)
	timeout time.Duration
	keys    [][]byte
	client  *http.Client
}

// HTTP returns a HandlerFunc that POSTs each event's envelope (see Marshal) to cfg.URL,
// with the delivery in X-Seq-* headers. A 2xx answer means done; any other status (as a
// *StatusError), a connection error or the timeout fails the attempt. When the engine
// cancels the handler's context (lease lost, shutdown deadline) the request is
// abandoned.
func HTTP(cfg HTTPConfig) (engine.HandlerFunc, error) {
	h, err := newHTTP(cfg)
	if err != nil {
		return nil, err
	}
	return h.deliver, nil
}

func newHTTP(cfg HTTPConfig) (*httpDeliverer, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("deliver: %q is not an http:// or https:// URL with a host", redact.URL(cfg.URL))
	}
	h := &httpDeliverer{url: cfg.URL, shown: redact.URL(cfg.URL), timeout: cfg.Timeout, client: cfg.Client}
	if h.timeout <= 0 {
		h.timeout = DefaultTimeout
	}
	if h.client == nil {
		h.client = NewHTTPClient()
	}
	for _, k := range cfg.Keys {
		if len(k) > 0 {
			h.keys = append(h.keys, append([]byte(nil), k...))
		}
	}
	return h, nil
}

func (h *httpDeliverer) deliver(ctx context.Context, ev engine.Event) error {
	d := deliveryOf(ctx, ev)
	body, err := Marshal(ev, d)
	if err != nil {
		return err
	}
	return h.post(ctx, d, ev.ID, body, nil)
}

// HTTPBatch returns the BatchFunc of a handler that takes runs of events (batch_max above
// 1): each run is one POST to cfg.URL whose body is a JSON array of the envelopes its
// events would be sent one by one (MarshalBatch), in order, signed over the whole body.
// Next to the headers of a single delivery (X-Seq-Event-Id is the first event's) it
// carries X-Seq-First-Entry, X-Seq-Last-Entry and X-Seq-Batch-Size. A 2xx answer means
// every event of the run is done; any other status, a connection error or the timeout
// fails the whole run, as for HTTP.
func HTTPBatch(cfg HTTPConfig) (engine.BatchFunc, error) {
	h, err := newHTTP(cfg)
	if err != nil {
		return nil, err
	}
	return h.deliverBatch, nil
}

// deliverBatch POSTs a run of events as one JSON array.
func (h *httpDeliverer) deliverBatch(ctx context.Context, evs []engine.Event) error {
	if len(evs) == 0 {
		return nil
	}
	d := deliveryOf(ctx, evs[0])
	body, err := MarshalBatch(evs, d)
	if err != nil {
		return err
	}
	first, last := batchEntries(d, len(evs))
	return h.post(ctx, d, evs[0].ID, body, func(hd http.Header) {
		hd.Set(HeaderFirstEntry, first)
		hd.Set(HeaderLastEntry, last)
		hd.Set(HeaderBatchSize, strconv.Itoa(len(evs)))
	})
}

// post sends body, the delivery of d whose (first) event is eventID, with the X-Seq-*
// headers of the delivery and those more adds, and reads the answer.
func (h *httpDeliverer) post(ctx context.Context, d engine.Delivery, eventID string, body []byte, more func(http.Header)) error {
	actx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("http POST %s: %w", h.shown, redact.Error(err, h.url))
	}
	hd := req.Header
	hd.Set("Content-Type", "application/json")
	hd.Set("User-Agent", "seqctl")
	hd.Set(HeaderHandler, d.Handler)
	hd.Set(HeaderStream, d.Stream)
	hd.Set(HeaderKey, d.Key)
	hd.Set(HeaderEventID, eventID)
	hd.Set(HeaderGeneration, strconv.FormatInt(d.Generation, 10))
	hd.Set(HeaderAttempt, strconv.Itoa(d.Attempt))
	if v, slot, gen := limitFields(d); v != "" {
		hd.Set(HeaderLimitKey, v)
		hd.Set(HeaderLimitSlot, slot)
		hd.Set(HeaderLimitGeneration, gen)
	}
	if more != nil {
		more(hd)
	}
	if tp, ts := engine.TraceHeaders(ctx); tp != "" {
		hd.Set(HeaderTraceParent, tp)
		if ts != "" {
			hd.Set(HeaderTraceState, ts)
		}
	}
	if len(h.keys) > 0 {
		signRequest(req, body, time.Now(), h.keys)
	} else {
		hd.Set(HeaderTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return h.transportError(ctx, actx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
		return nil
	}
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, BodyExcerptBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
	err = &StatusError{StatusCode: resp.StatusCode, Status: resp.Status, Body: cleanExcerpt(excerpt)}
	if resp.StatusCode == http.StatusConflict && resp.Header.Get(HeaderInbox) == "stale" {
		// The receiver's inbox saw a newer owner's effects: this lease is lost.
		return fmt.Errorf("%w: %w", err, engine.ErrFenced)
	}
	return err
}

// transportError words a failed request: the engine cancelling the attempt, the
// handler's timeout, or the connection error itself (without Go's `Post "URL":` prefix,
// since the URL is added once).
func (h *httpDeliverer) transportError(ctx, actx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("http POST %s: attempt cancelled (lease lost or shutdown): %w", h.shown, ctx.Err())
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("http POST %s: no answer within the %v timeout", h.shown, h.timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("http POST %s: %w", h.shown, redact.Error(err, h.url))
}

// cleanExcerpt makes a body excerpt fit a one-line reason: valid UTF-8 (a multi-byte
// character cut at the limit is dropped) and no surrounding white space.
func cleanExcerpt(b []byte) string {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				b = b[:len(b)-i]
			}
			break
		}
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
}
