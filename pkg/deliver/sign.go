package deliver

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SignatureVersion prefixes each signature in X-Seq-Signature.
const SignatureVersion = "v1"

// DefaultTolerance is how far X-Seq-Timestamp may be from the receiver's clock, either
// way, when Verifier.Tolerance is zero.
const DefaultTolerance = 5 * time.Minute

// Errors Verify returns, matched with errors.Is.
var (
	ErrNoSignature    = errors.New("deliver: the request has no X-Seq-Signature or no X-Seq-Timestamp")
	ErrBadSignature   = errors.New("deliver: the signature does not match (wrong key, or the method, path, an X-Seq-* header or the body changed)")
	ErrStaleTimestamp = errors.New("deliver: X-Seq-Timestamp is outside the tolerance (a replayed request, or clocks apart)")
)

// CanonicalString returns what a request is signed over (HMAC-SHA256, see Sign). Each
// signed request carries X-Seq-Timestamp (Unix seconds when the attempt was sent) and
// X-Seq-Signature: "v1=" and the hex HMAC-SHA256 of this string, one "v1=<hex>" per
// signing key, comma separated (two while a key is rotated). The string is, with "\n"
// after each line:
//
//	seqctl-v1
//	METHOD                                (POST)
//	REQUEST-URI                           (path and query as sent: /orders?tenant=7)
//	name:value                            (every X-Seq-* header but X-Seq-Signature,
//	...                                    name in lower case, sorted by name, one line per
//	                                       value in the order received, value trimmed)
//	                                      (an empty line)
//
// followed by the raw body. X-Seq-Timestamp, the generation and the attempt are X-Seq-*
// headers, so they are signed; a header added, removed or changed on the way fails the
// check, and so does a stale timestamp (Verifier.Tolerance).
func CanonicalString(method, requestURI string, header http.Header, body []byte) []byte {
	var names []string
	for name := range header {
		n := strings.ToLower(name)
		if strings.HasPrefix(n, "x-seq-") && n != "x-seq-signature" {
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	var b bytes.Buffer
	b.WriteString("seqctl-" + SignatureVersion + "\n")
	b.WriteString(method + "\n")
	b.WriteString(requestURI + "\n")
	for _, name := range names {
		for _, v := range header[name] {
			b.WriteString(strings.ToLower(name) + ":" + strings.TrimSpace(v) + "\n")
		}
	}
	b.WriteString("\n")
	b.Write(body)
	return b.Bytes()
}

// Sign returns the X-Seq-Signature value of a canonical string (CanonicalString): one
// "v1=<hex HMAC-SHA256>" per key, comma separated, in the order of keys.
func Sign(canonical []byte, keys ...[]byte) string {
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		sigs = append(sigs, SignatureVersion+"="+hex.EncodeToString(mac(k, canonical)))
	}
	return strings.Join(sigs, ",")
}

func mac(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// signRequest sets X-Seq-Timestamp and X-Seq-Signature on req, whose body is body.
func signRequest(req *http.Request, body []byte, now time.Time, keys [][]byte) {
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Del(HeaderSignature)
	req.Header.Set(HeaderSignature, Sign(CanonicalString(req.Method, req.URL.RequestURI(), req.Header, body), keys...))
}

// Verifier checks signed deliveries on the receiving end. The zero value accepts
// nothing: set Keys.
type Verifier struct {
	// Keys are the keys a signature may be made with: the one key, or during a rotation
	// the new one and the old one (a request is accepted when any of its signatures
	// matches any key).
	Keys [][]byte
	// Tolerance is how far X-Seq-Timestamp may be from Now, either way (default
	// DefaultTolerance). A captured request replayed later than that is refused; within
	// it, a replay is the same delivery again, which an idempotent handler absorbs.
	Tolerance time.Duration
	// Now is the receiver's clock (default time.Now).
	Now func() time.Time
}

// Verify checks r, whose body (read in full, before parsing) is body: its timestamp
// within the tolerance and a signature, by one of the keys, over its method, request URI,
// X-Seq-* headers and body. It returns nil, or an error matching ErrNoSignature,
// ErrStaleTimestamp or ErrBadSignature. The comparison is constant-time.
//
// The request URI is r.RequestURI as received (r.URL.RequestURI() for a request built
// by hand). Behind a proxy that rewrites the path, give Verify a copy of r whose
// RequestURI is the one seqctl sent.
func (v *Verifier) Verify(r *http.Request, body []byte) error {
	sigHeader, ts := r.Header.Get(HeaderSignature), r.Header.Get(HeaderTimestamp)
	if sigHeader == "" || ts == "" {
		return ErrNoSignature
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: X-Seq-Timestamp %q is not Unix seconds", ErrStaleTimestamp, ts)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	if d := now().Sub(time.Unix(sec, 0)); d > tol || d < -tol {
		return fmt.Errorf("%w: sent %v ago, tolerance %v", ErrStaleTimestamp, d.Round(time.Second), tol)
	}
	// The request URI as received (what the sender wrote on the request line), unless
	// r was built by hand or came through a proxy in absolute form.
	uri := r.RequestURI
	if !strings.HasPrefix(uri, "/") {
		uri = r.URL.RequestURI()
	}
	canonical := CanonicalString(r.Method, uri, r.Header, body)
	ok := false
	for _, key := range v.Keys {
		if len(key) == 0 {
			continue
		}
		want := mac(key, canonical)
		for _, part := range strings.Split(sigHeader, ",") {
			ver, hexSig, found := strings.Cut(strings.TrimSpace(part), "=")
			if !found || ver != SignatureVersion {
				continue
			}
			got, err := hex.DecodeString(hexSig)
			if err == nil && hmac.Equal(got, want) {
				ok = true // keep looping: the time taken does not say which key matched
			}
		}
	}
	if !ok {
		return ErrBadSignature
	}
	return nil
}

// Verify checks a signed delivery with the default tolerance: see Verifier.Verify.
// keys are the accepted keys (two while rotating).
func Verify(r *http.Request, body []byte, keys ...[]byte) error {
	return (&Verifier{Keys: keys}).Verify(r, body)
}
