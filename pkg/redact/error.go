package redact

import (
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Error returns err with the secrets of the given URLs or DSNs hidden from its text:
// each URL quoted whole is replaced by URL(raw), each secret quoted alone by Mask, and
// the quoted fragments of a URL parse error (net/url's `invalid URL escape "%of"`, which
// is the middle of a password) are left out. nil stays nil.
//
// The result wraps err, so errors.Is and errors.As still see what it wraps; the text of
// those wrapped errors is not redacted: print the result, not them.
func Error(err error, raws ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.Op == "parse" {
		msg = strings.ReplaceAll(msg, ue.Error(), "parse "+strconv.Quote(URL(ue.URL))+": "+unquoted(ue.Err.Error()))
	} else {
		var ee url.EscapeError
		var he url.InvalidHostError
		switch {
		case errors.As(err, &ee):
			msg = strings.ReplaceAll(msg, ee.Error(), unquoted(ee.Error()))
		case errors.As(err, &he):
			msg = strings.ReplaceAll(msg, he.Error(), unquoted(he.Error()))
		}
	}
	for _, raw := range raws {
		if raw == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, raw, URL(raw))
		for _, s := range secrets(raw) {
			// A secret of one or two characters would mask unrelated text; such a
			// password is no protection anyway.
			if len(s) >= 3 {
				msg = strings.ReplaceAll(msg, s, Mask)
			}
		}
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// quotedPart is a Go-quoted fragment of a net/url error message, with its leading space.
var quotedPart = regexp.MustCompile(` ?"(?:[^"\\]|\\.)*"`)

// unquoted drops the quoted fragments of a net/url error ("invalid port \":pa\" after
// host" becomes "invalid port after host") and says how to write a literal %.
func unquoted(msg string) string {
	out := quotedPart.ReplaceAllString(msg, "")
	if strings.Contains(msg, "invalid URL escape") {
		out += " (percent-encode a % in a password as %25, an @ as %40, a : as %3A)"
	}
	return out
}
