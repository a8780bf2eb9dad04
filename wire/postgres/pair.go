package postgres

// A client's requests and a server's answers pair message by message: the
// server answers the messages of the extended protocol one by one (Parse
// with ParseComplete, Bind with BindComplete, Describe with a
// ParameterDescription and a RowDescription or NoData, Execute with rows
// and a CommandComplete, Close with CloseComplete, Sync with
// ReadyForQuery), a simple Query and the end of a COPY with everything up
// to ReadyForQuery, and sends nothing for Flush, CopyData and Terminate.
// After an ErrorResponse the server skips every message up to the next
// Sync. NoticeResponse, NotificationResponse and ParameterStatus may come
// at any time and go with the answer in progress.
//
// A unit is what the mock server matches and answers: the client messages
// up to one that makes the server answer (Sync, Query, CopyDone, CopyFail,
// FunctionCall, Flush) or ends the connection (Terminate), or one start-up
// packet, with everything the server answered to them.

// msg is one client message and its answer.
type msg struct {
	Message
	raw []byte // the whole message, header included
	ans []byte // the server messages that answer it
}

// unit is one answerable group of client messages.
type unit struct {
	msgs []msg
	req  []byte // the messages' bytes
	resp []byte // their answers' bytes
}

// endsUnit reports whether a client message of type t ends a unit.
func endsUnit(t byte) bool {
	switch t {
	case 0, Sync, Query, CopyDone, CopyFail, FunctionCall, Flush, Terminate, Password:
		return true
	}
	return false
}

// pairer pairs one connection's client messages with the server's
// answers, fed in the order they were recorded, in any split, once the
// connection is set up (start-up packets and authentication are set-up
// calls of their own, never paired).
type pairer struct {
	client  []byte // client bytes not yet a whole message
	server  []byte // server bytes not yet assigned to a message
	pending []msg  // client messages not yet wholly answered, in order
	cur     int    // pending[cur] is the message being answered
	sub     int    // server messages of pending[cur]'s answer so far (Describe S: the ParameterDescription)
	skip    bool   // an ErrorResponse was answered: messages up to Sync get no answer
	broken  bool   // bytes that do not frame: nothing more is paired
}

// addClient adds client bytes.
func (p *pairer) addClient(b []byte) {
	if p.broken {
		return
	}
	p.client = append(p.client, b...)
	for {
		m, n, err := Next(p.client, true, false, 0)
		if err != nil {
			p.broken = true
			return
		}
		if n == 0 {
			break
		}
		raw := append([]byte(nil), p.client[:n]...)
		m.Body = raw[len(raw)-len(m.Body):]
		p.pending = append(p.pending, msg{Message: m, raw: raw})
		p.client = p.client[:copy(p.client, p.client[n:])]
	}
}

// addServer adds server bytes and returns the units wholly answered,
// in order.
func (p *pairer) addServer(b []byte) []unit {
	if p.broken {
		return nil
	}
	p.server = append(p.server, b...)
	for {
		p.advance()
		if p.cur >= len(p.pending) {
			break
		}
		m, n, err := Next(p.server, false, false, 0)
		if err != nil {
			p.broken = true
			return nil
		}
		if n == 0 {
			break
		}
		p.take(n)
		if m.Type == NoticeResponse || m.Type == NotificationResponse || m.Type == ParameterStatus {
			continue
		}
		if p.answered(p.pending[p.cur].Message, m.Type) {
			if m.Type == ErrorResponse && p.pending[p.cur].Type != Query {
				p.skip = true
			}
			p.done()
		}
	}
	return p.units()
}

// take moves the first n server bytes to the answer of the message in
// progress.
func (p *pairer) take(n int) {
	c := &p.pending[p.cur]
	c.ans = append(c.ans, p.server[:n]...)
	p.server = p.server[:copy(p.server, p.server[n:])]
	p.sub++
}

func (p *pairer) done() { p.cur, p.sub = p.cur+1, 0 }

// advance moves past messages that get no answer.
func (p *pairer) advance() {
	for p.cur < len(p.pending) {
		t := p.pending[p.cur]
		switch {
		case p.skip && t.Type != Sync:
		case t.Type == Flush || t.Type == CopyData || t.Type == Terminate:
		default:
			return
		}
		p.done()
	}
}

// answered reports whether a server message of type s completes the
// answer to client message c.
func (p *pairer) answered(c Message, s byte) bool {
	if s == ErrorResponse && c.Type != Query {
		return true
	}
	switch c.Type {
	case Parse:
		return s == ParseComplete
	case Bind:
		return s == BindComplete
	case Close:
		return s == CloseComplete
	case Describe:
		return s == RowDescription || s == NoData
	case Execute:
		return s == CommandComplete || s == EmptyQueryResponse || s == PortalSuspended || s == CopyInResponse || s == CopyBothResponse
	case Query:
		return s == ReadyForQuery || s == CopyInResponse || s == CopyBothResponse
	case Sync, CopyDone, CopyFail, FunctionCall:
		if s == ReadyForQuery {
			p.skip = false
			return true
		}
	}
	return false
}

// units returns the units whose messages are all answered, removing them
// from pending.
func (p *pairer) units() []unit {
	var out []unit
	start := 0
	for i := 0; i < p.cur; i++ {
		if !endsUnit(p.pending[i].Type) {
			continue
		}
		out = append(out, makeUnit(p.pending[start:i+1]))
		start = i + 1
	}
	if start > 0 {
		p.pending = append(p.pending[:0:0], p.pending[start:]...)
		p.cur -= start
	}
	return out
}

// flush attaches server bytes left over (a notification that came after
// the last answer) to u.
func (p *pairer) flush(u *unit) {
	if len(p.server) > 0 && p.cur >= len(p.pending) {
		u.resp = append(u.resp, p.server...)
		u.msgs[len(u.msgs)-1].ans = append(u.msgs[len(u.msgs)-1].ans, p.server...)
		p.server = p.server[:0]
	}
}

func makeUnit(ms []msg) unit {
	u := unit{msgs: ms}
	for _, m := range ms {
		u.req = append(u.req, m.raw...)
		u.resp = append(u.resp, m.ans...)
	}
	return u
}
