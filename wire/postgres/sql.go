package postgres

import "strings"

// NormalizeSQL returns q with every literal replaced by '?' — quoted
// strings ('…', E'…', dollar-quoted $tag$…$tag$) and numbers, but not
// parameters ($1) — comments dropped, white space collapsed, final semicolons
// removed, and the literals in order. Two statements that differ only in
// their values normalise to the same text; quoted identifiers ("…") are
// kept.
func NormalizeSQL(q string) (norm string, literals []string) {
	var b strings.Builder
	b.Grow(len(q))
	space := false
	emit := func(s string) {
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteString(s)
	}
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			space = true
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			j := strings.IndexByte(q[i:], '\n')
			if j < 0 {
				j = len(q) - i
			}
			space = true
			i += j
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			j := strings.Index(q[i+2:], "*/")
			end := len(q)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			space = true
			i = end
		case c == '\'' || (c == 'E' || c == 'e') && i+1 < len(q) && q[i+1] == '\'' && !prevIdent(q, i):
			start := i
			escapes := c != '\''
			if escapes {
				i++
			}
			j := i + 1
			for j < len(q) {
				if escapes && q[j] == '\\' {
					j += 2
					continue
				}
				if q[j] == '\'' {
					if j+1 < len(q) && q[j+1] == '\'' {
						j += 2
						continue
					}
					break
				}
				j++
			}
			end := min(j+1, len(q))
			literals = append(literals, q[start:end])
			emit("?")
			i = end
		case c == '"':
			j := strings.IndexByte(q[i+1:], '"')
			end := len(q)
			if j >= 0 {
				end = i + 1 + j + 1
			}
			emit(q[i:end])
			i = end
		case c == '$' && dollarTag(q[i:]) > 0:
			t := dollarTag(q[i:])
			tag := q[i : i+t]
			j := strings.Index(q[i+t:], tag)
			end := len(q)
			if j >= 0 {
				end = i + t + j + t
			}
			literals = append(literals, q[i:end])
			emit("?")
			i = end
		case isDigit(c) && !prevIdent(q, i):
			j := i
			for j < len(q) && (isDigit(q[j]) || q[j] == '.' ||
				(q[j] == 'e' || q[j] == 'E') && j+1 < len(q) && (isDigit(q[j+1]) || q[j+1] == '-' || q[j+1] == '+')) {
				if q[j] == 'e' || q[j] == 'E' {
					j++
				}
				j++
			}
			literals = append(literals, q[i:j])
			emit("?")
			i = j
		default:
			j := i + 1
			if isIdent(c) {
				for j < len(q) && isIdent(q[j]) {
					j++
				}
			}
			emit(q[i:j])
			i = j
		}
	}
	return strings.TrimRight(b.String(), "; "), literals
}

// dollarTag returns the length of the dollar-quote tag ($$ or $name$) at
// the start of s, or 0 (a parameter like $1, or no tag).
func dollarTag(s string) int {
	for j := 1; j < len(s); j++ {
		c := s[j]
		if c == '$' {
			return j + 1
		}
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 || j > 1 && isDigit(c)) {
			return 0
		}
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdent(c byte) bool {
	return c == '_' || c == '$' || isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// prevIdent reports whether the byte before q[i] continues an identifier
// (so a digit at i belongs to a name like t1, and E' to a name like
// "type'…").
func prevIdent(q string, i int) bool {
	return i > 0 && isIdent(q[i-1])
}
