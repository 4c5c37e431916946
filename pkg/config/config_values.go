package config

// Typed reading of one TOML table for the strict decoder: each accessor checks the value's
// type, records a problem (with a hint when the fix is obvious) and reports whether the
// value can be used, so decoding goes on after a mistake and finds the next one.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// decoder walks the parsed tree and collects problems.
type decoder struct {
	lines    lineIndex
	getenv   func(string) string
	problems []Problem
}

func (d *decoder) problem(p keyPath, format string, args ...any) {
	d.problems = append(d.problems, Problem{
		Path:    p.String(),
		Line:    d.lines.lookup(p),
		Message: oneLine(fmt.Sprintf(format, args...)),
	})
}

// table is one TOML table being decoded.
type table struct {
	d    *decoder
	path keyPath
	m    map[string]any
}

// known reports every key of the table that is not in keys, suggesting the closest known
// one.
func (t table) known(keys ...string) {
	var unknown []string
	for k := range t.m {
		if !slices.Contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Slice(unknown, func(i, j int) bool {
		li, lj := t.d.lines.lookup(t.path.key(unknown[i])), t.d.lines.lookup(t.path.key(unknown[j]))
		if li != lj {
			return li < lj
		}
		return unknown[i] < unknown[j]
	})
	for _, k := range unknown {
		where := "the top level"
		if len(t.path) > 0 {
			where = t.path.String()
		}
		if s := suggest(k, keys); strings.EqualFold(s, k) {
			t.d.problem(t.path.key(k), "unknown key; did you mean %q? (key names are case-sensitive)", s)
		} else if s != "" {
			t.d.problem(t.path.key(k), "unknown key; did you mean %q?", s)
		} else {
			t.d.problem(t.path.key(k), "unknown key; the keys of %s are %s", where, strings.Join(keys, ", "))
		}
	}
}

func (t table) has(key string) bool { _, ok := t.m[key]; return ok }

// required reports a missing key and returns false.
func (t table) required(key, hint string) bool {
	if t.has(key) {
		return true
	}
	t.d.problem(t.path.key(key), "missing; %s", hint)
	return false
}

// wrongType reports a value of the wrong type, with a hint when the fix is obvious.
func (t table) wrongType(key, want string, v any) {
	hint := ""
	switch v := v.(type) {
	case string:
		if want == "an integer" {
			if _, err := strconv.ParseInt(v, 10, 64); err == nil {
				hint = fmt.Sprintf("; write %s = %s, without quotes", renderKey(key), v)
			}
		}
		if want == "a number" {
			if _, err := strconv.ParseFloat(v, 64); err == nil {
				hint = fmt.Sprintf("; write %s = %s, without quotes", renderKey(key), v)
			}
		}
		if strings.HasPrefix(want, "a boolean") && (v == "true" || v == "false") {
			hint = fmt.Sprintf("; write %s = %s, without quotes", renderKey(key), v)
		}
	case int64, float64:
		if strings.HasPrefix(want, "a duration") {
			hint = fmt.Sprintf("; write it in quotes with a unit: %s = \"%vs\"", renderKey(key), v)
		} else if want == "a string" {
			hint = fmt.Sprintf("; put the value in quotes: %s = \"%v\"", renderKey(key), v)
		}
	case bool:
		if want == "a string" {
			hint = fmt.Sprintf("; put the value in quotes: %s = \"%v\"", renderKey(key), v)
		}
	}
	t.d.problem(t.path.key(key), "must be %s, not %s%s", want, describe(v), hint)
}

func (t table) str(key string) (string, bool) {
	v, ok := t.m[key]
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		t.wrongType(key, "a string", v)
	}
	return s, ok
}

// nonEmpty is str that also refuses "".
func (t table) nonEmpty(key, hint string) (string, bool) {
	s, ok := t.str(key)
	if ok && s == "" {
		t.d.problem(t.path.key(key), "is empty; %s", hint)
		return "", false
	}
	return s, ok
}

func (t table) integer(key string) (int64, bool) {
	v, ok := t.m[key]
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	if !ok {
		t.wrongType(key, "an integer", v)
	}
	return n, ok
}

// number accepts an integer or a float.
func (t table) number(key string) (float64, bool) {
	v, ok := t.m[key]
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	t.wrongType(key, "a number", v)
	return 0, false
}

func (t table) boolean(key string) (bool, bool) {
	v, ok := t.m[key]
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		t.wrongType(key, "a boolean (true or false)", v)
	}
	return b, ok
}

// strs reads an array of strings, reporting each element of another type.
func (t table) strs(key string) ([]string, bool) {
	v, ok := t.m[key]
	if !ok {
		return nil, false
	}
	arr, ok := v.([]any)
	if !ok {
		hint := ""
		if s, isStr := v.(string); isStr {
			hint = fmt.Sprintf("; write %s = [%q]", renderKey(key), s)
		}
		t.d.problem(t.path.key(key), "must be an array of strings, not %s%s", describe(v), hint)
		return nil, false
	}
	out := make([]string, 0, len(arr))
	good := true
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			t.d.problem(t.path.key(key).index(i), "must be a string, not %s", describe(e))
			good = false
			continue
		}
		out = append(out, s)
	}
	return out, good
}

// duration reads a Go duration string ("1s", "500ms") that must be positive.
func (t table) duration(key string) (time.Duration, bool) {
	v, ok := t.m[key]
	if !ok {
		return 0, false
	}
	s, ok := v.(string)
	if !ok {
		t.wrongType(key, `a duration string such as "1s" or "500ms"`, v)
		return 0, false
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		t.d.problem(t.path.key(key), "%q is not a duration; write a number with a unit: \"500ms\", \"1s\", \"2m\", \"1h\"", s)
		return 0, false
	}
	if dur <= 0 {
		t.d.problem(t.path.key(key), "must be positive, got %q", s)
		return 0, false
	}
	return dur, true
}

// sub reads a nested table.
func (t table) sub(key string) (table, bool) {
	v, ok := t.m[key]
	if !ok {
		return table{}, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.d.problem(t.path.key(key), "must be a table ([%s]), not %s", t.path.key(key).String(), describe(v))
		return table{}, false
	}
	return table{d: t.d, path: t.path.key(key), m: m}, true
}

// tables reads an array of tables ([[key]] headers, or an inline array of tables).
func (t table) tables(key string) []table {
	v, ok := t.m[key]
	if !ok {
		return nil
	}
	var out []table
	switch arr := v.(type) {
	case []map[string]any:
		for i, m := range arr {
			out = append(out, table{d: t.d, path: t.path.key(key).index(i), m: m})
		}
	case []any:
		for i, e := range arr {
			m, ok := e.(map[string]any)
			if !ok {
				t.d.problem(t.path.key(key).index(i), "must be a table, not %s; declare each entry with a [[%s]] header", describe(e), t.path.key(key).String())
				continue
			}
			out = append(out, table{d: t.d, path: t.path.key(key).index(i), m: m})
		}
	default:
		t.d.problem(t.path.key(key), "must be an array of tables ([[%s]] headers), not %s", key, describe(v))
	}
	return out
}

// describe names a TOML value's type for a message, with the value when short.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return fmt.Sprintf("a string (%q)", v)
	case int64:
		return fmt.Sprintf("an integer (%d)", v)
	case float64:
		return fmt.Sprintf("a float (%v)", v)
	case bool:
		return fmt.Sprintf("a boolean (%t)", v)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date-time"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("a %T value", v)
}

func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an"
	}
	return "a"
}

// suggest returns the candidate closest to s: a case-insensitive match, or the nearest
// within a few edits (1 for short words, up to 3 for long ones); "" when none is close.
func suggest(s string, candidates []string) string {
	best, bestDist := "", math.MaxInt
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	for _, c := range sorted {
		if strings.EqualFold(s, c) {
			return c
		}
		limit := min(3, 1+len(c)/4)
		if dist := editDistance(strings.ToLower(s), strings.ToLower(c)); dist <= limit && dist < bestDist {
			best, bestDist = c, dist
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance between two short strings
// (insertions, deletions, substitutions and adjacent transpositions of bytes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt32
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
