// Masking: where the values of PostgreSQL messages are (SQL literals,
// bound parameters, COPY data, result rows, error fields, notification
// payloads), for the masking rules a wire.MaskRules carries.

package postgres

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/wire"
)

// Mask masks the values of one recorded side of PostgreSQL traffic,
// message by message, fixing every message and value length a change
// moves:
//
//   - client: the literals of Query and Parse statements (the contents of
//     '…', E'…' and $tag$…$tag$ strings, and numbers; names, keywords,
//     comments and $n parameters are kept), Bind's parameter values, and
//     COPY data. Start-up packets and password messages are kept.
//   - server: DataRow values, the fields of ErrorResponse and
//     NoticeResponse but severity and code, NotificationResponse
//     payloads and COPY data.
//
// A value is masked when it is text: in text format, or in binary format
// of a text type (text, varchar, bpchar, name, json, unknown) as a Parse
// (with parameter types) or RowDescription of the same payload says, or,
// when the payload does not say its type, when it is printable UTF-8
// (binary numbers, timestamps and UUIDs are not).
// Bytes after the last whole message (a payload cut by the cap) get the
// rules' patterns as text.
func (protocol) Mask(side wire.Side, msg []byte, rules wire.MaskRules) []byte {
	m := masker{rules: rules}
	out := make([]byte, 0, len(msg))
	frontend := side == wire.Client
	stmts := map[string][]uint32{} // statement name → parameter types, from Parse
	var cols []column              // of the last RowDescription
	// a malformed message ends the walk: from there on, text
	n, _ := Messages(msg, frontend, frontend && len(msg) > 0 && msg[0] == 0, func(g Message) bool {
		body := g.Body
		switch {
		case g.Type == 0: // start-up packets: kept
			out = binary.BigEndian.AppendUint32(out, uint32(8+len(body)))
			out = binary.BigEndian.AppendUint32(out, g.Code)
			out = append(out, body...)
			return true
		case frontend:
			body = m.client(g, stmts)
		default:
			body, cols = m.server(g, cols)
		}
		out = append(out, g.Type)
		out = binary.BigEndian.AppendUint32(out, uint32(4+len(body)))
		out = append(out, body...)
		return true
	})
	if !m.changed && n == len(msg) {
		return msg
	}
	if n < len(msg) {
		out = append(out, m.text(msg[n:])...)
	}
	if !m.changed {
		return msg
	}
	return out
}

type masker struct {
	rules   wire.MaskRules
	changed bool
}

func (m *masker) text(v []byte) []byte {
	mv := m.rules.Text(v)
	if !bytes.Equal(mv, v) {
		m.changed = true
	}
	return mv
}

// cstring masks a NUL-free value; a replacement holding NUL is not taken.
func (m *masker) cstring(v []byte) []byte {
	mv := m.rules.Text(v)
	if bytes.IndexByte(mv, 0) >= 0 || bytes.Equal(mv, v) {
		return v
	}
	m.changed = true
	return mv
}

// column is what masking needs of a RowDescription field.
type column struct {
	oid    uint32
	binary bool
}

// textOID: the types whose binary format is their text.
func textOID(oid uint32) bool {
	switch oid {
	case 25, 1043, 1042, 19, 114, 705, 18: // text, varchar, bpchar, name, json, unknown, char
		return true
	}
	return false
}

// printable: valid UTF-8 without control characters but tab and newlines.
func printable(v []byte) bool {
	if !utf8.Valid(v) {
		return false
	}
	for _, c := range v {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}

func (m *masker) client(g Message, stmts map[string][]uint32) []byte {
	b := g.Body
	switch g.Type {
	case Query:
		q, rest, ok := bytes.Cut(b, []byte{0})
		if !ok {
			return b
		}
		return append(append(m.sql(q), 0), rest...)
	case Parse:
		name, rest, ok1 := bytes.Cut(b, []byte{0})
		q, tail, ok2 := bytes.Cut(rest, []byte{0})
		if !ok1 || !ok2 {
			return b
		}
		if len(tail) >= 2 {
			k := int(binary.BigEndian.Uint16(tail))
			if len(tail) >= 2+4*k {
				oids := make([]uint32, k)
				for i := range oids {
					oids[i] = binary.BigEndian.Uint32(tail[2+4*i:])
				}
				stmts[string(name)] = oids
			}
		}
		out := append(append([]byte(nil), name...), 0)
		return append(append(append(out, m.sql(q)...), 0), tail...)
	case Bind:
		return m.bind(b, stmts)
	case CopyData:
		return m.text(b)
	}
	return b
}

// bind masks the parameter values of a Bind message.
func (m *masker) bind(b []byte, stmts map[string][]uint32) []byte {
	_, rest, ok1 := bytes.Cut(b, []byte{0}) // the portal
	stmt, rest, ok2 := bytes.Cut(rest, []byte{0})
	if !ok1 || !ok2 || len(rest) < 2 {
		return b
	}
	nf := int(binary.BigEndian.Uint16(rest))
	if len(rest) < 2+2*nf+2 {
		return b
	}
	formats := rest[2 : 2+2*nf]
	np := int(binary.BigEndian.Uint16(rest[2+2*nf:]))
	head := len(b) - len(rest) + 2 + 2*nf + 2
	out := append([]byte(nil), b[:head]...)
	p := b[head:]
	oids := stmts[string(stmt)]
	for i := 0; i < np; i++ {
		if len(p) < 4 {
			return b
		}
		l := int32(binary.BigEndian.Uint32(p))
		if l < 0 {
			out, p = append(out, p[:4]...), p[4:]
			continue
		}
		if int(l) > len(p)-4 {
			return b
		}
		v := p[4 : 4+l]
		format := int16(0)
		switch {
		case nf == 1:
			format = int16(binary.BigEndian.Uint16(formats))
		case i < nf:
			format = int16(binary.BigEndian.Uint16(formats[2*i:]))
		}
		var oid uint32
		if i < len(oids) {
			oid = oids[i]
		}
		mv := v
		if format == 0 || textOID(oid) || oid == 0 && printable(v) {
			mv = m.text(v)
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(mv)))
		out = append(out, mv...)
		p = p[4+l:]
	}
	return append(out, p...) // result format codes
}

func (m *masker) server(g Message, cols []column) ([]byte, []column) {
	b := g.Body
	switch g.Type {
	case RowDescription:
		return b, rowDescription(b)
	case DataRow:
		return m.dataRow(b, cols), cols
	case ErrorResponse, NoticeResponse:
		out := make([]byte, 0, len(b))
		for len(b) > 0 && b[0] != 0 {
			code := b[0]
			v, rest, ok := bytes.Cut(b[1:], []byte{0})
			if !ok {
				return g.Body, cols
			}
			if code != 'S' && code != 'V' && code != 'C' {
				v = m.cstring(v)
			}
			out = append(append(append(out, code), v...), 0)
			b = rest
		}
		return append(out, b...), cols
	case NotificationResponse: // process id, channel, payload
		if len(b) < 4 {
			return b, cols
		}
		ch, rest, ok1 := bytes.Cut(b[4:], []byte{0})
		payload, tail, ok2 := bytes.Cut(rest, []byte{0})
		if !ok1 || !ok2 {
			return b, cols
		}
		out := append(append(append([]byte(nil), b[:4]...), ch...), 0)
		return append(append(append(out, m.cstring(payload)...), 0), tail...), cols
	case CopyData:
		return m.text(b), cols
	}
	return b, cols
}

// rowDescription reads the type and format of each field.
func rowDescription(b []byte) []column {
	if len(b) < 2 {
		return nil
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	cols := make([]column, 0, min(n, len(b)/19))
	for range n {
		i := bytes.IndexByte(b, 0)
		if i < 0 || len(b) < i+1+18 {
			return nil
		}
		f := b[i+1:]
		cols = append(cols, column{oid: binary.BigEndian.Uint32(f[6:]), binary: binary.BigEndian.Uint16(f[16:]) == 1})
		b = f[18:]
	}
	return cols
}

func (m *masker) dataRow(b []byte, cols []column) []byte {
	if len(b) < 2 {
		return b
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(cols) != n {
		cols = nil // not described in this payload
	}
	out := append([]byte(nil), b[:2]...)
	p := b[2:]
	for i := 0; i < n; i++ {
		if len(p) < 4 {
			return b
		}
		l := int32(binary.BigEndian.Uint32(p))
		if l < 0 {
			out, p = append(out, p[:4]...), p[4:]
			continue
		}
		if int(l) > len(p)-4 {
			return b
		}
		v, mv := p[4:4+l], p[4:4+l]
		if cols == nil && printable(v) || cols != nil && (!cols[i].binary || textOID(cols[i].oid)) {
			mv = m.text(v)
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(mv)))
		out = append(out, mv...)
		p = p[4+l:]
	}
	return append(out, p...)
}

// sql masks the literals of a statement (see Mask).
func (m *masker) sql(q []byte) []byte {
	s := string(q)
	var out []byte
	last := 0
	lit := func(i, j int) { // mask q[i:j]
		if out == nil {
			out = make([]byte, 0, len(q))
		}
		out = append(append(out, q[last:i]...), m.cstring(q[i:j])...)
		last = j
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '-' && strings.HasPrefix(s[i:], "--"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				j = len(s) - i
			}
			i += j
		case c == '/' && strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				i = len(s)
			} else {
				i += 2 + j + 2
			}
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				i = len(s)
			} else {
				i += 1 + j + 1
			}
		case c == '\'' || (c == 'E' || c == 'e') && i+1 < len(s) && s[i+1] == '\'' && !prevIdent(s, i):
			escapes := c != '\''
			if escapes {
				i++
			}
			j := i + 1
			for j < len(s) {
				if escapes && s[j] == '\\' {
					j += 2
					continue
				}
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' {
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j, len(s))
			lit(i+1, j)
			i = min(j+1, len(s))
		case c == '$' && !prevIdent(s, i):
			t := dollarTag(s[i:])
			if t == 0 {
				i++
				for i < len(s) && isDigit(s[i]) { // a parameter: $1
					i++
				}
				continue
			}
			j := strings.Index(s[i+t:], s[i:i+t])
			end := len(s)
			if j >= 0 {
				end = i + t + j
			}
			lit(i+t, end)
			i = min(end+t, len(s))
		case isDigit(c) && !prevIdent(s, i):
			j := i
			for j < len(s) && (isDigit(s[j]) || s[j] == '.' ||
				(s[j] == 'e' || s[j] == 'E') && j+1 < len(s) && (isDigit(s[j+1]) || s[j+1] == '-' || s[j+1] == '+')) {
				if s[j] == 'e' || s[j] == 'E' {
					j++
				}
				j++
			}
			lit(i, j)
			i = j
		default:
			i++
			if isIdent(c) {
				for i < len(s) && isIdent(s[i]) {
					i++
				}
			}
		}
	}
	if out == nil {
		return q
	}
	return append(out, q[last:]...)
}
