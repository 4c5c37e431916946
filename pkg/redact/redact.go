// Package redact hides the secrets of URLs and DSNs before they are shown: in errors,
// logs, halt records, the dashboard and metrics. Every URL or DSN seqctl prints goes
// through URL, and every error that may quote one through Error.
//
// What counts as a secret:
//
//   - the password of the userinfo (user:PASSWORD@host), even when the URL does not
//     parse (a password holding an unescaped %, @, :, / or # is still found: the userinfo
//     runs to the last @);
//   - the value of every query parameter, fragment parameter or key=value word whose
//     name looks like a secret: it contains token, key, secret, pass, pwd, sig, auth or
//     credential, in any case (access_token, api_key, password, sslpassword, X-Amz-Signature,
//     ...).
//
// The user name is kept: it names the account (a Redis ACL user, a database role) and
// operators need to see it. Each secret is replaced by Mask; the rest of the text is kept
// as written (nothing is re-encoded), so the result still reads like the original.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// spacedEquals is an = with white space around it, in key = value text.
var spacedEquals = regexp.MustCompile(`[ \t]*=[ \t]*`)

// Mask replaces every hidden value.
const Mask = "xxxxx"

// secretWords are the parts of a parameter name that mark its value as a secret.
var secretWords = []string{"token", "key", "secret", "pass", "pwd", "sig", "auth", "credential"}

// URL returns raw with its userinfo password and secret-looking parameter values
// replaced by Mask. It never fails: text that is not a URL at all is scanned for
// key=value words (a libpq "host=h password=p" DSN, a --token=... argument).
func URL(raw string) string {
	s, _ := scan(raw)
	return s
}

// secrets returns the secret values of raw as written in it (an unparsable password
// included), for Error to hide where a library quoted them without the whole URL.
func secrets(raw string) []string {
	_, found := scan(raw)
	return found
}

// scan masks raw and reports the values it hid.
func scan(raw string) (string, []string) {
	var found []string
	s := raw
	start := 0 // where the authority (or, without a scheme, the text) begins
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	if at := userinfoEnd(s, start); at >= 0 {
		if c := strings.IndexByte(s[start:at], ':'); c >= 0 {
			if pw := s[start+c+1 : at]; pw != "" {
				found = append(found, pw)
				s = s[:start+c+1] + Mask + s[at:]
			}
		}
	}
	// Parameters: in a URL, after the first ? or #; in other text, everywhere (libpq
	// allows "password = p": the spaces around = are dropped first).
	from := start
	if start == 0 {
		s = spacedEquals.ReplaceAllString(s, "=")
	} else {
		q := strings.IndexAny(s[start:], "?#")
		if q < 0 {
			return s, found
		}
		from = start + q
	}
	var b strings.Builder
	b.WriteString(s[:from])
	i := from
	for i < len(s) {
		// One word: up to the next separator.
		j := i
		for j < len(s) && !isSep(s[j]) {
			j++
		}
		word := s[i:j]
		if eq := strings.IndexByte(word, '='); eq > 0 && secretName(word[:eq]) {
			val := word[eq+1:]
			if strings.HasPrefix(val, "'") { // libpq quoting: password='a b'
				if end := closingQuote(s, i+eq+2); end > 0 {
					j = end + 1
					val = s[i+eq+1 : j]
				}
			}
			if val != "" {
				found = append(found, val)
				word = word[:eq+1] + Mask
			} else {
				word = word[:eq+1]
			}
		} else {
			word = s[i:j]
		}
		b.WriteString(word)
		if j < len(s) {
			b.WriteByte(s[j])
		}
		i = j + 1
	}
	return b.String(), found
}

// userinfoEnd returns the index of the @ that ends the userinfo of the URL whose
// authority starts at start, or -1. A password may hold unescaped /, ? or # (every client
// then misreads the URL, and its errors would show the password), so the userinfo
// normally runs to the last @. The exception is an http(s) URL that parses with its
// userinfo, or without one and without a colon in its authority: there an @ in the path
// or query (an e-mail address) is not taken for the end of a userinfo.
func userinfoEnd(s string, start int) int {
	rest := s[start:]
	end := len(rest)
	if start == 0 {
		// No scheme: "user:password@host:port" still counts, but only in the first word.
		if k := strings.IndexAny(rest, " \t\n"); k >= 0 {
			end = k
		}
	} else if u, err := url.Parse(s); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		authEnd := len(rest)
		if k := strings.IndexAny(rest, "/?#"); k >= 0 {
			authEnd = k
		}
		if u.User != nil || !strings.Contains(rest[:authEnd], ":") {
			end = authEnd
		}
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return -1
	}
	return start + at
}

func isSep(c byte) bool {
	switch c {
	case '&', ';', '?', '#', ' ', '\t', '\n', ',':
		return true
	}
	return false
}

// closingQuote returns the index of the quote closing a libpq value that starts at from
// (backslash escapes the next character), or -1.
func closingQuote(s string, from int) int {
	for k := from; k < len(s); k++ {
		switch s[k] {
		case '\\':
			k++
		case '\'':
			return k
		}
	}
	return -1
}

// secretName reports whether a parameter name looks like it holds a secret.
func secretName(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}
