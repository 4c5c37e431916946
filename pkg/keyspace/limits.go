package keyspace

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limit keys: a handler's fleet-wide cap per value of a payload field (a tenant). Each
// value has its permits and the starts of its last window in two keys of one slot, named
// after the unit "__limit__:{group}:{value}" (reserved form: no partition stream has it),
// always wrapped whole in a hash tag. A brace in the handler's name or the value would end
// the tag early, or leave the keys with no tag: such names are written in the form
// "__limitx__:" with '%', '{' and '}' escaped as %25, %7B and %7D, so that every name
// gets a tag of its own, the same for its two keys.

func limitUnit(group, value string) string {
	if !strings.ContainsAny(group, "{}") && !strings.ContainsAny(value, "{}") {
		return "__limit__:" + group + ":" + value
	}
	return "__limitx__:" + braceEscaper.Replace(group) + ":" + braceEscaper.Replace(value)
}

var braceEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// limitTag wraps a limit unit in a hash tag, on one node as on a cluster.
func limitTag(group, value string) string { return "{" + limitUnit(group, value) + "}" }

// LimitKey holds the permits of one value of a handler's limit key (hash): a field
// "s{i}" per concurrency slot taken, "{holder}|{generation}|{expiry ms}"; "gen", the last
// permit generation (floored at Redis time in microseconds, as lease generations); and
// "waited", the Redis time (ms) a permit was last refused, so that a release tells the
// instances that wait. It expires a while after its last permit ends.
func (k Keys) LimitKey(group, value string) string {
	return limitTag(group, value) + ":__permits__"
}

// LimitStartsKey holds the starts of one value in the current window of its rate (sorted
// set: a start id, scored by its Redis time in ms), in the slot of LimitKey.
func (k Keys) LimitStartsKey(group, value string) string {
	return limitTag(group, value) + ":__starts__"
}

// LimitOverrides holds an operator's overrides of a handler's limit per value (hash:
// value -> LimitOverride JSON).
func (k Keys) LimitOverrides(group string) string { return k.global("limits:" + group) }

// LimitChannel is the plain pub/sub channel on which a release of a permit that others
// waited for is announced (payload "{group}\x00{value}"), and an operator's change of an
// override (payload "{group}\x00{value}\x00override").
func (k Keys) LimitChannel() string { return k.global("limits") }

// LimitOverride is an operator's override of a handler's limit for one value: its
// concurrency and rate replace the domain's for that value (a zero keeps the domain's;
// Off turns the cap off for the value).
type LimitOverride struct {
	Concurrency int           `json:"concurrency,omitempty"`
	Rate        int           `json:"rate,omitempty"`
	Per         time.Duration `json:"-"`
	Off         bool          `json:"off,omitempty"` // no cap at all for this value
	Reason      string        `json:"reason,omitempty"`
	By          string        `json:"by,omitempty"`
	Since       time.Time     `json:"since"`
}

type limitOverrideJSON struct {
	Concurrency int        `json:"concurrency,omitempty"`
	Rate        string     `json:"rate,omitempty"`
	Off         bool       `json:"off,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	By          string     `json:"by,omitempty"`
	Since       *time.Time `json:"since"` // null: not written yet (a dry run's override)
}

// MarshalJSON writes the rate as "N/s" or "N/m", and a zero Since as null.
func (o LimitOverride) MarshalJSON() ([]byte, error) {
	j := limitOverrideJSON{Concurrency: o.Concurrency, Off: o.Off, Reason: o.Reason, By: o.By}
	if !o.Since.IsZero() {
		j.Since = &o.Since
	}
	if o.Rate > 0 {
		j.Rate = FormatRate(o.Rate, o.Per)
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (o *LimitOverride) UnmarshalJSON(b []byte) error {
	var j limitOverrideJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*o = LimitOverride{Concurrency: j.Concurrency, Off: j.Off, Reason: j.Reason, By: j.By}
	if j.Since != nil {
		o.Since = *j.Since
	}
	if j.Rate != "" {
		n, per, err := ParseRate(j.Rate)
		if err != nil {
			return err
		}
		o.Rate, o.Per = n, per
	}
	return nil
}

// DecodeLimitOverride reads one value's override as LimitOverrides stores it.
func DecodeLimitOverride(raw string) (LimitOverride, error) {
	var o LimitOverride
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		return LimitOverride{}, fmt.Errorf("keyspace: limit override: %w", err)
	}
	return o, nil
}

// Encode renders the override for LimitOverrides.
func (o LimitOverride) Encode() string {
	b, _ := json.Marshal(o) // plain fields: never fails
	return string(b)
}

// ParseRate reads a rate "N/s", "N/m" or "N/h" (N a positive integer): N starts per
// second, minute or hour; or "N/{window}" with a window of whole milliseconds written as a
// duration ("20/1500ms", "5/2s", "100/90m").
func ParseRate(s string) (n int, per time.Duration, err error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("rate %q: write it as N/s, N/m or N/h (N starts per second, minute or hour), or N/{window} (\"20/1500ms\"), e.g. \"20/s\"", s)
	}
	n, err = strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n <= 0 {
		return 0, 0, fmt.Errorf("rate %q: %q is not a positive whole number of starts (e.g. \"20/s\")", s, num)
	}
	switch unit = strings.TrimSpace(unit); unit {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		per, err = time.ParseDuration(unit)
		if err != nil {
			return 0, 0, fmt.Errorf("rate %q: the window %q is not s, m, h or a duration (e.g. \"20/s\", \"600/m\", \"20/1500ms\")", s, unit)
		}
		if err := ValidateRateWindow(per); err != nil {
			return 0, 0, fmt.Errorf("rate %q: %w", s, err)
		}
	}
	return n, per, nil
}

// ValidateRateWindow checks the window of a rate: a positive whole number of milliseconds
// (the unit the limit script counts in).
func ValidateRateWindow(per time.Duration) error {
	if per < time.Millisecond || per%time.Millisecond != 0 {
		return fmt.Errorf("the window %v is not a positive whole number of milliseconds", per)
	}
	return nil
}

// FormatRate writes a rate as ParseRate reads it ("20/s"); a window that is not a second,
// a minute or an hour is written in milliseconds ("20/1500ms").
func FormatRate(n int, per time.Duration) string {
	switch per {
	case 0, time.Second:
		return strconv.Itoa(n) + "/s"
	case time.Minute:
		return strconv.Itoa(n) + "/m"
	case time.Hour:
		return strconv.Itoa(n) + "/h"
	}
	return fmt.Sprintf("%d/%dms", n, per.Milliseconds())
}
