package diff

import (
	"fmt"
	"strconv"
	"strings"
)

// A path names one value inside a compared message, rendered as
//
//	status                  the response status code
//	header.Content-Type     a header (canonical name)
//	body                    the whole body (text bodies)
//	body.items[3].price     a field of a JSON body
//	body["a.b"]             a key that is not a plain identifier
//	args[2]                 an argument of a Redis command
//	sql                     the normalised SQL text of a MySQL command
//
// Segments are built while the values are walked and only turned into a
// string when a difference is reported.

// segment is one step of a path: an object key or an array index.
type segment struct {
	key   string
	index int // -1 for a key
}

func keySeg(k string) segment { return segment{key: k, index: -1} }
func idxSeg(i int) segment    { return segment{index: i} }

// renderPath writes segs in the syntax above.
func renderPath(segs []segment) string {
	var b strings.Builder
	for i, s := range segs {
		switch {
		case s.index >= 0:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		case plainKey(s.key):
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		default:
			b.WriteByte('[')
			b.WriteString(strconv.Quote(s.key))
			b.WriteByte(']')
		}
	}
	return b.String()
}

// plainKey reports whether k can be written after a dot: no separators,
// no wildcard characters, not empty.
func plainKey(k string) bool {
	if k == "" || k == "*" || k == "**" {
		return false
	}
	for i := 0; i < len(k); i++ {
		switch k[i] {
		case '.', '[', ']', '"', ' ', '\t', '\n', '\r':
			return false
		}
	}
	return true
}

// patSeg is one step of a path pattern.
type patSeg struct {
	kind  patKind
	key   string
	index int
}

type patKind uint8

const (
	patKey      patKind = iota // a literal key
	patIndex                   // a literal index [n]
	patAnyKey                  // * : any one segment (key or index)
	patAnyIndex                // [*] : any one index
	patAnyDepth                // ** : zero or more segments
)

// Pattern is a compiled path pattern: a path in which a segment may be
// "*" (any one key or index), "[*]" (any index) or "**" (any number of
// segments, including none). Patterns match whole paths.
type Pattern struct {
	src  string
	segs []patSeg
}

// String returns the pattern as written.
func (p *Pattern) String() string { return p.src }

// ParsePattern compiles a path pattern such as "body.items[*].ts" or
// "**.id". The error names the offending character position.
func ParsePattern(s string) (*Pattern, error) {
	if s == "" {
		return nil, fmt.Errorf("empty path pattern")
	}
	p := &Pattern{src: s}
	i := 0
	expectKey := true // at the start or after '.'
	for i < len(s) {
		c := s[i]
		switch {
		case c == '[':
			j := strings.IndexByte(s[i:], ']')
			if i+1 < len(s) && s[i+1] == '"' {
				// quoted key: find the closing quote, then ']'
				q, err := strconv.QuotedPrefix(s[i+1:])
				if err != nil {
					return nil, fmt.Errorf("path pattern %q: bad quoted key at offset %d", s, i+1)
				}
				k, _ := strconv.Unquote(q)
				end := i + 1 + len(q)
				if end >= len(s) || s[end] != ']' {
					return nil, fmt.Errorf("path pattern %q: missing ']' after quoted key at offset %d", s, end)
				}
				p.segs = append(p.segs, patSeg{kind: patKey, key: k})
				i = end + 1
			} else {
				if j < 0 {
					return nil, fmt.Errorf("path pattern %q: unclosed '[' at offset %d", s, i)
				}
				in := s[i+1 : i+j]
				switch {
				case in == "*":
					p.segs = append(p.segs, patSeg{kind: patAnyIndex})
				default:
					n, err := strconv.Atoi(in)
					if err != nil || n < 0 {
						return nil, fmt.Errorf("path pattern %q: index %q at offset %d is not a number or *", s, in, i)
					}
					p.segs = append(p.segs, patSeg{kind: patIndex, index: n})
				}
				i += j + 1
			}
			expectKey = false
			if i < len(s) && s[i] != '.' && s[i] != '[' {
				return nil, fmt.Errorf("path pattern %q: expected '.' or '[' at offset %d", s, i)
			}
		case c == '.':
			if expectKey {
				return nil, fmt.Errorf("path pattern %q: empty segment at offset %d", s, i)
			}
			i++
			expectKey = true
			if i == len(s) {
				return nil, fmt.Errorf("path pattern %q: ends with '.'", s)
			}
		case c == ']':
			return nil, fmt.Errorf("path pattern %q: unexpected ']' at offset %d", s, i)
		default:
			if !expectKey {
				return nil, fmt.Errorf("path pattern %q: expected '.' or '[' at offset %d", s, i)
			}
			j := i
			for j < len(s) && s[j] != '.' && s[j] != '[' && s[j] != ']' {
				j++
			}
			k := s[i:j]
			switch k {
			case "*":
				p.segs = append(p.segs, patSeg{kind: patAnyKey})
			case "**":
				p.segs = append(p.segs, patSeg{kind: patAnyDepth})
			default:
				if strings.Contains(k, "*") {
					return nil, fmt.Errorf("path pattern %q: '*' must be a whole segment (at offset %d)", s, i)
				}
				p.segs = append(p.segs, patSeg{kind: patKey, key: k})
			}
			i = j
			expectKey = false
		}
	}
	return p, nil
}

// MustPattern is ParsePattern for patterns known to be valid; it panics
// otherwise.
func MustPattern(s string) *Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// MatchPath reports whether the rendered path s matches p.
func (p *Pattern) MatchPath(s string) bool {
	segs, err := ParsePattern(s)
	if err != nil {
		return false
	}
	path := make([]segment, 0, len(segs.segs))
	for _, ps := range segs.segs {
		switch ps.kind {
		case patKey:
			path = append(path, keySeg(ps.key))
		case patIndex:
			path = append(path, idxSeg(ps.index))
		default:
			return false
		}
	}
	return p.match(path)
}

func (p *Pattern) match(path []segment) bool { return matchSegs(p.segs, path) }

func matchSegs(pat []patSeg, path []segment) bool {
	for len(pat) > 0 {
		ps := pat[0]
		if ps.kind == patAnyDepth {
			rest := pat[1:]
			for k := 0; k <= len(path); k++ {
				if matchSegs(rest, path[k:]) {
					return true
				}
			}
			return false
		}
		if len(path) == 0 {
			return false
		}
		s := path[0]
		switch ps.kind {
		case patKey:
			if s.index >= 0 || s.key != ps.key {
				return false
			}
		case patIndex:
			if s.index != ps.index {
				return false
			}
		case patAnyIndex:
			if s.index < 0 {
				return false
			}
		case patAnyKey:
		}
		pat, path = pat[1:], path[1:]
	}
	return len(path) == 0
}

// Generalize returns the rendered path s with every array index replaced
// by [*], the form noise detection writes into rules files: a timestamp at
// items[3].ts is noise at every index.
func Generalize(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '"' { // a quoted key: copy it whole
			q, err := strconv.QuotedPrefix(s[i:])
			if err == nil {
				b.WriteString(q)
				i += len(q) - 1
				continue
			}
		}
		if s[i] == '[' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j < len(s) && s[j] == ']' {
				b.WriteString("[*]")
				i = j
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// JoinKey appends an object key to a rendered path, in the syntax of the
// paths in Differences ("" is the root).
func JoinKey(path, key string) string {
	if plainKey(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// JoinIndex appends an array index to a rendered path.
func JoinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
