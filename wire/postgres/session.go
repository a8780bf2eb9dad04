package postgres

import "github.com/retrace-dev/retrace/wire"

// session reads one recording's calls to one destination into units
// (wire.Session). Calls are fed in recorded order, set-up calls too (they
// prepare the statements later calls bind); each recorded connection has
// its own pairing and names, so a unit whose messages or answer span
// calls (a COPY whose data followed its answer, a pipeline read while it
// was written) is whole, returned with the call that completed it.
// Start-up and authentication calls are units of their own.
type session struct {
	b     *book
	conns map[int64]*recConn
}

type recConn struct {
	p pairer
	n *names
}

var _ wire.Session = (*session)(nil)

func newSession(b *book) *session { return &session{b: b, conns: map[int64]*recConn{}} }

func (s *session) Units(c wire.Call) []wire.Unit {
	if len(c.Request) > 0 && (c.Request[0] == 0 || c.Request[0] == Password) {
		r, _ := newNames(nil).request(c.Request, startupMessages(c.Request))
		r.Setup = true
		return []wire.Unit{{Req: r, Resp: c.Response}}
	}
	rc := s.conns[c.Conn]
	if rc == nil {
		conn := c.Conn
		rc = &recConn{n: newNames(func(name string) (stmt, bool) { return s.b.stmtOn(conn, name) })}
		s.conns[c.Conn] = rc
	}
	rc.p.addClient(c.Request)
	us := rc.p.addServer(c.Response)
	if len(us) > 0 {
		rc.p.flush(&us[len(us)-1])
	}
	if rc.p.broken {
		// bytes that do not frame: the call is answered as recorded
		return []wire.Unit{{Req: wire.Request{Raw: c.Request, Op: "?", Canon: c.Request, Body: c.Request}, Resp: c.Response}}
	}
	out := make([]wire.Unit, 0, len(us))
	for _, u := range us {
		ms := make([]Message, len(u.msgs))
		for i := range u.msgs {
			ms[i] = u.msgs[i].Message
		}
		r, kind := rc.n.request(u.req, ms)
		if kind == kindPrepare || c.Setup {
			// what a live connection prepares depends on what it had
			// prepared before, not on the request: never waited for
			r.Setup = true
		}
		out = append(out, wire.Unit{Req: r, Resp: u.resp})
	}
	return out
}

// startupMessages returns the messages of a set-up call's request.
func startupMessages(req []byte) []Message {
	var out []Message
	Messages(req, true, len(req) > 0 && req[0] == 0, func(m Message) bool {
		out = append(out, m)
		return true
	})
	return out
}
