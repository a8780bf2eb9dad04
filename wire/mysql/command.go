package mysql

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/retrace-dev/retrace/wire"
)

// Command is one client command packet, parsed for comparison and
// display.
type Command struct {
	Cmd    byte   // command byte (ComQuery, ComStmtPrepare, ComStmtExecute, …)
	SQL    string // ComQuery and ComStmtPrepare: the SQL, white space collapsed (CollapseSQL)
	StmtID uint32 // statement commands: the statement id
	Stmt   bool   // the command names a statement
	Rest   []byte // the payload after the command byte (and statement id)
	Packet []byte // the whole packet, header included (set by Commands)
}

// ParseCommand parses the payload of one client command packet.
func ParseCommand(p []byte) (Command, bool) {
	if len(p) == 0 {
		return Command{}, false
	}
	m := Command{Cmd: p[0], Rest: p[1:]}
	switch m.Cmd {
	case ComQuery, ComStmtPrepare:
		m.SQL = CollapseSQL(string(p[1:]))
	case ComStmtExecute, ComStmtSendLongData, ComStmtClose, ComStmtReset:
		if len(p) < 5 {
			return Command{}, false
		}
		m.StmtID, m.Stmt = uint32(p[1])|uint32(p[2])<<8|uint32(p[3])<<16|uint32(p[4])<<24, true
		m.Rest = p[5:]
	}
	return m, true
}

// Commands splits a client payload of whole packets into its commands,
// leaving out COM_STMT_CLOSE and COM_QUIT: they only end a statement or a
// connection, and when a driver sends them depends on its pool, not on the
// request. ok is false when the payload is not whole packets.
func Commands(b []byte) (cmds []Command, ok bool) {
	for len(b) > 0 {
		if len(b) < 5 {
			return nil, false
		}
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if n == 0 || n+4 > len(b) {
			return nil, false
		}
		pkt := b[:4+n]
		m, ok := ParseCommand(pkt[4:])
		if !ok {
			return nil, false
		}
		m.Packet = pkt
		if m.Cmd != ComStmtClose && m.Cmd != ComQuit {
			cmds = append(cmds, m)
		}
		b = b[4+n:]
	}
	return cmds, true
}

// WithoutStmtID returns a copy of the packet with its statement id zeroed,
// for comparing statement commands already paired by their SQL.
func (m Command) WithoutStmtID() []byte {
	p := append([]byte(nil), m.Packet...)
	if m.Stmt && len(p) >= 9 {
		copy(p[5:9], []byte{0, 0, 0, 0})
	}
	return p
}

// PrepareOK returns the statement id of a COM_STMT_PREPARE_OK response
// (its header included).
func PrepareOK(resp []byte) (uint32, bool) {
	if len(resp) < 4+5 || resp[4] != 0 {
		return 0, false
	}
	p := resp[5:]
	return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24, true
}

var commandNames = map[byte]string{ComQuit: "COM_QUIT", ComInitDB: "COM_INIT_DB", ComQuery: "COM_QUERY",
	ComFieldList: "COM_FIELD_LIST", ComStatistics: "COM_STATISTICS", ComPing: "COM_PING",
	ComChangeUser: "COM_CHANGE_USER", ComStmtPrepare: "COM_STMT_PREPARE", ComStmtExecute: "COM_STMT_EXECUTE",
	ComStmtSendLongData: "COM_STMT_SEND_LONG_DATA", ComStmtClose: "COM_STMT_CLOSE", ComStmtReset: "COM_STMT_RESET",
	ComSetOption: "COM_SET_OPTION", ComResetConnection: "COM_RESET_CONNECTION"}

// String is the command as a person reads it: its SQL, "PREPARE <sql>",
// "EXECUTE #<id> (<params>)", or its name.
func (m Command) String() string {
	switch m.Cmd {
	case ComQuery:
		return m.SQL
	case ComStmtPrepare:
		return "PREPARE " + m.SQL
	case ComStmtExecute:
		if ps, ok := ExecuteParams(m.Rest); ok {
			return fmt.Sprintf("EXECUTE #%d (%s)", m.StmtID, strings.Join(ps, ", "))
		}
		return fmt.Sprintf("EXECUTE #%d", m.StmtID)
	case ComInitDB:
		return "USE " + string(m.Rest)
	}
	name, ok := commandNames[m.Cmd]
	if !ok {
		name = fmt.Sprintf("COM_0x%02x", m.Cmd)
	}
	if m.Stmt {
		return fmt.Sprintf("%s #%d", name, m.StmtID)
	}
	return name
}

// Fields are the command's parts by the downstream diff's paths: "sql",
// "stmt_id", "params[i]", "command".
func (m Command) Fields() []wire.Field {
	switch m.Cmd {
	case ComQuery, ComStmtPrepare:
		return []wire.Field{{Path: "sql", Value: m.SQL}}
	}
	if !m.Stmt {
		return []wire.Field{{Path: "command", Value: m.String()}}
	}
	out := []wire.Field{{Path: "stmt_id", Value: strconv.FormatUint(uint64(m.StmtID), 10)}}
	if m.Cmd == ComStmtExecute {
		if ps, ok := ExecuteParams(m.Rest); ok {
			for i, p := range ps {
				out = append(out, wire.Field{Path: "params[" + strconv.Itoa(i) + "]", Value: p})
			}
		}
	}
	return out
}

// ExecuteParams decodes the parameter values of a COM_STMT_EXECUTE payload
// (after the statement id): flags, iteration count, NULL bitmap, the
// new-params-bound flag, the types and the values. The packet does not say
// how many parameters there are, so the smallest count whose layout uses
// every byte exactly is taken. Values are rendered as text (NULL, numbers,
// quoted strings, dates). ok is false when no count fits or the types were
// not sent (bound earlier on the connection).
func ExecuteParams(b []byte) ([]string, bool) {
	if len(b) < 5 {
		return nil, false
	}
	b = b[5:] // flags, iteration count
	if len(b) == 0 {
		return []string{}, true
	}
	for n := 1; n <= 1024 && (n+7)/8+1+2*n <= len(b); n++ {
		if vals, ok := decodeParams(b, n); ok {
			return vals, true
		}
	}
	return nil, false
}

func decodeParams(b []byte, n int) ([]string, bool) {
	nb := (n + 7) / 8
	bitmap, rest := b[:nb], b[nb:]
	if rest[0] != 1 {
		return nil, false
	}
	types, vals := rest[1:1+2*n], rest[1+2*n:]
	out := make([]string, n)
	for i := 0; i < n; i++ {
		if bitmap[i/8]&(1<<(i%8)) != 0 {
			out[i] = "NULL"
			continue
		}
		t, unsigned := types[2*i], types[2*i+1]&0x80 != 0
		v, size, ok := decodeValue(t, unsigned, vals)
		if !ok {
			return nil, false
		}
		out[i], vals = v, vals[size:]
	}
	return out, len(vals) == 0
}

// decodeValue decodes one binary-protocol value of MySQL type t.
func decodeValue(t byte, unsigned bool, b []byte) (string, int, bool) {
	fixed := func(n int) ([]byte, bool) { return b[:min(n, len(b))], len(b) >= n }
	le := func(p []byte) uint64 {
		var v uint64
		for i := len(p) - 1; i >= 0; i-- {
			v = v<<8 | uint64(p[i])
		}
		return v
	}
	switch t {
	case 0x01: // TINY
		p, ok := fixed(1)
		if unsigned {
			return strconv.FormatUint(le(p), 10), 1, ok
		}
		return strconv.FormatInt(int64(int8(le(p))), 10), 1, ok
	case 0x02, 0x0d: // SHORT, YEAR
		p, ok := fixed(2)
		if unsigned || t == 0x0d {
			return strconv.FormatUint(le(p), 10), 2, ok
		}
		return strconv.FormatInt(int64(int16(le(p))), 10), 2, ok
	case 0x03, 0x09: // LONG, INT24
		p, ok := fixed(4)
		if unsigned {
			return strconv.FormatUint(le(p), 10), 4, ok
		}
		return strconv.FormatInt(int64(int32(le(p))), 10), 4, ok
	case 0x08: // LONGLONG
		p, ok := fixed(8)
		if unsigned {
			return strconv.FormatUint(le(p), 10), 8, ok
		}
		return strconv.FormatInt(int64(le(p)), 10), 8, ok
	case 0x04: // FLOAT
		p, ok := fixed(4)
		return strconv.FormatFloat(float64(math.Float32frombits(uint32(le(p)))), 'g', -1, 32), 4, ok
	case 0x05: // DOUBLE
		p, ok := fixed(8)
		return strconv.FormatFloat(math.Float64frombits(le(p)), 'g', -1, 64), 8, ok
	case 0x07, 0x0a, 0x0c, 0x0b: // TIMESTAMP, DATE, DATETIME, TIME
		if len(b) == 0 {
			return "", 0, false
		}
		n := int(b[0])
		if len(b) < 1+n {
			return "", 0, false
		}
		return fmt.Sprintf("time(%x)", b[1:1+n]), 1 + n, true
	case 0x0f, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe: // strings, blobs, decimal, JSON
		l, hdr, ok := lenEnc(b)
		if !ok || uint64(len(b)-hdr) < l {
			return "", 0, false
		}
		return strconv.Quote(string(b[hdr : hdr+int(l)])), hdr + int(l), true
	case 0x06: // NULL
		return "NULL", 0, true
	}
	return "", 0, false
}

// lenEnc decodes a length-encoded integer.
func lenEnc(b []byte) (uint64, int, bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch c := b[0]; {
	case c < 0xfb:
		return uint64(c), 1, true
	case c == 0xfc && len(b) >= 3:
		return uint64(b[1]) | uint64(b[2])<<8, 3, true
	case c == 0xfd && len(b) >= 4:
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4, true
	case c == 0xfe && len(b) >= 9:
		var v uint64
		for i := 8; i >= 1; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v, 9, true
	}
	return 0, 0, false
}

// CollapseSQL collapses runs of white space outside quotes into one
// space and drops leading and trailing space and a final ';', so that
// formatting changes do not show as differences.
func CollapseSQL(s string) string {
	var b strings.Builder
	var quote byte
	space := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if quote != 0 {
			b.WriteByte(ch)
			if ch == '\\' && i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			} else if ch == quote {
				quote = 0
			}
			continue
		}
		switch ch {
		case ' ', '\t', '\n', '\r':
			space = true
			continue
		case '\'', '"', '`':
			quote = ch
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteByte(ch)
	}
	out := b.String()
	out = strings.TrimSuffix(out, ";")
	return strings.TrimRight(out, " ")
}
