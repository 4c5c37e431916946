package deliver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/pkg/engine"
)

// recorded is one request the test server saw.
type recorded struct {
	header http.Header
	body   []byte
}

// testServer answers every request with answer and records it.
func testServer(t *testing.T, answer http.HandlerFunc) (*httptest.Server, func() []recorded, *atomic.Int64) {
	t.Helper()
	var mu sync.Mutex
	var reqs []recorded
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, recorded{header: r.Header.Clone(), body: body})
		mu.Unlock()
		answer(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, func() []recorded { mu.Lock(); defer mu.Unlock(); return append([]recorded(nil), reqs...) }, &conns
}

func newTestClient(t *testing.T) *http.Client {
	c := NewHTTPClient()
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestHTTPDelivers(t *testing.T) {
	srv, reqs, conns := testServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	secret := []byte("s3cret")
	fn, err := HTTP(HTTPConfig{URL: srv.URL + "/orders", Keys: [][]byte{secret}, Client: newTestClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, ev := testEvent(t, `{"order_id":"o-1","client_id":"client-7"}`)
	for i := 0; i < 5; i++ {
		if err := fn(ctx, ev); err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	got := reqs()
	if len(got) != 5 {
		t.Fatalf("%d requests, want 5", len(got))
	}
	d, _ := engine.DeliveryFrom(ctx)
	wantBody, _ := Marshal(ev, d)
	r := got[0]
	if string(r.body) != string(wantBody) {
		t.Errorf("body = %s\nwant %s", r.body, wantBody)
	}
	wantHeaders := map[string]string{
		"Content-Type":     "application/json",
		"X-Seq-Handler":    "OrderProjector",
		"X-Seq-Stream":     "order:client-7",
		"X-Seq-Key":        "client-7",
		"X-Seq-Event-Id":   ev.ID,
		"X-Seq-Generation": "42",
		"X-Seq-Attempt":    "3",
	}
	gotHeaders := map[string]string{}
	for k := range wantHeaders {
		gotHeaders[k] = r.header.Get(k)
	}
	if diff := cmp.Diff(wantHeaders, gotHeaders); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	req := httptest.NewRequest(http.MethodPost, "/orders", nil)
	req.Header = r.header
	if err := Verify(req, r.body, secret); err != nil {
		t.Errorf("signature does not verify: %v", err)
	}
	if err := Verify(req, r.body, []byte("other")); !errors.Is(err, ErrBadSignature) {
		t.Errorf("verify under another key = %v, want ErrBadSignature", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 5 sequential requests, want 1 (keep-alive)", n)
	}
}

func TestHTTPUnsignedHasNoSignature(t *testing.T) {
	srv, reqs, _ := testServer(t, func(w http.ResponseWriter, r *http.Request) {})
	fn, _ := HTTP(HTTPConfig{URL: srv.URL, Client: newTestClient(t)})
	ctx, ev := testEvent(t, `{}`)
	if err := fn(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if s := reqs()[0].header.Get(HeaderSignature); s != "" {
		t.Errorf("X-Seq-Signature = %q on an unsigned handler", s)
	}
}

func TestHTTPFailures(t *testing.T) {
	long := strings.Repeat("x", 600)
	tests := []struct {
		name    string
		answer  http.HandlerFunc
		timeout time.Duration
		want    string // the exact reason, or a prefix ending in "..."
	}{
		{
			name:   "500 with a body",
			answer: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "database is down", 500) },
			want:   "http 500 Internal Server Error: database is down",
		},
		{
			name: "body excerpt is the first 512 bytes",
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(503)
				_, _ = io.WriteString(w, "busy:"+long)
			},
			want: "http 503 Service Unavailable: busy:" + long[:512-5],
		},
		{
			name: "multi-byte character cut at the limit",
			answer: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(502)
				_, _ = io.WriteString(w, strings.Repeat("a", 511)+"é!")
			},
			want: "http 502 Bad Gateway: " + strings.Repeat("a", 511),
		},
		{
			name:   "empty body",
			answer: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(409) },
			want:   "http 409 Conflict (empty body)",
		},
		{
			name:   "a redirect is not followed",
			answer: func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) },
			want:   "http 302 Found (empty body)",
		},
		{
			name:    "timeout",
			answer:  func(w http.ResponseWriter, r *http.Request) { time.Sleep(300 * time.Millisecond) },
			timeout: 50 * time.Millisecond,
			want:    "http POST URL: no answer within the 50ms timeout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _, _ := testServer(t, tt.answer)
			fn, _ := HTTP(HTTPConfig{URL: srv.URL, Timeout: tt.timeout, Client: newTestClient(t)})
			ctx, ev := testEvent(t, `{}`)
			err := fn(ctx, ev)
			if err == nil {
				t.Fatal("attempt succeeded, want a failure")
			}
			want := strings.ReplaceAll(tt.want, "URL", srv.URL)
			if err.Error() != want {
				t.Errorf("reason = %q\nwant     %q", err, want)
			}
		})
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/x"
	ln.Close()
	fn, _ := HTTP(HTTPConfig{URL: url, Client: newTestClient(t)})
	ctx, ev := testEvent(t, `{}`)
	err = fn(ctx, ev)
	if err == nil || !strings.HasPrefix(err.Error(), "http POST "+url+": dial tcp") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("reason = %v, want the dial error", err)
	}
}

func TestHTTPCancelledByEngine(t *testing.T) {
	release := make(chan struct{})
	srv, _, _ := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	fn, _ := HTTP(HTTPConfig{URL: srv.URL, Client: newTestClient(t)})
	ctx, ev := testEvent(t, `{}`)
	ctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	err := fn(ctx, ev)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "lease lost or shutdown") {
		t.Errorf("err = %v, want a cancellation", err)
	}
}

func TestHTTPRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "ftp://x/y", "http://", "127.0.0.1:8080/x"} {
		if _, err := HTTP(HTTPConfig{URL: u}); err == nil {
			t.Errorf("HTTP(%q) accepted", u)
		}
	}
}
