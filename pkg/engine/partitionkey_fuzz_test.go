package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// expectedKeyRule is an independent statement of the key rules, in order, for the fuzzer
// to compare ValidateKey against. 0 means valid.
func expectedKeyRule(key, suffix string) KeyRule {
	if suffix == "" {
		suffix = "backfill"
	}
	switch {
	case len(key) == 0:
		return KeyEmpty
	case len(key) > 255:
		return KeyTooLong
	case strings.Contains(key, ":"):
		return KeyHasColon
	case key == "dlq" || key == suffix:
		return KeyReservedToken
	case len(key) >= 4 && key[:2] == "__" && key[len(key)-2:] == "__":
		return KeySentinel
	case strings.ContainsFunc(key, func(r rune) bool { return r >= 0 && r < 0x20 || r == 0x7f }) || strings.IndexByte(key, 0) >= 0:
		return KeyControlChar
	case strings.Contains(key, "{") || strings.Contains(key, "}"):
		return KeyHasBrace
	}
	return 0
}

func FuzzValidateKey(f *testing.F) {
	for _, seed := range []struct{ key, suffix string }{
		{"", ""}, {"client-123", ""}, {"a:b", ""}, {":", ""}, {"dlq", ""}, {"DLQ", ""},
		{"backfill", ""}, {"backfill", "slow"}, {"slow", "slow"}, {"__x__", ""},
		{"__partitions__", ""}, {"____", ""}, {"___", ""}, {"__lead", ""}, {"trail__", ""},
		{strings.Repeat("k", 255), ""}, {strings.Repeat("k", 256), ""}, {strings.Repeat("é", 128), ""},
		{"__a:b__", ""}, {"42", ""}, {"a\x00b", ""}, {"tab\there", ""}, {"del\x7f", ""}, {"{order}", ""}, {"a}", ""}, {"\x1f{", ""}, {"caf\u00e9", ""}, {"\xff\xfe", ""}, {"a b", ""}, {"x", "x"},
	} {
		f.Add(seed.key, seed.suffix)
	}
	f.Fuzz(func(t *testing.T, key, suffix string) {
		err := ValidateKey(key, suffix)
		want := expectedKeyRule(key, suffix)
		if err == nil {
			if want != 0 {
				t.Fatalf("ValidateKey(%q, %q) = nil, want rule %v", key, suffix, want)
			}
			effective := suffix
			if effective == "" {
				effective = DefaultBackfillSuffix
			}
			switch {
			case key == "":
				t.Fatalf("accepted an empty key")
			case len(key) > MaxKeyBytes:
				t.Fatalf("accepted a %d-byte key", len(key))
			case strings.Contains(key, ":"):
				t.Fatalf("accepted %q, which contains ':'", key)
			case key == "dlq" || key == effective:
				t.Fatalf("accepted the reserved token %q", key)
			case isSentinel(key):
				t.Fatalf("accepted the sentinel %q", key)
			case strings.ContainsAny(key, "{}"):
				t.Fatalf("accepted %q, which contains a brace", key)
			}
			for i := 0; i < len(key); i++ {
				if key[i] < 0x20 || key[i] == 0x7f {
					t.Fatalf("accepted %q, which contains the control byte %#x", key, key[i])
				}
			}
			const cat = "order"
			parts := strings.Split(keyspace.SingleNode.PartitionStream(cat, key), ":")
			if len(parts) != 2 || parts[0] != cat || parts[1] != key {
				t.Fatalf("keyspace.SingleNode.PartitionStream(%q, %q) splits into %q, want [%q %q]", cat, key, parts, cat, key)
			}
			// A valid key's streams never collide with the category's internal keys.
			for _, internal := range []string{keyspace.SingleNode.PartitionIndex(cat), keyspace.SingleNode.GroupRegistry(cat)} {
				if keyspace.SingleNode.PartitionStream(cat, key) == internal {
					t.Fatalf("keyspace.SingleNode.PartitionStream(%q, %q) collides with %q", cat, key, internal)
				}
			}
			// With a well-formed suffix (Init rejects any other), the lane splits into 3.
			if ValidateBackfillSuffix(suffix) == nil {
				if lane := strings.Split(keyspace.SingleNode.LaneStream(cat, key, effective), ":"); len(lane) != 3 || lane[1] != key {
					t.Fatalf("LaneStream splits into %q, want [%q %q %q]", lane, cat, key, effective)
				}
			}
		} else {
			var ike *InvalidKeyError
			if !errors.As(err, &ike) || !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ValidateKey error %T (%v) is not an *InvalidKeyError matching ErrInvalidKey", err, err)
			}
			if ike.Rule != want {
				t.Fatalf("ValidateKey(%q, %q) broke rule %v, want %v", key, suffix, ike.Rule, want)
			}
			if ike.Key != key {
				t.Fatalf("InvalidKeyError.Key = %q, want %q", ike.Key, key)
			}
			if msg := err.Error(); len(msg) > 512 {
				t.Fatalf("error message is %d bytes; it must stay short however long the key", len(msg))
			}
		}

		// ExtractKey agrees with ValidateKey on a JSON string field holding the key.
		if !utf8.ValidString(key) {
			return // JSON would replace invalid bytes, so the key would not round-trip.
		}
		payload, _ := json.Marshal(map[string]string{"k": key})
		got, xerr := ExtractKey(payload, "k", suffix)
		if (err == nil) != (xerr == nil) {
			t.Fatalf("ExtractKey error %v, ValidateKey error %v: they disagree", xerr, err)
		}
		if xerr == nil && got != key {
			t.Fatalf("ExtractKey = %q, want %q", got, key)
		}
	})
}

// extractKeyByDecode is ExtractKey as a decode of the payload's first value into a map,
// with nothing but white space after it: what the in-place scan of a valid object must
// agree with.
func extractKeyByDecode(payload []byte, field, backfillSuffix string) (string, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return "", fmt.Errorf("engine: event payload is not a JSON object: %w", errOr(err, errors.New("null")))
	}
	if rest := payload[dec.InputOffset():]; len(bytes.Trim(rest, " \t\r\n")) > 0 {
		return "", errors.New("engine: event payload has data after its JSON object; send exactly one object")
	}
	raw, ok := obj[field]
	if !ok {
		return "", &InvalidKeyError{Field: field, Rule: KeyEmpty, Missing: true}
	}
	var key string
	var kerr *InvalidKeyError
	if raw = bytes.TrimSpace(raw); len(raw) > 0 && raw[0] == '"' { // a string: decoded whole
		if err := json.Unmarshal(raw, &key); err != nil {
			kerr = &InvalidKeyError{Rule: KeyWrongType, Detail: "malformed string"}
		}
	} else {
		key, kerr = keyFromJSON(raw)
	}
	return fieldKey(key, kerr, field, backfillSuffix)
}

// FuzzExtractKeyAgreesWithDecode: the in-place scan finds the key (or the error) that a
// decode of the whole payload finds, for any payload and field name.
func FuzzExtractKeyAgreesWithDecode(f *testing.F) {
	for _, seed := range []struct{ payload, field string }{
		{`{"k":"a"}`, "k"}, {` {"k" : "a" } `, "k"}, {`{"k":"a"}` + "\n", "k"}, {`{"k":"a","k":"b"}`, "k"},
		{`{"x":{"k":"in"},"k":7}`, "k"}, {`{"x":[1,{"k":"n"},"}"],"k":"z"}`, "k"}, {`{"a\"k":"q","k":"r"}`, "k"},
		{`{"\u006b":"esc"}`, "k"}, {`{"k\u0000":"nul"}`, "k\x00"}, {"{\"\xff\":\"bad\"}", "\ufffd"}, {"{\"caf\u00e9\":\"c\"}", "caf\u00e9"},
		{`{"k":"a\\"}`, "k"}, {`{"k":"a\"}\""}`, "k"}, {`{"k":-0}`, "k"}, {`{"k":1.5}`, "k"}, {`{"k":1e3}`, "k"},
		{`{"k":123456789012345678901234567890}`, "k"}, {`{"k":true}`, "k"}, {`{"k":null}`, "k"}, {`{"k":[]}`, "k"},
		{`{"k":{}}`, "k"}, {`{}`, "k"}, {`{"K":"up"}`, "k"}, {`null`, "k"}, {`[]`, "k"}, {`"s"`, "k"}, {``, "k"},
		{`{"k":"a"}{"k":"b"}`, "k"}, {`{"k":"a"} }`, "k"}, {`{"k":"a"} x`, "k"}, {`{"k":"a",}`, "k"}, {`{"k":"a:b"}`, "k"},
		{`{"k":"` + strings.Repeat("x", 300) + `"}`, "k"}, {"{\"k\":\"a\xffb\"}", "k"}, {`{"k":"\ud800"}`, "k"}, {"\t{\r\n\"k\"\t:\n\"ws\"\r}", "k"},
	} {
		f.Add([]byte(seed.payload), seed.field)
	}
	f.Fuzz(func(t *testing.T, payload []byte, field string) {
		got, err := ExtractKey(payload, field, "")
		want, werr := extractKeyByDecode(payload, field, "")
		if got != want || fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("ExtractKey(%q, %q) = %q, %v; a decode of the whole payload gives %q, %v", payload, field, got, err, want, werr)
		}
		if !reflect.DeepEqual(err, werr) {
			t.Fatalf("ExtractKey(%q, %q) error %#v, the decode's %#v", payload, field, err, werr)
		}
	})
}
