package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// keyOutcome is what a key check returned, in a form cmp can diff.
type keyOutcome struct {
	Key    string // the accepted key ("" on error)
	Rule   KeyRule
	Token  string
	Field  string
	Detail string
}

// keyOutcomeOf turns a key check's outcome into a keyOutcome, failing when the error is not
// an *InvalidKeyError that matches ErrInvalidKey.
func keyOutcomeOf(t testing.TB, key string, err error) keyOutcome {
	t.Helper()
	if err == nil {
		return keyOutcome{Key: key}
	}
	var ike *InvalidKeyError
	if !errors.As(err, &ike) {
		t.Fatalf("error %T (%v) is not an *InvalidKeyError", err, err)
	}
	if !errors.Is(err, ErrInvalidKey) {
		t.Errorf("errors.Is(%v, ErrInvalidKey) = false, want true", err)
	}
	if !strings.HasPrefix(err.Error(), "engine: invalid partition key") {
		t.Errorf("Error() = %q, want the engine: invalid partition key prefix", err.Error())
	}
	return keyOutcome{Rule: ike.Rule, Token: ike.Token, Field: ike.Field, Detail: ike.Detail}
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		suffix  string // "" means the default, "backfill"
		want    keyOutcome
		wantMsg string // a fragment of the error message
	}{
		// Accepted.
		{name: "plain id", key: "client-123", want: keyOutcome{Key: "client-123"}},
		{name: "uuid", key: "5f0c6a8e-3b9d-4c1e-9a47-2d8f1e6b7c30", want: keyOutcome{Key: "5f0c6a8e-3b9d-4c1e-9a47-2d8f1e6b7c30"}},
		{name: "255 bytes", key: strings.Repeat("k", 255), want: keyOutcome{Key: strings.Repeat("k", 255)}},
		{name: "254 bytes of two-byte runes", key: strings.Repeat("é", 127), want: keyOutcome{Key: strings.Repeat("é", 127)}},
		{name: "reserved tokens are case-sensitive: DLQ", key: "DLQ", want: keyOutcome{Key: "DLQ"}},
		{name: "reserved tokens are case-sensitive: Backfill", key: "Backfill", want: keyOutcome{Key: "Backfill"}},
		{name: "backfill is free under a custom suffix", key: "backfill", suffix: "slow", want: keyOutcome{Key: "backfill"}},
		{name: "three underscores", key: "___", want: keyOutcome{Key: "___"}},
		{name: "leading double underscore only", key: "__lead", want: keyOutcome{Key: "__lead"}},
		{name: "trailing double underscore only", key: "trail__", want: keyOutcome{Key: "trail__"}},
		{name: "single underscores around", key: "_x_", want: keyOutcome{Key: "_x_"}},
		{name: "dlq as a substring", key: "dlq-1", want: keyOutcome{Key: "dlq-1"}},

		// Rejected, one rule each.
		{name: "empty", key: "", want: keyOutcome{Rule: KeyEmpty}, wantMsg: "the key is null or empty"},
		{name: "256 bytes", key: strings.Repeat("k", 256), want: keyOutcome{Rule: KeyTooLong}, wantMsg: "256 bytes, longer than the limit of 255 bytes"},
		{name: "256 bytes of two-byte runes", key: strings.Repeat("é", 128), want: keyOutcome{Rule: KeyTooLong}, wantMsg: "255"},
		{name: "colon", key: "a:b", want: keyOutcome{Rule: KeyHasColon}, wantMsg: `"a:b" contains ':'`},
		{name: "colon alone", key: ":", want: keyOutcome{Rule: KeyHasColon}},
		{name: "trailing colon", key: "a:", want: keyOutcome{Rule: KeyHasColon}},
		{name: "dlq", key: "dlq", want: keyOutcome{Rule: KeyReservedToken, Token: "dlq"}, wantMsg: `equals the reserved lane token "dlq"`},
		{name: "default backfill suffix", key: "backfill", want: keyOutcome{Rule: KeyReservedToken, Token: "backfill"}, wantMsg: `"backfill"`},
		{name: "custom suffix", key: "slow", suffix: "slow", want: keyOutcome{Rule: KeyReservedToken, Token: "slow"}, wantMsg: `"slow"`},
		{name: "dlq under a custom suffix", key: "dlq", suffix: "slow", want: keyOutcome{Rule: KeyReservedToken, Token: "dlq"}},
		{name: "sentinel __x__", key: "__x__", want: keyOutcome{Rule: KeySentinel}, wantMsg: "reserved __name__ form"},
		{name: "sentinel __partitions__", key: "__partitions__", want: keyOutcome{Rule: KeySentinel}},
		{name: "sentinel ____", key: "____", want: keyOutcome{Rule: KeySentinel}},
		{name: "NUL", key: "a\x00b", want: keyOutcome{Rule: KeyControlChar}, wantMsg: `"a\x00b" contains the control character U+0000 at byte 1; keys travel in HTTP headers`},
		{name: "newline", key: "client\n1", want: keyOutcome{Rule: KeyControlChar}, wantMsg: "U+000A"},
		{name: "tab", key: "a\tb", want: keyOutcome{Rule: KeyControlChar}},
		{name: "DEL", key: "a\x7f", want: keyOutcome{Rule: KeyControlChar}, wantMsg: "U+007F"},
		{name: "open brace", key: "{order", want: keyOutcome{Rule: KeyHasBrace}, wantMsg: "hash tag"},
		{name: "close brace", key: "a}", want: keyOutcome{Rule: KeyHasBrace}},
		{name: "unicode is fine", key: "café-ü", want: keyOutcome{Key: "café-ü"}},
		{name: "space is fine", key: "a b", want: keyOutcome{Key: "a b"}},

		// Rule order: the first rule broken is reported.
		{name: "too long beats colon", key: strings.Repeat("a:", 200), want: keyOutcome{Rule: KeyTooLong}},
		{name: "colon beats sentinel", key: "__a:b__", want: keyOutcome{Rule: KeyHasColon}},
		{name: "sentinel beats control", key: "__\n__", want: keyOutcome{Rule: KeySentinel}},
		{name: "control beats brace", key: "{\x01}", want: keyOutcome{Rule: KeyControlChar}},
		{name: "suffix that is a sentinel is a reserved token", key: "__s__", suffix: "__s__", want: keyOutcome{Rule: KeyReservedToken, Token: "__s__"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateKey(tt.key, tt.suffix)
			got := keyOutcomeOf(t, tt.key, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ValidateKey(%.20q, %q) mismatch (-want +got):\n%s", tt.key, tt.suffix, diff)
			}
			if tt.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.wantMsg)) {
				t.Errorf("error %v does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestExtractKey(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		field   string
		suffix  string
		want    keyOutcome
		wantMsg string
	}{
		{name: "string", payload: `{"client_id":"c-1","total":3}`, field: "client_id", want: keyOutcome{Key: "c-1"}},
		{name: "string with escapes", payload: `{"k":"caf\u00e9"}`, field: "k", want: keyOutcome{Key: "café"}},
		{name: "integer", payload: `{"k":42}`, field: "k", want: keyOutcome{Key: "42"}},
		{name: "negative integer", payload: `{"k":-7}`, field: "k", want: keyOutcome{Key: "-7"}},
		{name: "zero", payload: `{"k":0}`, field: "k", want: keyOutcome{Key: "0"}},
		{name: "negative zero is zero", payload: `{"k":-0}`, field: "k", want: keyOutcome{Key: "0"}},
		{name: "integer beyond int64", payload: `{"k":123456789012345678901234567890}`, field: "k", want: keyOutcome{Key: "123456789012345678901234567890"}},
		{name: "negative integer beyond int64", payload: `{"k":-123456789012345678901234567890}`, field: "k", want: keyOutcome{Key: "-123456789012345678901234567890"}},
		{name: "white space around the value", payload: "{ \"k\" :\n 42 }", field: "k", want: keyOutcome{Key: "42"}},
		{name: "other fields ignored", payload: `{"a":{"k":"nested"},"k":"top"}`, field: "k", want: keyOutcome{Key: "top"}},

		{name: "null", payload: `{"k":null}`, field: "k", want: keyOutcome{Rule: KeyEmpty, Field: "k"}, wantMsg: `the field "k" is null`},
		{name: "missing field", payload: `{"other":"x"}`, field: "k", want: keyOutcome{Rule: KeyEmpty, Field: "k"}, wantMsg: `the payload has no field "k"`},
		{name: "empty string", payload: `{"k":""}`, field: "k", want: keyOutcome{Rule: KeyEmpty, Field: "k"}, wantMsg: "the key is null or empty"},
		{name: "NUL in a string", payload: `{"k":"a\u0000b"}`, field: "k", want: keyOutcome{Rule: KeyControlChar, Field: "k"}, wantMsg: "control character U+0000 at byte 1"},
		{name: "empty string", payload: `{"k":""}`, field: "k", want: keyOutcome{Rule: KeyEmpty, Field: "k"}},
		{name: "float", payload: `{"k":1.5}`, field: "k", want: keyOutcome{Rule: KeyWrongType, Field: "k", Detail: "non-integer number"}, wantMsg: "string or an integer"},
		{name: "exponent", payload: `{"k":1e3}`, field: "k", want: keyOutcome{Rule: KeyWrongType, Field: "k", Detail: "non-integer number"}},
		{name: "integral float", payload: `{"k":1.0}`, field: "k", want: keyOutcome{Rule: KeyWrongType, Field: "k", Detail: "non-integer number"}},
		{name: "bool", payload: `{"k":true}`, field: "k", want: keyOutcome{Rule: KeyWrongType, Field: "k", Detail: "boolean"}, wantMsg: "JSON boolean"},
		{name: "false", payload: `{"k":false}`, field: "k", want: keyOutcome{Rule: KeyWrongType, Field: "k", Detail: "boolean"}},
		{name: "object", payload: `{"k":{"id":1}}`, field: "k", want: keyOutcome{Rule: KeyWrongType, Field: "k", Detail: "object"}, wantMsg: "JSON object"},
		{name: "array", payload: `{"k":[1]}`, field: "k", want: keyOutcome{Rule: KeyWrongType, Field: "k", Detail: "array"}, wantMsg: "JSON array"},
		{name: "string with colon", payload: `{"k":"a:b"}`, field: "k", want: keyOutcome{Rule: KeyHasColon, Field: "k"}},
		{name: "dlq", payload: `{"k":"dlq"}`, field: "k", want: keyOutcome{Rule: KeyReservedToken, Field: "k", Token: "dlq"}},
		{name: "custom suffix", payload: `{"k":"slow"}`, field: "k", suffix: "slow", want: keyOutcome{Rule: KeyReservedToken, Field: "k", Token: "slow"}},
		{name: "sentinel", payload: `{"k":"__partitions__"}`, field: "k", want: keyOutcome{Rule: KeySentinel, Field: "k"}},
		{name: "too long", payload: `{"k":"` + strings.Repeat("x", 256) + `"}`, field: "k", want: keyOutcome{Rule: KeyTooLong, Field: "k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := ExtractKey([]byte(tt.payload), tt.field, tt.suffix)
			got := keyOutcomeOf(t, key, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ExtractKey(%s, %q) mismatch (-want +got):\n%s", tt.payload, tt.field, diff)
			}
			if tt.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.wantMsg)) {
				t.Errorf("error %v does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestExtractKeyNonObjectPayload(t *testing.T) {
	for _, payload := range []string{`[1,2]`, `null`, `"k"`, `42`, `{`, ``} {
		t.Run(payload, func(t *testing.T) {
			_, err := ExtractKey([]byte(payload), "k", "")
			if err == nil || !strings.Contains(err.Error(), "not a JSON object") {
				t.Fatalf("ExtractKey(%q) error = %v, want a not-a-JSON-object error", payload, err)
			}
			var ike *InvalidKeyError
			if errors.As(err, &ike) {
				t.Errorf("ExtractKey(%q) returned an *InvalidKeyError for a malformed payload", payload)
			}
		})
	}
}

func TestExtractKeyTrailingData(t *testing.T) {
	// A closing bracket after the object is data after it too: encoding/json's More stops
	// at one, and such a payload, stored, fails its delivery (deliver.ErrBadPayload).
	for _, payload := range []string{`{"k":"a"}{"k":"b"}`, `{"k":"a"} 1`, `{"k":"a"} }`, `{"k":"a"}]`, `{"k":"a"} } {`} {
		if _, err := ExtractKey([]byte(payload), "k", ""); err == nil || !strings.Contains(err.Error(), "data after its JSON object") {
			t.Errorf("ExtractKey(%q) error = %v, want a trailing-data error", payload, err)
		}
	}
	if k, err := ExtractKey([]byte("{\"k\":\"a\"}\n"), "k", ""); err != nil || k != "a" {
		t.Errorf("a trailing newline is fine: got %q, %v", k, err)
	}
}

func TestInvalidKeyErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *InvalidKeyError
		want string
	}{
		{
			name: "category and field",
			err:  &InvalidKeyError{Category: "order", Field: "client_id", Key: "a:b", Rule: KeyHasColon},
			want: `engine: invalid partition key for category "order" (field "client_id"): "a:b" contains ':', which would split the stream name {category}:{key}`,
		},
		{
			name: "long key shown truncated",
			err:  &InvalidKeyError{Key: strings.Repeat("z", 70) + ":", Rule: KeyHasColon},
			want: `engine: invalid partition key: "` + strings.Repeat("z", 64) + `..." contains ':', which would split the stream name {category}:{key}`,
		},
		{
			name: "sentinel",
			err:  &InvalidKeyError{Key: "__x__", Rule: KeySentinel},
			want: `engine: invalid partition key: "__x__" has the reserved __name__ form used by internal keys such as __partitions__`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.err.Error()); diff != "" {
				t.Errorf("Error() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeyRuleString(t *testing.T) {
	want := map[KeyRule]string{
		KeyEmpty:         "empty",
		KeyTooLong:       "too_long",
		KeyHasColon:      "contains_colon",
		KeyReservedToken: "reserved_token",
		KeySentinel:      "reserved_sentinel",
		KeyWrongType:     "wrong_type",
		KeyControlChar:   "control_character",
		KeyHasBrace:      "contains_brace",
		KeyRule(0):       "unknown",
		KeyRule(99):      "unknown",
	}
	got := map[KeyRule]string{}
	for r := range want {
		got[r] = r.String()
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("KeyRule.String mismatch (-want +got):\n%s", diff)
	}
}

func TestClipKeepsHeadAndTail(t *testing.T) {
	s := strings.Repeat("a", 3000) + strings.Repeat("z", 3000)
	got := clip(s, 4096)
	if len(got) > 4096 || !strings.HasPrefix(got, "aaa") || !strings.HasSuffix(got, "zzz") || !strings.Contains(got, "[...]") {
		t.Fatalf("clip: len %d, %q...%q", len(got), got[:10], got[len(got)-10:])
	}
	if clip("short", 4096) != "short" {
		t.Fatal("a short reason must stay whole")
	}
}

// ValidateStreamKey keeps partitions published before control characters and braces
// were refused readable, and refuses everything a stream name cannot hold.
func TestValidateStreamKey(t *testing.T) {
	for _, k := range []string{"{legacy}", "a\nb", "client-1"} {
		if err := ValidateStreamKey(k, ""); err != nil {
			t.Errorf("ValidateStreamKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range []string{"", "a:b", "dlq", "backfill", "__x__", strings.Repeat("k", 256)} {
		if err := ValidateStreamKey(k, ""); err == nil {
			t.Errorf("ValidateStreamKey(%q) = nil, want the stream-name rule", k)
		}
	}
}
