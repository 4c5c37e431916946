package tui

import (
	"regexp"
	"strings"

	"github.com/seqctl/seqctl/pkg/admin"
)

// The filter of the partitions table. Every word must match:
//
//	text           occurs in the key, category, stream, handler, owner or state
//	field:text     occurs in that field: key, category (cat), handler, owner, state, stream,
//	               limit (the limit value a throttled partition waits for)
//	/re/           the regular expression matches one of them (case-insensitive)
//	field:/re/     the regular expression matches that field
//
// A word whose prefix is not a field name ("order:client-1") is plain text.

var filterFields = map[string]func(p *Partition) string{
	"key":      func(p *Partition) string { return p.Key },
	"category": func(p *Partition) string { return p.Category },
	"cat":      func(p *Partition) string { return p.Category },
	"handler":  func(p *Partition) string { return p.Handler },
	"owner":    func(p *Partition) string { return p.Owner },
	"state":    func(p *Partition) string { return p.State },
	"stream":   func(p *Partition) string { return p.Stream },
	"limit":    func(p *Partition) string { return p.LimitValue },
}

// filterTerm is one word of the filter.
type filterTerm struct {
	field func(p *Partition) string // nil: the whole haystack
	text  string                    // lowercase; used when re is nil
	re    *regexp.Regexp
}

type filter struct {
	terms []filterTerm
	err   string // why a word was taken as plain text ("" when all were understood)
}

func (f filter) empty() bool { return len(f.terms) == 0 }

// parseFilter reads the filter text (already lowercase).
func parseFilter(s string) filter {
	var f filter
	for _, w := range strings.Fields(s) {
		t := filterTerm{text: w}
		if name, rest, ok := strings.Cut(w, ":"); ok {
			if get, known := filterFields[name]; known && rest != "" {
				t.field, t.text = get, rest
			}
		}
		if len(t.text) >= 2 && strings.HasPrefix(t.text, "/") && strings.HasSuffix(t.text, "/") {
			re, err := regexp.Compile("(?i)" + t.text[1:len(t.text)-1])
			if err != nil {
				f.err = "bad regular expression " + t.text + ": " + strings.TrimPrefix(err.Error(), "error parsing regexp: ")
			} else {
				t.re = re
			}
		}
		f.terms = append(f.terms, t)
	}
	return f
}

func (f filter) match(p *Partition, hay string) bool {
	for _, t := range f.terms {
		var ok bool
		switch {
		case t.field != nil && t.re != nil:
			ok = t.re.MatchString(t.field(p))
		case t.field != nil:
			ok = strings.Contains(strings.ToLower(t.field(p)), t.text)
		case t.re != nil:
			for _, get := range []func(*Partition) string{filterFields["key"], filterFields["category"], filterFields["handler"],
				filterFields["owner"], filterFields["state"], filterFields["stream"]} {
				if t.re.MatchString(get(p)) {
					ok = true
					break
				}
			}
		default:
			ok = strings.Contains(hay, t.text)
		}
		if !ok {
			return false
		}
	}
	return true
}

// haystack is the lowercase text plain filter words look in. The stream is there too:
// on Redis Cluster it is spelled order:{client-1}, which an operator may paste.
func haystack(p *Partition) string {
	return strings.ToLower(p.Category + ":" + p.Key + " " + p.Stream + " " + p.Handler + " " + p.Owner + " " + p.State)
}

// naturalCompare orders names as the CLI does: digit runs by value (client-2 before
// client-10).
func naturalCompare(a, b string) int { return admin.NaturalCompare(a, b) }
