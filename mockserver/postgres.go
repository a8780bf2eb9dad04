package mockserver

import (
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/postgres"
)

// PostgreSQL reaches the mock server through its wire.Protocol
// (wire/postgres): this file adapts the protocol's Book, Session and
// Answerer to the mock server's index and adapters until the mock server
// meets every protocol through wire.

const protoPostgres = postgres.Proto

var pgProto wire.Protocol = postgres.Protocol{}

// learnPostgres tells the destination's book about one recorded call;
// the caller holds ix.mu for writing.
func (d *dstInfo) learnPostgres(c *recording.Call) {
	if d.book == nil {
		d.book = pgProto.NewBook()
	}
	d.book.Learn(wireCall(c))
}

func wireCall(c *recording.Call) wire.Call {
	return wire.Call{Request: c.Request, Response: c.Response, Setup: c.Setup, Conn: c.Conn, Seq: c.Seq}
}

// postgresUnits splits one recording's PostgreSQL calls into units; one
// wire.Session per destination reads them in recorded order.
type postgresUnits struct {
	ix       *index
	sessions map[string]wire.Session
}

func (p *postgresUnits) units(c *recording.Call) []unit {
	if p.sessions == nil {
		p.sessions = map[string]wire.Session{}
	}
	ws := p.sessions[c.Dst]
	if ws == nil {
		ws = pgProto.NewSession(p.ix.book(c.Dst))
		p.sessions[c.Dst] = ws
	}
	var out []unit
	for _, u := range ws.Units(wireCall(c)) {
		out = append(out, unit{req: fromWire(u.Req), resp: u.Resp, seq: c.Seq})
	}
	return out
}

// book returns the book of dst (an empty one when no recording has
// taught it anything).
func (ix *index) book(dst string) wire.Book {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if d := ix.dsts[dst]; d != nil && d.book != nil {
		return d.book
	}
	return pgProto.NewBook()
}

func fromWire(r wire.Request) request {
	return request{raw: r.Raw, op: r.Op, key: r.Key, canon: r.Canon, body: r.Body, args: r.Args,
		setup: r.Setup, local: r.Local, quit: r.Quit, noReply: r.NoReply, method: r.Method, owner: r.Owner, stmt: r.Stmt}
}

func toWire(r *request) *wire.Request {
	return &wire.Request{Raw: r.raw, Op: r.op, Key: r.key, Canon: r.canon, Body: r.body, Args: r.args,
		Setup: r.setup, Local: r.local, Quit: r.quit, NoReply: r.noReply, Method: r.method, Owner: r.owner, Stmt: r.stmt}
}

// wireAdapter is a connection's adapter for a protocol of wire.
type wireAdapter struct {
	name string
	a    wire.Answerer
}

var _ adapter = (*wireAdapter)(nil)

func (c *conn) newPostgresAdapter() adapter {
	env := wire.Env{Book: c.s.idx.book(c.dst), MaxMessage: c.s.cfg.MaxMessage,
		TraceID: func() string { return c.msgTID }, ConnID: pgConnID.Add(1)}
	return &wireAdapter{name: protoPostgres, a: pgProto.NewAnswerer(env)}
}

func (w *wireAdapter) proto() string    { return w.name }
func (w *wireAdapter) greeting() []byte { return w.a.Greeting() }

func (w *wireAdapter) next(buf []byte) (request, int, []byte, error) {
	r, n, interim, err := w.a.Next(buf)
	return fromWire(r), n, interim, err
}

func (w *wireAdapter) reply(r request, resp []byte) []byte { return w.a.Reply(toWire(&r), resp) }
func (w *wireAdapter) synth(r request) []byte              { return w.a.Synth(toWire(&r)) }
func (w *wireAdapter) missing(r request, reason string) []byte {
	return w.a.Missing(toWire(&r), reason)
}
