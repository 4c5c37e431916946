package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// MaxKeyBytes is the longest partition key accepted, in bytes. keyspace.Keys become a segment of a
// Redis key name, so they are bounded to keep stream names readable and cheap.
const MaxKeyBytes = 255

// DefaultBackfillSuffix is the lane token used when [server.priority_lanes] does not set
// backfill_suffix.
const DefaultBackfillSuffix = "backfill"

// KeyRule names the rule a rejected partition key broke. ValidateKey applies its rules in
// the order its doc gives, and the first one broken is reported.
type KeyRule int

const (
	// KeyEmpty: the key is null, missing or the empty string.
	KeyEmpty KeyRule = iota + 1
	// KeyTooLong: the key is longer than MaxKeyBytes bytes.
	KeyTooLong
	// KeyHasColon: the key contains ':', which would split the stream name.
	KeyHasColon
	// KeyReservedToken: the key equals "dlq" or the configured backfill suffix.
	KeyReservedToken
	// KeySentinel: the key has the reserved __name__ form (length >= 4, starts and ends
	// with "__"), used by internal keys such as __partitions__.
	KeySentinel
	// KeyWrongType: the payload field is not a string or an integer.
	KeyWrongType
	// KeyControlChar: the key contains a control character (bytes 0x00-0x1F, NUL
	// included, or 0x7F). Such a key cannot be delivered: HTTP headers and exec
	// environments refuse it, so every event of the key would halt.
	KeyControlChar
	// KeyHasBrace: the key contains '{' or '}', which would change the Redis Cluster hash
	// tag of the partition's internal keys ({category:key}:__lease__:...) and split them
	// from the partition's stream.
	KeyHasBrace
)

// String returns a short stable name for the rule, used in logs and JSON.
func (r KeyRule) String() string {
	switch r {
	case KeyEmpty:
		return "empty"
	case KeyTooLong:
		return "too_long"
	case KeyHasColon:
		return "contains_colon"
	case KeyReservedToken:
		return "reserved_token"
	case KeySentinel:
		return "reserved_sentinel"
	case KeyWrongType:
		return "wrong_type"
	case KeyControlChar:
		return "control_character"
	case KeyHasBrace:
		return "contains_brace"
	default:
		return "unknown"
	}
}

// InvalidKeyError reports a partition key that cannot be used as a stream-name segment.
// Nothing is published or written when it is returned.
type InvalidKeyError struct {
	Category string  // the stream category, "" when not known to the caller
	Field    string  // the payload field the key came from, "" when validated directly
	Key      string  // the offending value (truncated to 64 bytes in the message)
	Rule     KeyRule // which rule was broken
	Token    string  // for KeyReservedToken: the reserved token it equals
	Detail   string  // for KeyWrongType: the JSON type found
	// Missing and Null say why a KeyEmpty key from a payload is empty: the field is
	// absent, or null (both false: the empty string).
	Missing, Null bool
}

// ErrInvalidKey is matched by every *InvalidKeyError through errors.Is.
var ErrInvalidKey = errors.New("engine: invalid partition key")

func (e *InvalidKeyError) Is(target error) bool { return target == ErrInvalidKey }

func (e *InvalidKeyError) Error() string {
	var b strings.Builder
	b.WriteString("engine: invalid partition key")
	if e.Category != "" {
		fmt.Fprintf(&b, " for category %q", e.Category)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, " (field %q)", e.Field)
	}
	b.WriteString(": ")
	shown := e.Key
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	switch e.Rule {
	case KeyEmpty:
		switch {
		case e.Missing:
			fmt.Fprintf(&b, "the payload has no field %q; every partitioned event needs it, as a non-empty string or an integer", e.Field)
		case e.Null:
			fmt.Fprintf(&b, "the field %q is null; every partitioned event needs a non-empty string or an integer there", e.Field)
		default:
			b.WriteString("the key is null or empty; every partitioned event needs a non-empty key")
		}
	case KeyTooLong:
		fmt.Fprintf(&b, "the key is %d bytes, longer than the limit of %d bytes", len(e.Key), MaxKeyBytes)
	case KeyHasColon:
		fmt.Fprintf(&b, "%q contains ':', which would split the stream name {category}:{key}", shown)
	case KeyReservedToken:
		fmt.Fprintf(&b, "%q equals the reserved lane token %q (reserved tokens: %q and the backfill suffix)", shown, e.Token, keyspace.DLQToken)
	case KeySentinel:
		fmt.Fprintf(&b, "%q has the reserved __name__ form used by internal keys such as __partitions__", shown)
	case KeyWrongType:
		fmt.Fprintf(&b, "the field holds a JSON %s; a partition key must be a string or an integer", e.Detail)
	case KeyControlChar:
		i := strings.IndexFunc(e.Key, func(r rune) bool { return r < 0x20 || r == 0x7f })
		fmt.Fprintf(&b, "%q contains the control character %U at byte %d; keys travel in HTTP headers and process environments, which refuse control characters", shown, e.Key[i], i)
	case KeyHasBrace:
		fmt.Fprintf(&b, "%q contains '{' or '}', which would change the Redis Cluster hash tag of the partition's keys", shown)
	}
	return b.String()
}

// ValidateKey checks a partition key against the rules of the specification, in order:
// null or empty, longer than MaxKeyBytes, contains ':', equals "dlq" or backfillSuffix
// (case-sensitive), the __name__ sentinel form; then the rules that keep a key
// deliverable and in one hash slot: a control character (0x00-0x1F or 0x7F), '{' or '}'.
// It returns a *InvalidKeyError naming the first rule broken, or nil. An empty
// backfillSuffix means DefaultBackfillSuffix.
func ValidateKey(key, backfillSuffix string) error {
	if backfillSuffix == "" {
		backfillSuffix = DefaultBackfillSuffix
	}
	fail := func(r KeyRule, token string) error {
		return &InvalidKeyError{Key: key, Rule: r, Token: token}
	}
	switch {
	case key == "":
		return fail(KeyEmpty, "")
	case len(key) > MaxKeyBytes:
		return fail(KeyTooLong, "")
	case strings.IndexByte(key, ':') >= 0:
		return fail(KeyHasColon, "")
	case key == keyspace.DLQToken:
		return fail(KeyReservedToken, keyspace.DLQToken)
	case key == backfillSuffix:
		return fail(KeyReservedToken, backfillSuffix)
	case isSentinel(key):
		return fail(KeySentinel, "")
	case hasControl(key):
		return fail(KeyControlChar, "")
	case strings.ContainsAny(key, "{}"):
		return fail(KeyHasBrace, "")
	}
	return nil
}

// ValidateStreamKey applies only the rules a stream name needs (empty, too long, ':',
// reserved token, sentinel form): the rules of ValidateKey before control characters and
// braces were refused. Code that reads partitions already in Redis (listing, operator
// tools) uses it, so a partition published under the earlier rules stays visible and
// can be resolved; new keys go through ValidateKey.
func ValidateStreamKey(key, backfillSuffix string) error {
	err := ValidateKey(key, backfillSuffix)
	var ike *InvalidKeyError
	if errors.As(err, &ike) && (ike.Rule == KeyControlChar || ike.Rule == KeyHasBrace) {
		return nil
	}
	return err
}

// hasControlBytes is hasControl of a byte slice.
func hasControlBytes(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// hasControl reports a byte 0x00-0x1F or 0x7F (bytes, not runes: invalid UTF-8 is
// checked byte by byte too).
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// isSentinel reports the reserved __name__ form: at least 4 bytes, starting and ending
// with "__". "____" is a sentinel; "___" is not (the two underscores would overlap).
func isSentinel(s string) bool {
	return len(s) >= 4 && strings.HasPrefix(s, "__") && strings.HasSuffix(s, "__")
}

// ExtractKey reads the partition key from a JSON object payload by top-level field name.
// A string is used as is; an integer is rendered in decimal. A missing field, null, or any
// other JSON type (float, bool, object, array) is an error. The key is then validated with
// ValidateKey; errors are *InvalidKeyError with Field set.
func ExtractKey(payload []byte, field, backfillSuffix string) (string, error) {
	raw, ok, err := topLevelField(payload, field)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", &InvalidKeyError{Field: field, Rule: KeyEmpty, Missing: true}
	}
	key, kerr := keyFromJSON(raw)
	return fieldKey(key, kerr, field, backfillSuffix)
}

// fieldKey finishes the key read from a payload's field: the error of its reading, or of
// its validation, names the field.
func fieldKey(key string, kerr *InvalidKeyError, field, backfillSuffix string) (string, error) {
	if kerr != nil {
		kerr.Field = field
		return "", kerr
	}
	if err := ValidateKey(key, backfillSuffix); err != nil {
		ike := err.(*InvalidKeyError)
		ike.Field = field
		return "", ike
	}
	return key, nil
}

// topLevelField returns the value of a JSON object's top-level member named field (the
// last one, when the name repeats), and whether there is one. A payload that is one
// valid JSON object is scanned in place, without decoding its members (a publish, a relay
// row and a limited run each read a key: this is most of their client-side cost
// otherwise); any other payload is refused, with encoding/json's words for what is wrong.
func topLevelField(payload []byte, field string) (raw []byte, found bool, err error) {
	if i := skipJSONSpace(payload, 0); i < len(payload) && payload[i] == '{' && json.Valid(payload) {
		raw, found = scanObjectField(payload, i, field)
		return raw, found, nil
	}
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, false, fmt.Errorf("engine: event payload is not a JSON object: %w", errOr(err, errors.New("null")))
	}
	// One object decoded, yet the payload is not valid JSON: something follows it (a
	// second value, or a stray closing bracket, which Decoder.More does not report).
	return nil, false, errors.New("engine: event payload has data after its JSON object; send exactly one object")
}

// scanObjectField finds the last member named field of the valid JSON object that starts
// at obj[i]. A member's name is compared as encoding/json decodes it (escapes resolved,
// invalid UTF-8 replaced), so it finds what a decode into a map would.
func scanObjectField(obj []byte, i int, field string) (raw []byte, found bool) {
	i++ // '{'
	for {
		i = skipJSONSpace(obj, i)
		if obj[i] == '}' {
			return raw, found
		}
		end := endOfJSONString(obj, i)
		name := obj[i:end]
		i = skipJSONSpace(obj, end) + 1 // ':'
		i = skipJSONSpace(obj, i)
		vend := endOfJSONValue(obj, i)
		if jsonNameIs(name, field) {
			raw, found = obj[i:vend], true
		}
		i = skipJSONSpace(obj, vend)
		if obj[i] == '}' {
			return raw, found
		}
		i++ // ','
	}
}

// jsonNameIs reports whether a quoted JSON member name decodes to field.
func jsonNameIs(quoted []byte, field string) bool {
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) == field
	}
	var s string
	return json.Unmarshal(quoted, &s) == nil && s == field
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// endOfJSONString returns the index just past the string that starts at b[i] ('"').
func endOfJSONString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// endOfJSONValue returns the index just past the value that starts at b[i].
func endOfJSONValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return endOfJSONString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = endOfJSONString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i // a number or a literal
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}

func errOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// keyFromJSON turns one JSON value into a key string.
func keyFromJSON(raw json.RawMessage) (string, *InvalidKeyError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", &InvalidKeyError{Rule: KeyEmpty, Null: true}
	}
	switch raw[0] {
	case '"':
		if len(raw) >= 2 && raw[len(raw)-1] == '"' {
			if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && bytes.IndexByte(inner, '"') < 0 && utf8.Valid(inner) && !hasControlBytes(inner) {
				return string(inner), nil // nothing to unescape or replace
			}
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", &InvalidKeyError{Rule: KeyWrongType, Detail: "malformed string"}
		}
		return s, nil
	case '{':
		return "", &InvalidKeyError{Rule: KeyWrongType, Detail: "object"}
	case '[':
		return "", &InvalidKeyError{Rule: KeyWrongType, Detail: "array"}
	case 't', 'f':
		return "", &InvalidKeyError{Rule: KeyWrongType, Detail: "boolean"}
	}
	// A number: only integers are keys ("1.0" and "1e3" are floats and refused, since
	// two spellings of one value would otherwise name two partitions).
	s := string(raw)
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(v, 10), nil // canonical: -0 and 0 are one partition
	}
	if isDecimalInteger(s) { // beyond int64: still an exact integer
		return s, nil
	}
	return "", &InvalidKeyError{Key: s, Rule: KeyWrongType, Detail: "non-integer number"}
}

func isDecimalInteger(s string) bool {
	if strings.HasPrefix(s, "-") {
		s = s[1:]
	}
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
