// Masking: where the values of MySQL packets are (SQL literals, bound
// parameters, long data, result rows, error messages), for the masking
// rules a wire.MaskRules carries.

package mysql

import (
	"bytes"

	"github.com/retrace-dev/retrace/wire"
)

// Mask masks the values of one recorded side of MySQL traffic, packet by
// packet, fixing every packet length and length-encoded string a change
// moves:
//
//   - client: the literals of COM_QUERY and COM_STMT_PREPARE statements
//     (quoted strings and numbers; keywords and names are kept), the
//     string parameters of COM_STMT_EXECUTE (when the packet carries their
//     types) and COM_STMT_SEND_LONG_DATA's data. Handshake packets carry no
//     values and are kept.
//   - server: the values of result rows, text and binary (told apart by
//     the column count and types of the result's column definitions), and
//     the message of error packets.
//
// Packets of 16 MiB or more (a message continued over several packets) are
// kept and reported with Skip; bytes after the last whole packet (a
// payload cut by the cap) get the rules' patterns as text.
func (protocol) Mask(side wire.Side, msg []byte, rules wire.MaskRules) []byte {
	m := masker{rules: rules}
	var out []byte
	if side == wire.Server {
		out = m.server(msg)
	} else {
		out = m.client(msg)
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

// packets calls each with the payload and sequence id of every whole
// packet of b, appending what it returns as a packet; it returns the
// result and the bytes after the last whole packet.
func (m *masker) packets(b []byte, each func(payload []byte, seq byte) []byte) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		payload, seq, n, ok := NextPacket(b)
		if !ok {
			break
		}
		if len(payload) == maxPacket {
			m.rules.Skip("a MySQL message of 16 MiB or more (several packets)")
			return append(out, b...)
		}
		p := each(payload, seq)
		if len(p) >= maxPacket {
			p = payload
		}
		out = appendPacket(out, seq, p)
		b = b[n:]
	}
	if len(b) > 0 {
		out = append(out, m.text(b)...)
	}
	return out
}

func (m *masker) client(b []byte) []byte {
	return m.packets(b, func(p []byte, seq byte) []byte {
		if seq != 0 || len(p) == 0 { // handshake response, auth switch answers
			return p
		}
		switch p[0] {
		case ComQuery, ComStmtPrepare:
			return append([]byte{p[0]}, m.sql(p[1:])...)
		case ComStmtExecute:
			return m.execute(p)
		case ComStmtSendLongData:
			if len(p) < 7 {
				return p
			}
			return append(append([]byte(nil), p[:7]...), m.text(p[7:])...)
		}
		return p
	})
}

// sql masks the literals of a statement: the contents of quoted strings
// and numbers.
func (m *masker) sql(q []byte) []byte {
	var spans [][2]int
	normalizeSQL(string(q), &spans)
	if len(spans) == 0 {
		return q
	}
	out := make([]byte, 0, len(q))
	last := 0
	for _, s := range spans {
		i, j := s[0], s[1]
		out = append(out, q[last:i]...)
		lit := q[i:j]
		if c := lit[0]; c == '\'' || c == '"' {
			inner, end := lit[1:], []byte(nil)
			if len(lit) >= 2 && lit[len(lit)-1] == c {
				inner, end = lit[1:len(lit)-1], lit[len(lit)-1:]
			}
			out = append(append(append(out, c), m.text(inner)...), end...)
		} else {
			out = append(out, m.text(lit)...)
		}
		last = j
	}
	return append(out, q[last:]...)
}

// execute masks the string parameters of a COM_STMT_EXECUTE packet whose
// types it carries; one whose types were bound by an earlier execute is
// reported with Skip.
func (m *masker) execute(p []byte) []byte {
	if len(p) <= 10 { // command, statement id, flags, iterations
		return p
	}
	b := p[10:]
	n := 0
	for c := 1; c <= 1024 && (c+7)/8+1+2*c <= len(b); c++ {
		if _, ok := decodeParams(b, c); ok {
			n = c
			break
		}
	}
	if n == 0 {
		m.rules.Skip("a MySQL COM_STMT_EXECUTE whose parameter types were sent by an earlier execute")
		return p
	}
	nb := (n + 7) / 8
	types := b[nb+1 : nb+1+2*n]
	vals := b[nb+1+2*n:]
	out := append([]byte(nil), p[:10+nb+1+2*n]...)
	for i := 0; i < n; i++ {
		if b[i/8]&(1<<(i%8)) != 0 {
			continue // NULL: no value
		}
		v, size := m.value(types[2*i], vals)
		out, vals = append(out, v...), vals[size:]
	}
	return out
}

// stringType: binary-protocol types whose value is a length-encoded string.
func stringType(t byte) bool { return t == 0x0f || t >= 0xf5 && t <= 0xfe }

// value masks one binary-protocol value of type t at the start of b (known
// to decode) and returns it with the bytes it occupied.
func (m *masker) value(t byte, b []byte) ([]byte, int) {
	_, size, _ := decodeValue(t, false, b)
	if !stringType(t) {
		return b[:size], size
	}
	l, hdr, _ := lenEnc(b)
	return appendLenEncString(nil, m.text(b[hdr:hdr+int(l)])), size
}

func appendLenEnc(b []byte, n uint64) []byte {
	switch {
	case n < 0xfb:
		return append(b, byte(n))
	case n < 1<<16:
		return append(b, 0xfc, byte(n), byte(n>>8))
	case n < 1<<24:
		return append(b, 0xfd, byte(n), byte(n>>8), byte(n>>16))
	}
	b = append(b, 0xfe)
	for i := 0; i < 8; i++ {
		b = append(b, byte(n>>(8*i)))
	}
	return b
}

func appendLenEncString(b, s []byte) []byte { return append(appendLenEnc(b, uint64(len(s))), s...) }

// server masks a response: result rows (after the column count and
// definitions) and error messages; everything else is kept.
func (m *masker) server(b []byte) []byte {
	const (
		first = iota // the response's first packet
		defs         // column definitions
		rows
		done // OK, greeting, authentication: no values follow
	)
	state, cols, types, seen := first, 0, []byte(nil), 0
	return m.packets(b, func(p []byte, seq byte) []byte {
		if len(p) == 0 {
			return p
		}
		if p[0] == 0xff { // error packet: code, '#', state, message
			state = first
			if len(p) > 9 && p[3] == '#' {
				return append(append([]byte(nil), p[:9]...), m.text(p[9:])...)
			}
			if len(p) > 3 {
				return append(append([]byte(nil), p[:3]...), m.text(p[3:])...)
			}
			return p
		}
		switch state {
		case first:
			if seq == 0 || p[0] == 0x00 || p[0] == 0xfe || p[0] == 0xfb {
				return p // greeting, OK, EOF or auth switch, LOCAL INFILE
			}
			// the column count; MariaDB with MARIADB_CLIENT_CACHE_METADATA
			// adds whether the column definitions follow
			n, hdr, ok := lenEnc(p)
			if ok && (hdr == len(p) || hdr+1 == len(p)) && n > 0 && n < 1<<12 {
				state, cols, types, seen = defs, int(n), types[:0], 0
				if hdr+1 == len(p) && p[hdr] == 0 { // no definitions: types unknown
					state, types = rows, make([]byte, cols)
				}
			}
		case defs:
			types = append(types, columnType(p))
			if len(types) == cols {
				state = rows // with CLIENT_DEPRECATE_EOF no EOF follows
			}
		case rows:
			// a text row never starts with 0xfe (a string of 2^24 bytes or
			// more): EOF (5 bytes), or OK in its place
			if p[0] == 0xfe {
				if seen == 0 && len(p) == 5 {
					seen = -1 // the EOF after the definitions: the rows follow
					return p
				}
				state = first // the end of the rows (more results may follow)
				return p
			}
			seen = 1
			return m.row(p, types)
		}
		return p
	})
}

// columnType is the type of a column definition packet (protocol 4.1:
// six length-encoded strings, the length 0x0c of the fixed fields, charset
// and length, then the type); 0 when it does not parse.
func columnType(p []byte) byte {
	off := 0
	for range 6 {
		l, hdr, ok := lenEnc(p[off:])
		if !ok || off+hdr+int(l) > len(p) {
			return 0
		}
		off += hdr + int(l)
	}
	if off+8 > len(p) || p[off] != 0x0c {
		return 0
	}
	return p[off+7]
}

// textRow reports whether p is a text row of cols values (length-encoded
// strings or 0xfb for NULL) using every byte.
func textRow(p []byte, cols int) bool {
	off := 0
	for range cols {
		if off >= len(p) {
			return false
		}
		if p[off] == 0xfb {
			off++
			continue
		}
		l, hdr, ok := lenEnc(p[off:])
		if !ok || uint64(len(p)-off-hdr) < l {
			return false
		}
		off += hdr + int(l)
	}
	return off == len(p)
}

// binaryRow reports whether p is a binary row of the types (0x00, the NULL
// bitmap offset by two bits, the values) using every byte.
func binaryRow(p []byte, types []byte) bool {
	nb := (len(types) + 7 + 2) / 8
	if len(p) < 1+nb || p[0] != 0x00 {
		return false
	}
	off := 1 + nb
	for i, t := range types {
		if p[1+(i+2)/8]&(1<<((i+2)%8)) != 0 {
			continue
		}
		_, size, ok := decodeValue(t, false, p[off:])
		if !ok {
			return false
		}
		off += size
	}
	return off == len(p)
}

// row masks the values of a result row, text or binary; a row that is
// neither is kept and reported with Skip.
func (m *masker) row(p []byte, types []byte) []byte {
	cols := len(types)
	if textRow(p, cols) {
		out := make([]byte, 0, len(p))
		for off := 0; off < len(p); {
			if p[off] == 0xfb {
				out, off = append(out, 0xfb), off+1
				continue
			}
			l, hdr, _ := lenEnc(p[off:])
			out = appendLenEncString(out, m.text(p[off+hdr:off+hdr+int(l)]))
			off += hdr + int(l)
		}
		return out
	}
	if binaryRow(p, types) {
		nb := (cols + 7 + 2) / 8
		out := append([]byte(nil), p[:1+nb]...)
		vals := p[1+nb:]
		for i, t := range types {
			if p[1+(i+2)/8]&(1<<((i+2)%8)) != 0 {
				continue
			}
			v, size := m.value(t, vals)
			out, vals = append(out, v...), vals[size:]
		}
		return out
	}
	m.rules.Skip("a MySQL result row that is neither a text nor a binary row of its columns")
	return p
}
