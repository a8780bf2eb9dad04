package diff

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// CompareCalls compares the request bytes of a downstream call the replay
// made (got) with the recorded call it matched (want), under the rules that
// apply to api in the downstream scope and to destination dst:
//
//   - "http": method, target, headers and body (JSON structurally);
//     paths "method", "target", "header.X", "body…"
//   - "redis": the command arguments; paths "args[i]", or "cmd[n].args[i]"
//     for pipelines
//   - "mysql": the SQL of COM_QUERY and COM_STMT_PREPARE with white space
//     normalised, path "sql"; for statement commands (execute, close, …)
//     the statement id, path "stmt_id", apart from the parameters, path
//     "params"; a different command, path "command"
//   - anything else, or bytes that do not parse: path "bytes"
func (r *Rules) CompareCalls(api, proto, dst string, want, got []byte) []Difference {
	if bytes.Equal(want, got) {
		return nil
	}
	c := &collector{v: r.view(api, ScopeDownstream, dst)}
	switch proto {
	case "http":
		if w, err := ParseRequest(want); err == nil {
			if g, err := ParseRequest(got); err == nil {
				c.request(w, g)
				return c.result()
			}
		}
	case "redis":
		if w, ok := parseRESP(want); ok {
			if g, ok := parseRESP(got); ok {
				c.redis(w, g)
				return c.result()
			}
		}
	case "mysql":
		if w, ok := parseMySQLPackets(want); ok {
			if g, ok := parseMySQLPackets(got); ok {
				c.mysqlPackets(w, g)
				return c.result()
			}
		}
	}
	c.bytes(want, got)
	return c.result()
}

func (c *collector) request(w, g *Request) {
	c.push(keySeg("method"))
	if w.Method != g.Method && !c.v.ignored(c.path) {
		c.add(Changed, w.Method, g.Method, "")
	}
	c.pop()
	c.push(keySeg("target"))
	if w.Target != g.Target && !c.v.ignored(c.path) {
		c.add(Changed, w.Target, g.Target, "")
	}
	c.pop()
	c.headers(w.Header, g.Header)
	c.body(w.Header, w.Body, w.Truncated, g.Header, g.Body)
}

func (c *collector) redis(want, got [][]string) {
	single := len(want) == 1 && len(got) == 1
	for n := 0; n < len(want) || n < len(got); n++ {
		if !single {
			c.push(keySeg("cmd"))
			c.push(idxSeg(n))
		}
		switch {
		case n >= len(got):
			c.push(keySeg("args"))
			if !c.v.ignored(c.path) {
				c.add(Removed, strings.Join(want[n], " "), "", "")
			}
			c.pop()
		case n >= len(want):
			c.push(keySeg("args"))
			if !c.v.ignored(c.path) {
				c.add(Added, "", strings.Join(got[n], " "), "")
			}
			c.pop()
		default:
			c.push(keySeg("args"))
			w, g := want[n], got[n]
			for i := 0; i < len(w) || i < len(g); i++ {
				c.push(idxSeg(i))
				if !c.v.ignored(c.path) {
					switch {
					case i >= len(g):
						c.add(Removed, excerpt([]byte(w[i])), "", "")
					case i >= len(w):
						c.add(Added, "", excerpt([]byte(g[i])), "")
					case w[i] != g[i]:
						c.add(Changed, excerpt([]byte(w[i])), excerpt([]byte(g[i])), "")
					}
				}
				c.pop()
			}
			c.pop()
		}
		if !single {
			c.pop()
			c.pop()
		}
	}
}

// bytes reports where two opaque payloads first differ.
func (c *collector) bytes(want, got []byte) { c.bytesAt("bytes", want, got) }

func (c *collector) bytesAt(name string, want, got []byte) {
	c.push(keySeg(name))
	defer c.pop()
	if c.v.ignored(c.path) {
		return
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	from := max(0, i-16)
	cut := func(b []byte) []byte {
		if from >= len(b) {
			return nil
		}
		return b[from:min(len(b), from+64)]
	}
	c.add(Changed, strconv.Quote(string(cut(want))), strconv.Quote(string(cut(got))),
		fmt.Sprintf("first difference at byte %d; %d vs %d bytes", i, len(want), len(got)))
}

// parseRESP parses one or more RESP arrays of bulk strings (a command or a
// pipeline of commands).
func parseRESP(b []byte) ([][]string, bool) {
	var cmds [][]string
	for len(b) > 0 {
		if b[0] != '*' {
			return nil, false
		}
		n, rest, ok := respInt(b[1:])
		if !ok || n < 0 || n > len(rest) {
			return nil, false
		}
		b = rest
		args := make([]string, 0, n)
		for i := 0; i < n; i++ {
			if len(b) == 0 || b[0] != '$' {
				return nil, false
			}
			l, rest, ok := respInt(b[1:])
			if !ok || l < 0 || l+2 > len(rest) || rest[l] != '\r' || rest[l+1] != '\n' {
				return nil, false
			}
			args = append(args, string(rest[:l]))
			b = rest[l+2:]
		}
		cmds = append(cmds, args)
	}
	return cmds, len(cmds) > 0
}

func respInt(b []byte) (int, []byte, bool) {
	i := bytes.Index(b, []byte("\r\n"))
	if i <= 0 || i > 20 {
		return 0, nil, false
	}
	n, err := strconv.Atoi(string(b[:i]))
	if err != nil {
		return 0, nil, false
	}
	return n, b[i+2:], true
}

// MySQL command bytes compared field by field.
const (
	comQuery         = 0x03
	comStmtPrepare   = 0x16
	comStmtExecute   = 0x17
	comStmtSendLong  = 0x18
	comStmtClose     = 0x19
	comStmtReset     = 0x1a
	comQuit          = 0x01
	mysqlHeaderBytes = 4
)

// mysqlCommand is one client command packet.
type mysqlCommand struct {
	cmd     byte
	sql     string // COM_QUERY, COM_STMT_PREPARE: normalised SQL
	stmtID  uint32 // statement commands
	hasStmt bool
	rest    []byte // the payload after the command byte (and statement id)
}

// mysqlPackets calls fn with each whole client command packet of b
// (header included) and its parsed command, leaving out COM_STMT_CLOSE and
// COM_QUIT: they only end a statement or a connection, and when a driver
// sends them depends on its pool, not on the request. It reports false
// when b is not whole packets.
func mysqlPackets(b []byte, fn func(pkt []byte, m *mysqlCommand)) bool {
	for len(b) > 0 {
		if len(b) < mysqlHeaderBytes+1 {
			return false
		}
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if n == 0 || n+mysqlHeaderBytes > len(b) {
			return false
		}
		pkt := b[:mysqlHeaderBytes+n]
		m, ok := parseMySQL(pkt[mysqlHeaderBytes:])
		if !ok {
			return false
		}
		if m.cmd != comStmtClose && m.cmd != comQuit {
			fn(pkt, m)
		}
		b = b[mysqlHeaderBytes+n:]
	}
	return true
}

// parseMySQLPackets parses a payload of whole client command packets (see
// mysqlPackets).
func parseMySQLPackets(b []byte) ([]*mysqlCommand, bool) {
	var out []*mysqlCommand
	if !mysqlPackets(b, func(_ []byte, m *mysqlCommand) { out = append(out, m) }) {
		return nil, false
	}
	return out, true
}

// Insignificant reports whether a downstream request carries nothing to
// compare: MySQL packets that only close statements or the connection.
// A recorded call like that which a replay never made is not a
// difference.
func Insignificant(proto string, req []byte) bool {
	if proto != "mysql" {
		return false
	}
	cmds, ok := parseMySQLPackets(req)
	return ok && len(cmds) == 0
}

func (c *collector) mysqlPackets(want, got []*mysqlCommand) {
	if len(want) == 1 && len(got) == 1 {
		c.mysql(want[0], got[0])
		return
	}
	for i := 0; i < len(want) || i < len(got); i++ {
		c.push(keySeg("packet"))
		c.push(idxSeg(i))
		switch {
		case c.v.ignored(c.path):
		case i >= len(got):
			c.add(Removed, mysqlSummary(want[i]), "", "")
		case i >= len(want):
			c.add(Added, "", mysqlSummary(got[i]), "")
		default:
			c.mysql(want[i], got[i])
		}
		c.pop()
		c.pop()
	}
}

func mysqlSummary(m *mysqlCommand) string {
	if m.sql != "" {
		return m.sql
	}
	return fmt.Sprintf("command 0x%02x", m.cmd)
}

// parseMySQL parses the payload of one client command packet.
func parseMySQL(p []byte) (*mysqlCommand, bool) {
	if len(p) == 0 {
		return nil, false
	}
	m := &mysqlCommand{cmd: p[0], rest: p[1:]}
	switch m.cmd {
	case comQuery, comStmtPrepare:
		m.sql = NormalizeSQL(string(p[1:]))
	case comStmtExecute, comStmtSendLong, comStmtClose, comStmtReset:
		if len(p) < 5 {
			return nil, false
		}
		m.stmtID, m.hasStmt = uint32(p[1])|uint32(p[2])<<8|uint32(p[3])<<16|uint32(p[4])<<24, true
		m.rest = p[5:]
	}
	return m, true
}

// mysql compares two commands: paths "command", "sql", "stmt_id" (the
// statement id, assigned per connection by the server) and "params" (the
// rest of a statement command, as bytes).
func (c *collector) mysql(w, g *mysqlCommand) {
	if w.cmd != g.cmd {
		c.push(keySeg("command"))
		if !c.v.ignored(c.path) {
			c.add(Changed, fmt.Sprintf("0x%02x", w.cmd), fmt.Sprintf("0x%02x", g.cmd), "")
		}
		c.pop()
		return
	}
	switch w.cmd {
	case comQuery, comStmtPrepare:
		c.push(keySeg("sql"))
		if w.sql != g.sql && !c.v.ignored(c.path) {
			c.add(Changed, w.sql, g.sql, "")
		}
		c.pop()
		return
	}
	if w.hasStmt {
		c.push(keySeg("stmt_id"))
		if w.stmtID != g.stmtID && !c.v.ignored(c.path) {
			c.add(Changed, strconv.FormatUint(uint64(w.stmtID), 10), strconv.FormatUint(uint64(g.stmtID), 10), "")
		}
		c.pop()
		if bytes.Equal(w.rest, g.rest) {
			return
		}
		if w.cmd == comStmtExecute {
			if wp, ok := executeParams(w.rest); ok {
				if gp, ok := executeParams(g.rest); ok && len(wp) == len(gp) {
					c.params(wp, gp)
					return
				}
			}
		}
		c.bytesAt("params", w.rest, g.rest)
		return
	}
	if !bytes.Equal(w.rest, g.rest) {
		c.bytesAt("bytes", w.rest, g.rest)
	}
}

func (c *collector) params(want, got []string) {
	c.push(keySeg("params"))
	defer c.pop()
	for i := range want {
		c.push(idxSeg(i))
		if want[i] != got[i] && !c.v.ignored(c.path) {
			c.add(Changed, want[i], got[i], "")
		}
		c.pop()
	}
}

// executeParams decodes the parameter values of a COM_STMT_EXECUTE payload
// (after the statement id): flags, iteration count, NULL bitmap, the
// new-params-bound flag, the types and the values. The packet does not say
// how many parameters there are, so the smallest count whose layout uses
// every byte exactly is taken. Values are rendered as text (NULL, numbers,
// quoted strings, dates). ok is false when no count fits or the types were
// not sent (bound earlier on the connection).
func executeParams(b []byte) ([]string, bool) {
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

// NormalizeSQL collapses runs of white space outside quotes into one
// space and drops leading and trailing space and a final ';', so that
// formatting changes do not show as differences.
func NormalizeSQL(s string) string {
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

// MySQLCommand is one client command packet of a MySQL payload.
type MySQLCommand struct {
	Cmd    byte   // command byte (0x03 COM_QUERY, 0x16 COM_STMT_PREPARE, 0x17 COM_STMT_EXECUTE, …)
	SQL    string // COM_QUERY and COM_STMT_PREPARE: the normalised SQL
	StmtID uint32 // statement commands: the statement id
	Stmt   bool   // the command names a statement
	Packet []byte // the whole packet, header included
}

// MySQLCommands splits a MySQL client payload into its command packets,
// leaving out COM_STMT_CLOSE and COM_QUIT (see Insignificant). ok is false
// when the payload is not whole packets.
func MySQLCommands(b []byte) (cmds []MySQLCommand, ok bool) {
	ok = mysqlPackets(b, func(pkt []byte, m *mysqlCommand) {
		cmds = append(cmds, MySQLCommand{Cmd: m.cmd, SQL: m.sql, StmtID: m.stmtID, Stmt: m.hasStmt, Packet: pkt})
	})
	if !ok {
		return nil, false
	}
	return cmds, true
}

// WithoutStmtID returns a copy of the packet with its statement id zeroed,
// for comparing statement commands already paired by their SQL.
func (m MySQLCommand) WithoutStmtID() []byte {
	p := append([]byte(nil), m.Packet...)
	if m.Stmt {
		copy(p[mysqlHeaderBytes+1:mysqlHeaderBytes+5], []byte{0, 0, 0, 0})
	}
	return p
}

// MySQLPrepareOK returns the statement id of a COM_STMT_PREPARE_OK
// response.
func MySQLPrepareOK(resp []byte) (uint32, bool) {
	if len(resp) < mysqlHeaderBytes+5 || resp[mysqlHeaderBytes] != 0 {
		return 0, false
	}
	p := resp[mysqlHeaderBytes+1:]
	return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24, true
}
