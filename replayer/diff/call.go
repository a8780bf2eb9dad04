package diff

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/postgres"
	"github.com/retrace-dev/retrace/wire/protocols"
	"github.com/retrace-dev/retrace/wire/redis"
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
//   - "postgres": each statement run or prepared, white space normalised,
//     path "sql" (or "sql[i]" for several), every bound parameter decoded
//     by type, path "params[j]", COPY data, path "copy" (statement names
//     are the connection's own and are not compared)
//   - any other protocol: field by field in its decoded form
//     (wire.Protocol.Decode; see CompareDecoded), paths those of its
//     fields (gRPC and HTTP/2: "method", "path", "header.x",
//     "message[0].1", …)
//   - bytes that do not parse: path "bytes"
func (r *Rules) CompareCalls(api, proto, dst string, want, got []byte) []Difference {
	if bytes.Equal(want, got) {
		return nil
	}
	c := &collector{v: r.view(api, ScopeDownstream, dst)}
	switch proto {
	case "http":
		if w, err := http1.ParseRequest(want); err == nil {
			if g, err := http1.ParseRequest(got); err == nil {
				c.request(w, g)
				return c.result()
			}
		}
	case "redis":
		if w, ok := redis.Commands(want); ok {
			if g, ok := redis.Commands(got); ok {
				c.redis(w, g)
				return c.result()
			}
		}
	case "mysql":
		if w, ok := mysql.Commands(want); ok {
			if g, ok := mysql.Commands(got); ok {
				c.mysqlPackets(w, g)
				return c.result()
			}
		}
	case postgres.Proto:
		if w, ok := postgres.DecodeRequest(want, nil); ok {
			if g, ok := postgres.DecodeRequest(got, nil); ok {
				c.postgres(w, g)
				return c.result()
			}
		}
	default:
		p, known := protocols.All.Lookup(proto)
		if !known || p == protocols.All.Fallback() {
			break // raw bytes: where they first differ says more
		}
		if w, ok := p.Decode(wire.Client, want); ok {
			if g, ok := p.Decode(wire.Client, got); ok {
				c.decoded(unflatten(w.Fields), unflatten(g.Fields))
				return c.result()
			}
		}
	}
	c.bytes(want, got)
	return c.result()
}

func (c *collector) request(w, g *http1.ParsedRequest) {
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

// Insignificant reports whether a downstream request carries nothing to
// compare: MySQL packets that only close statements or the connection.
// A recorded call like that which a replay never made is not a
// difference.
func Insignificant(proto string, req []byte) bool {
	switch proto {
	case "mysql":
		cmds, ok := mysql.Commands(req)
		return ok && len(cmds) == 0
	case postgres.Proto:
		return postgres.Insignificant(req)
	}
	return false
}

// postgres compares the statements, parameters and COPY data of two
// decoded PostgreSQL requests.
func (c *collector) postgres(w, g wire.Decoded) {
	fields := func(d wire.Decoded, kind string) []string {
		var out []string
		for _, f := range d.Fields {
			if f.Path == kind || strings.HasPrefix(f.Path, kind+"[") {
				out = append(out, f.Value)
			}
		}
		return out
	}
	list := func(name string, want, got []string, norm func(string) string) {
		single := len(want) == 1 && len(got) == 1
		for i := 0; i < len(want) || i < len(got); i++ {
			c.push(keySeg(name))
			if !single {
				c.push(idxSeg(i))
			}
			switch {
			case c.v.ignored(c.path):
			case i >= len(got):
				c.add(Removed, want[i], "", "")
			case i >= len(want):
				c.add(Added, "", got[i], "")
			case norm(want[i]) != norm(got[i]):
				c.add(Changed, want[i], got[i], "")
			}
			if !single {
				c.pop()
			}
			c.pop()
		}
	}
	same := func(s string) string { return s }
	list("sql", fields(w, "sql"), fields(g, "sql"), func(s string) string { return strings.Join(strings.Fields(s), " ") })
	list("params", fields(w, "params"), fields(g, "params"), same)
	wc, gc := fields(w, "copy"), fields(g, "copy")
	if len(wc)+len(gc) > 0 {
		wb, gb := strings.Join(wc, ""), strings.Join(gc, "")
		if wb != gb {
			c.bytesAt("copy", []byte(wb), []byte(gb))
		}
	}
}

func (c *collector) mysqlPackets(want, got []mysql.Command) {
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

func mysqlSummary(m mysql.Command) string {
	if m.SQL != "" {
		return m.SQL
	}
	return fmt.Sprintf("command 0x%02x", m.Cmd)
}

// mysql compares two commands: paths "command", "sql", "stmt_id" (the
// statement id, assigned per connection by the server) and "params" (the
// rest of a statement command, as bytes).
func (c *collector) mysql(w, g mysql.Command) {
	if w.Cmd != g.Cmd {
		c.push(keySeg("command"))
		if !c.v.ignored(c.path) {
			c.add(Changed, fmt.Sprintf("0x%02x", w.Cmd), fmt.Sprintf("0x%02x", g.Cmd), "")
		}
		c.pop()
		return
	}
	switch w.Cmd {
	case mysql.ComQuery, mysql.ComStmtPrepare:
		c.push(keySeg("sql"))
		if w.SQL != g.SQL && !c.v.ignored(c.path) {
			c.add(Changed, w.SQL, g.SQL, "")
		}
		c.pop()
		return
	}
	if w.Stmt {
		c.push(keySeg("stmt_id"))
		if w.StmtID != g.StmtID && !c.v.ignored(c.path) {
			c.add(Changed, strconv.FormatUint(uint64(w.StmtID), 10), strconv.FormatUint(uint64(g.StmtID), 10), "")
		}
		c.pop()
		if bytes.Equal(w.Rest, g.Rest) {
			return
		}
		if w.Cmd == mysql.ComStmtExecute {
			if wp, ok := mysql.ExecuteParams(w.Rest); ok {
				if gp, ok := mysql.ExecuteParams(g.Rest); ok && len(wp) == len(gp) {
					c.params(wp, gp)
					return
				}
			}
		}
		c.bytesAt("params", w.Rest, g.Rest)
		return
	}
	if !bytes.Equal(w.Rest, g.Rest) {
		c.bytesAt("bytes", w.Rest, g.Rest)
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
