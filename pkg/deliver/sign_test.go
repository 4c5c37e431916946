package deliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

// receiver is a handler endpoint that verifies every request, records the first
// verified one, and answers 204 or 401 with the reason.
type receiver struct {
	v    *Verifier
	skew atomic.Int64 // added to the receiver's clock, in nanoseconds

	mu    sync.Mutex
	first *http.Request // the first verified request; guarded by mu
	body  []byte        // its body; guarded by mu
}

func newReceiver(t *testing.T, keys ...[]byte) (*receiver, *httptest.Server) {
	t.Helper()
	rc := &receiver{}
	rc.v = &Verifier{Keys: keys, Tolerance: time.Minute, Now: func() time.Time { return time.Now().Add(time.Duration(rc.skew.Load())) }}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	return rc, srv
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := rc.v.Verify(r, body); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	rc.mu.Lock()
	if rc.first == nil {
		rc.first, rc.body = r.Clone(context.Background()), body
	}
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// captured returns the first verified request, as a client would send it again.
func (rc *receiver) captured(t *testing.T, base string) (*http.Request, []byte) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.first == nil {
		t.Fatal("no request was verified")
	}
	req, err := http.NewRequest(rc.first.Method, base+rc.first.URL.RequestURI(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range rc.first.Header {
		if strings.HasPrefix(k, "X-Seq-") || k == "Content-Type" {
			req.Header[k] = append([]string(nil), v...)
		}
	}
	return req, append([]byte(nil), rc.body...)
}

// TestVerifyRejectsReplayedOrAlteredRequests: a
// signed delivery is accepted by a receiver using Verifier; the same request replayed
// later than the tolerance, or altered in its generation, attempt, timestamp, body,
// path, query, method or X-Seq-* headers, or signed with another key, is refused.
func TestVerifyRejectsReplayedOrAlteredRequests(t *testing.T) {
	key := []byte("the signing key, 32 bytes or so.")
	rc, srv := newReceiver(t, key)
	fn, err := HTTP(HTTPConfig{URL: srv.URL + "/hooks/orders?tenant=7", Keys: [][]byte{key}, Client: newTestClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, ev := testEvent(t, `{"order_id":"o-1","client_id":"client-7"}`)
	if err := fn(ctx, ev); err != nil {
		t.Fatalf("signed delivery refused: %v", err)
	}

	tests := []struct {
		name   string
		change func(r *http.Request, body []byte) []byte
		skew   time.Duration
		want   string // "" for accepted, else part of the refusal
	}{
		{name: "replayed as is, within the tolerance", change: func(_ *http.Request, b []byte) []byte { return b }},
		{name: "replayed later than the tolerance", skew: 2 * time.Minute, want: "outside the tolerance"},
		{name: "replayed from the future", skew: -2 * time.Minute, want: "outside the tolerance"},
		{name: "timestamp refreshed", change: func(r *http.Request, b []byte) []byte {
			r.Header.Set(HeaderTimestamp, strconv.FormatInt(time.Now().Unix()+1, 10))
			return b
		}, skew: 0, want: "does not match"},
		{name: "higher generation", change: func(r *http.Request, b []byte) []byte { r.Header.Set(HeaderGeneration, "43"); return b }, want: "does not match"},
		{name: "generation added twice", change: func(r *http.Request, b []byte) []byte { r.Header.Add(HeaderGeneration, "43"); return b }, want: "does not match"},
		{name: "other attempt", change: func(r *http.Request, b []byte) []byte { r.Header.Set(HeaderAttempt, "1"); return b }, want: "does not match"},
		{name: "other key header", change: func(r *http.Request, b []byte) []byte { r.Header.Set(HeaderKey, "client-8"); return b }, want: "does not match"},
		{name: "extra X-Seq header", change: func(r *http.Request, b []byte) []byte { r.Header.Set("X-Seq-Priority", "9"); return b }, want: "does not match"},
		{name: "body changed", change: func(_ *http.Request, b []byte) []byte { return bytes.Replace(b, []byte("o-1"), []byte("o-2"), 1) }, want: "does not match"},
		{name: "path changed", change: func(r *http.Request, b []byte) []byte { r.URL.Path = "/hooks/refunds"; return b }, want: "does not match"},
		{name: "query changed", change: func(r *http.Request, b []byte) []byte { r.URL.RawQuery = "tenant=8"; return b }, want: "does not match"},
		{name: "method changed", change: func(r *http.Request, b []byte) []byte { r.Method = http.MethodPut; return b }, want: "does not match"},
		{name: "signature of another key", change: func(r *http.Request, b []byte) []byte {
			r.Header.Set(HeaderSignature, Sign(CanonicalString(r.Method, r.URL.RequestURI(), r.Header, b), []byte("not the key")))
			return b
		}, want: "does not match"},
		{name: "signature removed", change: func(r *http.Request, b []byte) []byte { r.Header.Del(HeaderSignature); return b }, want: "no X-Seq-Signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, body := rc.captured(t, srv.URL)
			if tt.change != nil {
				body = tt.change(req, body)
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
			rc.skew.Store(int64(tt.skew))
			defer rc.skew.Store(0)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			answer, _ := io.ReadAll(resp.Body)
			switch {
			case tt.want == "" && resp.StatusCode != http.StatusNoContent:
				t.Errorf("refused: %s %s", resp.Status, answer)
			case tt.want != "" && (resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(answer), tt.want)):
				t.Errorf("answer %s %q, want 401 with %q", resp.Status, answer, tt.want)
			}
		})
	}
}

// TestSigningKeyRotation rotates a key both ways: seqctl signs with the new and the
// previous key (signing_key_file + signing_previous_key_env), so a receiver holding
// either accepts; a receiver holding both accepts a sender that already dropped the old
// one; a receiver holding neither refuses.
func TestSigningKeyRotation(t *testing.T) {
	oldKey, newKey := []byte("old key: 0123456789abcdef"), []byte("new key: fedcba9876543210")
	keyFile := filepath.Join(t.TempDir(), "signing.key")
	if err := os.WriteFile(keyFile, append(newKey, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	bindOne := func(t *testing.T, url, deliver string) engine.HandlerFunc {
		t.Helper()
		cfg, err := config.Parse("domain.toml", []byte(fmt.Sprintf(shopProjector+`[handlers.deliver]
http = %q
%s
`, url, deliver)))
		if err != nil {
			t.Fatal(err)
		}
		dom, err := cfg.InitDomain()
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"OLD_KEY": string(oldKey)}
		b, err := Bind(cfg, dom, BindOptions{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, HTTPClient: newTestClient(t)})
		if err != nil {
			t.Fatal(err)
		}
		if !b[0].Signed {
			t.Fatal("binding not signed")
		}
		return dom.Handlers[0].Func
	}
	both := fmt.Sprintf("signing_key_file = %q\nsigning_previous_key_env = \"OLD_KEY\"", keyFile)
	newOnly := fmt.Sprintf("signing_key_file = %q", keyFile)
	tests := []struct {
		name    string
		sender  string
		keys    [][]byte
		refused bool
	}{
		{"sender both, receiver old", both, [][]byte{oldKey}, false},
		{"sender both, receiver new", both, [][]byte{newKey}, false},
		{"sender new, receiver both", newOnly, [][]byte{newKey, oldKey}, false},
		{"sender new, receiver old", newOnly, [][]byte{oldKey}, true},
		{"sender both, receiver another", both, [][]byte{[]byte("another key")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, srv := newReceiver(t, tt.keys...)
			fn := bindOne(t, srv.URL+"/orders", tt.sender)
			ctx, ev := testEvent(t, `{"order_id":"o-1","client_id":"client-7"}`)
			err := fn(ctx, ev)
			var se *StatusError
			switch {
			case !tt.refused && err != nil:
				t.Errorf("refused: %v", err)
			case tt.refused && (!errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized):
				t.Errorf("err = %v, want a 401", err)
			}
		})
	}
}

// TestPythonVerification runs the Python verification of docs/delivery.md against a
// request signed here (skipped without python3).
func TestPythonVerification(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	doc, err := os.ReadFile("../../docs/delivery.md")
	if err != nil {
		t.Fatal(err)
	}
	_, code, ok := strings.Cut(string(doc), "```python\n")
	if !ok {
		t.Fatal("docs/delivery.md has no python block")
	}
	code, _, _ = strings.Cut(code, "```")

	key := []byte("python-shared-key")
	rc, srv := newReceiver(t, key)
	fn, err := HTTP(HTTPConfig{URL: srv.URL + "/hooks/orders?tenant=7", Keys: [][]byte{key}, Client: newTestClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, ev := testEvent(t, `{"order_id":"o-1","client_id":"client-7","note":"caf\u00e9"}`)
	if err := fn(ctx, ev); err != nil {
		t.Fatal(err)
	}
	req, body := rc.captured(t, "")
	var hdrs strings.Builder
	for k, vs := range req.Header {
		for _, v := range vs {
			fmt.Fprintf(&hdrs, "(%q, %q),", k, v)
		}
	}
	check := func(body []byte, gen string) string {
		driver := code + fmt.Sprintf(`
import sys
headers = [%s]
headers = [(k, %q if k.lower() == "x-seq-generation" else v) for k, v in headers]
try:
    verify([b"wrong key", %q.encode()], "POST", %q, headers, bytes.fromhex(%q))
    print("ok")
except Exception as e:
    print("refused:", e)
`, hdrs.String(), gen, string(key), req.URL.RequestURI(), fmt.Sprintf("%x", body))
		out, err := exec.Command(py, "-c", driver).CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := check(body, "42"); got != "ok" {
		t.Errorf("python refused a valid request: %s", got)
	}
	if got := check(body, "43"); !strings.HasPrefix(got, "refused") {
		t.Errorf("python accepted a changed generation: %s", got)
	}
	if got := check(append(body, ' '), "42"); !strings.HasPrefix(got, "refused") {
		t.Errorf("python accepted a changed body: %s", got)
	}
}

// TestBindSigningKeyProblems: a key file that is missing or empty, or a variable that is
// unset, stops seqctl run at startup, naming the key and never a key's content.
func TestBindSigningKeyProblems(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.key")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		deliver, want string
	}{
		{fmt.Sprintf("signing_key_file = %q", filepath.Join(dir, "absent.key")), "handlers[0].deliver.signing_key_file: cannot read the signing key: open " + filepath.Join(dir, "absent.key")},
		{fmt.Sprintf("signing_key_file = %q", empty), "handlers[0].deliver.signing_key_file: cannot read the signing key: " + empty + " is empty"},
		{"signing_key_env = \"SET_KEY\"\nsigning_previous_key_env = \"UNSET_KEY\"", "handlers[0].deliver.signing_previous_key_env: the environment variable UNSET_KEY is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			cfg, err := config.Parse("domain.toml", []byte(`name = "shop"
[[events]]
name = "OrderPlaced"
category = "order"
fields = ["client_id"]
[[handlers]]
name = "OrderProjector"
handles = ["OrderPlaced"]
[handlers.deliver]
http = "http://127.0.0.1:1/x"
`+tt.deliver+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			dom, err := cfg.InitDomain()
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"SET_KEY": "a key that must not be shown"}
			_, err = Bind(cfg, dom, BindOptions{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Bind = %v, want a problem containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), env["SET_KEY"]) {
				t.Errorf("the problem shows a key: %v", err)
			}
		})
	}
}
