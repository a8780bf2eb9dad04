package diff

import (
	"bytes"
	"fmt"
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
		if w, ok := parseMySQL(want); ok {
			if g, ok := parseMySQL(got); ok {
				c.mysql(w, g)
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

// parseMySQL parses a payload that is exactly one client command packet.
func parseMySQL(b []byte) (*mysqlCommand, bool) {
	if len(b) < mysqlHeaderBytes+1 {
		return nil, false
	}
	n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
	if n+mysqlHeaderBytes != len(b) {
		return nil, false
	}
	p := b[mysqlHeaderBytes:]
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
		if !bytes.Equal(w.rest, g.rest) {
			c.bytesAt("params", w.rest, g.rest)
		}
		return
	}
	if !bytes.Equal(w.rest, g.rest) {
		c.bytesAt("bytes", w.rest, g.rest)
	}
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
