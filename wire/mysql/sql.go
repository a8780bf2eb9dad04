package mysql

import "strings"

// NormalizeSQL returns q with every literal (quoted string, number, hex or
// bit literal) replaced by '?', white space collapsed and keywords outside
// literals kept as written, plus the literals in order. Two queries that
// differ only in their values normalise to the same text.
func NormalizeSQL(q string) (norm string, literals []string) {
	return normalizeSQL(q, nil)
}

// normalizeSQL is NormalizeSQL that also appends the [start, end) of each
// literal in q to spans, when spans is not nil.
func normalizeSQL(q string, spans *[][2]int) (norm string, literals []string) {
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
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			space = true
			i++
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(q) {
				if q[j] == '\\' {
					j += 2
					continue
				}
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			end := min(j+1, len(q))
			literals = append(literals, q[i:end])
			if spans != nil {
				*spans = append(*spans, [2]int{i, end})
			}
			emit("?")
			i = end
		case c == '`':
			j := strings.IndexByte(q[i+1:], '`')
			end := len(q)
			if j >= 0 {
				end = i + 1 + j + 1
			}
			emit(q[i:end])
			i = end
		case isDigit(c) && !prevIdent(q, i):
			j := i
			for j < len(q) && (isDigit(q[j]) || q[j] == '.' || q[j] == 'x' || q[j] == 'X' ||
				(q[j] >= 'a' && q[j] <= 'f') || (q[j] >= 'A' && q[j] <= 'F') ||
				((q[j] == 'e' || q[j] == 'E') && j+1 < len(q) && (q[j+1] == '-' || q[j+1] == '+'))) {
				if (q[j] == 'e' || q[j] == 'E') && j+1 < len(q) && (q[j+1] == '-' || q[j+1] == '+') {
					j++
				}
				j++
			}
			literals = append(literals, q[i:j])
			if spans != nil {
				*spans = append(*spans, [2]int{i, j})
			}
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
	return b.String(), literals
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdent(c byte) bool {
	return c == '_' || c == '$' || c == '@' || isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// prevIdent reports whether the byte before q[i] continues an identifier
// (so the digit at i is part of a name like t1, not a literal).
func prevIdent(q string, i int) bool {
	return i > 0 && isIdent(q[i-1])
}

// IsSetupQuery reports whether a COM_QUERY text is session set-up that a
// driver may send on a fresh connection (SET NAMES, SET autocommit, reading
// system variables), answered per connection rather than per request.
func IsSetupQuery(q string) bool {
	q = strings.TrimLeft(q, " \t\r\n")
	if len(q) < 4 {
		return false
	}
	head := strings.ToUpper(q[:min(len(q), 12)])
	return strings.HasPrefix(head, "SET ") || strings.HasPrefix(head, "SELECT @@")
}
