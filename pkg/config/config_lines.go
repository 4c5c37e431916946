package config

// Key paths and their line numbers. BurntSushi/toml reports a line for syntax errors but
// keeps key positions private, so a small scanner reads the (already parsed, hence valid)
// file text and maps every key path to the line that defines it: [table] and [[array]]
// headers, key = value lines (dotted keys too), keys of inline tables, and the elements
// of arrays. Arrays of tables are indexed by occurrence within their parent element, the
// same way the decoder indexes them, so "process_managers[0].handles[1]" names the second
// [[process_managers.handles]] under the first [[process_managers]].

import (
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// segment is one step of a key path: a key, or an index into an array.
type segment struct {
	key   string
	index int // >= 0 for an array index (key is then ""), -1 for a key
}

// keyPath is a key path such as handlers[1].deliver.timeout.
type keyPath []segment

func (p keyPath) key(k string) keyPath {
	q := make(keyPath, len(p), len(p)+1)
	copy(q, p)
	return append(q, segment{key: k, index: -1})
}

func (p keyPath) index(i int) keyPath {
	q := make(keyPath, len(p), len(p)+1)
	copy(q, p)
	return append(q, segment{index: i})
}

// isPMHandle reports a path inside process_managers[i].
func (p keyPath) isPMHandle() bool {
	return len(p) > 0 && p[0].index < 0 && p[0].key == "process_managers"
}

// String renders the path: keys joined by ".", indexes as "[i]", keys that are not bare
// TOML keys in double quotes.
func (p keyPath) String() string {
	var b strings.Builder
	for i, s := range p {
		if s.index >= 0 {
			b.WriteString("[")
			b.WriteString(strconv.Itoa(s.index))
			b.WriteString("]")
			continue
		}
		if i > 0 {
			b.WriteString(".")
		}
		b.WriteString(renderKey(s.key))
	}
	return b.String()
}

// renderKey quotes a key unless it is a bare TOML key.
func renderKey(k string) string {
	if k == "" {
		return `""`
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(k)
		}
	}
	return k
}

// lineIndex maps a rendered key path to the 1-based line that defines it.
type lineIndex map[string]int

// lookup returns the line of p, or of its nearest ancestor with a known line, or 0.
func (l lineIndex) lookup(p keyPath) int {
	for n := len(p); n > 0; n-- {
		if line, ok := l[p[:n].String()]; ok {
			return line
		}
	}
	return 0
}

// scanKeyLines maps the key paths of a TOML document to lines. It is meant for valid
// documents; on anything else it returns what it found, and it never panics or loops.
func scanKeyLines(src string) lineIndex {
	s := &scanner{src: src, lines: lineIndex{}, arrays: map[string]int{}}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			s.starts = append(s.starts, i+1)
		}
	}
	s.run()
	return s.lines
}

type scanner struct {
	src    string
	pos    int
	starts []int // byte offsets where lines 2, 3, ... start
	lines  lineIndex
	arrays map[string]int // array-of-tables path -> elements seen so far
}

func (s *scanner) eof() bool { return s.pos >= len(s.src) }

func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.pos]
}

// lineAt returns the 1-based line of byte offset pos.
func (s *scanner) lineAt(pos int) int {
	return sort.SearchInts(s.starts, pos+1) + 1
}

func (s *scanner) record(p keyPath, pos int) {
	k := p.String()
	if _, ok := s.lines[k]; !ok {
		s.lines[k] = s.lineAt(pos)
	}
}

func (s *scanner) run() {
	var table keyPath
	for {
		s.skipTrivia()
		if s.eof() {
			return
		}
		start := s.pos
		if s.peek() == '[' {
			table = s.header()
		} else {
			s.keyValue(table)
		}
		s.skipToEOL()
		if s.pos == start {
			s.pos++
		}
	}
}

// skipSpaces skips blanks on the current line.
func (s *scanner) skipSpaces() {
	for !s.eof() && (s.peek() == ' ' || s.peek() == '\t') {
		s.pos++
	}
}

// skipTrivia skips blanks, newlines and comments.
func (s *scanner) skipTrivia() {
	for !s.eof() {
		switch s.peek() {
		case ' ', '\t', '\r', '\n':
			s.pos++
		case '#':
			s.skipToEOL()
		default:
			return
		}
	}
}

func (s *scanner) skipToEOL() {
	for !s.eof() && s.peek() != '\n' {
		s.pos++
	}
}

// header reads a [table] or [[array]] header and returns the table's path.
func (s *scanner) header() keyPath {
	start := s.pos
	s.pos++
	double := s.peek() == '['
	if double {
		s.pos++
	}
	parts := s.keyParts()
	var p keyPath
	for i, part := range parts {
		p = p.key(part)
		if double && i == len(parts)-1 {
			k := p.String()
			n := s.arrays[k]
			s.arrays[k] = n + 1
			p = p.index(n)
		} else if n, ok := s.arrays[p.String()]; ok && n > 0 {
			p = p.index(n - 1)
		}
		s.record(p, start)
	}
	return p
}

// keyValue reads key = value under table.
func (s *scanner) keyValue(table keyPath) {
	start := s.pos
	parts := s.keyParts()
	if len(parts) == 0 {
		return
	}
	p := table
	for _, part := range parts {
		p = p.key(part)
		s.record(p, start)
	}
	s.skipSpaces()
	if s.peek() != '=' {
		return
	}
	s.pos++
	s.skipSpaces()
	s.value(p)
}

// keyParts reads a dotted key (bare or quoted parts) up to '=', ']' or the line end.
func (s *scanner) keyParts() []string {
	var parts []string
	for {
		s.skipSpaces()
		if s.eof() {
			return parts
		}
		switch c := s.peek(); {
		case c == '"':
			parts = append(parts, s.basicKey())
		case c == '\'':
			s.pos++
			end := strings.IndexAny(s.src[s.pos:], "'\n")
			if end < 0 {
				end = len(s.src) - s.pos
			}
			parts = append(parts, s.src[s.pos:s.pos+end])
			s.pos += end
			if s.peek() == '\'' {
				s.pos++
			}
		case strings.IndexByte(" \t\r\n.=[]#{},\"'", c) < 0:
			start := s.pos
			for !s.eof() && strings.IndexByte(" \t\r\n.=[]#{},\"'", s.peek()) < 0 {
				s.pos++
			}
			parts = append(parts, s.src[start:s.pos])
		default:
			return parts
		}
		s.skipSpaces()
		if s.peek() != '.' {
			// A header's closing brackets.
			for s.peek() == ']' {
				s.pos++
			}
			return parts
		}
		s.pos++
	}
}

// basicKey reads a "quoted" key and decodes its escapes.
func (s *scanner) basicKey() string {
	s.pos++ // opening quote
	var b strings.Builder
	for !s.eof() {
		c := s.peek()
		switch {
		case c == '"':
			s.pos++
			return b.String()
		case c == '\n':
			return b.String()
		case c == '\\' && s.pos+1 < len(s.src):
			s.pos++
			e := s.peek()
			s.pos++
			switch e {
			case 'b':
				b.WriteByte('\b')
			case 't':
				b.WriteByte('\t')
			case 'n':
				b.WriteByte('\n')
			case 'f':
				b.WriteByte('\f')
			case 'r':
				b.WriteByte('\r')
			case 'e':
				b.WriteByte(0x1b)
			case '"', '\\':
				b.WriteByte(e)
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if s.pos+n <= len(s.src) {
					if r, err := strconv.ParseUint(s.src[s.pos:s.pos+n], 16, 32); err == nil && utf8.ValidRune(rune(r)) {
						b.WriteRune(rune(r))
						s.pos += n
						continue
					}
				}
				b.WriteByte('\\')
				b.WriteByte(e)
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			s.pos++
		}
	}
	return b.String()
}

// value skips one value, recording the keys of inline tables and the elements of arrays
// under p.
func (s *scanner) value(p keyPath) {
	switch s.peek() {
	case '"', '\'':
		s.skipString()
	case '[':
		i := 0
		s.items(']', func() {
			s.record(p.index(i), s.pos)
			s.value(p.index(i))
			i++
		})
	case '{':
		s.items('}', func() { s.keyValue(p) })
	default: // number, boolean, date-time
		for !s.eof() && strings.IndexByte(",]}#\r\n", s.peek()) < 0 {
			s.pos++
		}
	}
}

// items reads the items of an inline array or table, from its opening bracket to end,
// calling item at the start of each one. An item that reads nothing is stepped over, so
// the scan always moves on.
func (s *scanner) items(end byte, item func()) {
	s.pos++
	for {
		s.skipTrivia()
		if s.eof() {
			return
		}
		switch s.peek() {
		case end:
			s.pos++
			return
		case ',':
			s.pos++
			continue
		}
		start := s.pos
		item()
		if s.pos == start {
			s.pos++
		}
	}
}

// skipString skips a basic, literal or multi-line string.
func (s *scanner) skipString() {
	q := s.peek()
	if strings.HasPrefix(s.src[s.pos:], strings.Repeat(string(q), 3)) {
		s.pos += 3
		for !s.eof() {
			if q == '"' && s.peek() == '\\' {
				s.pos += 2
				continue
			}
			if strings.HasPrefix(s.src[s.pos:], strings.Repeat(string(q), 3)) {
				s.pos += 3
				// Up to two more quotes may close the string ("""a""""").
				for i := 0; i < 2 && s.peek() == q; i++ {
					s.pos++
				}
				return
			}
			s.pos++
		}
		return
	}
	s.pos++
	for !s.eof() {
		c := s.peek()
		switch {
		case c == '\\' && q == '"':
			s.pos += 2
		case c == q:
			s.pos++
			return
		case c == '\n':
			return
		default:
			s.pos++
		}
	}
}
