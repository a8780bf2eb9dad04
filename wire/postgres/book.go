package postgres

import (
	"encoding/binary"
	"sync"

	"github.com/retrace-dev/retrace/wire"
)

// book is what every loaded recording says about one PostgreSQL
// destination (wire.Book): the server's parameters as a connection's
// start-up reported them, and every statement some recording prepared —
// its answer to Parse and to Describe, and the name it was prepared
// under on each recorded connection. A statement prepared on one
// connection when recording is known on every connection in replay.
type book struct {
	// mu: Learn writes while the mock server loads sessions on demand and
	// serves connections that read
	mu      sync.RWMutex
	params  [][]byte            // ParameterStatus messages of the first recorded start-up
	parsed  map[string][]byte   // SQL → the answer to its Parse
	descr   map[string][]byte   // SQL → the answer to Describe of the statement
	types   map[string][]uint32 // SQL → parameter types, from its ParameterDescription
	onConn  map[connName]string // statement name on a recorded connection → SQL
	anyConn map[string]string   // statement name → SQL, the first recorded
}

type connName struct {
	conn int64
	name string
}

var _ wire.Book = (*book)(nil)

func newBook() *book {
	return &book{parsed: map[string][]byte{}, descr: map[string][]byte{}, types: map[string][]uint32{},
		onConn: map[connName]string{}, anyConn: map[string]string{}}
}

// Learn reads one recorded call: the ParameterStatus messages of a
// start-up, and the statements a call prepared with their answers.
func (b *book) Learn(c wire.Call) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(c.Request) > 0 && (c.Request[0] == 0 || c.Request[0] == Password) {
		if b.params == nil {
			b.params = paramStatuses(c.Response)
		}
		return
	}
	if c.Setup {
		return
	}
	var p pairer
	p.addClient(c.Request)
	units := p.addServer(c.Response)
	n := newNames(nil)
	for _, u := range units {
		for _, m := range u.msgs {
			b.learnMessage(c.Conn, n, m)
		}
	}
}

func (b *book) learnMessage(conn int64, n *names, m msg) {
	switch m.Type {
	case Parse:
		n.request(m.raw, []Message{m.Message}, nil)
		name := CString(m.Body)
		s := n.stmts[name]
		if _, ok := b.parsed[s.sql]; !ok && len(m.ans) > 0 {
			b.parsed[s.sql] = m.ans
		}
		if name != "" {
			b.onConn[connName{conn, name}] = s.sql
			if _, ok := b.anyConn[name]; !ok {
				b.anyConn[name] = s.sql
			}
		}
	case Describe:
		if len(m.Body) < 1 || m.Body[0] != 'S' {
			return
		}
		s, ok := n.stmt(CString(m.Body[1:]))
		if !ok || len(m.ans) == 0 {
			return
		}
		if _, seen := b.descr[s.sql]; !seen {
			b.descr[s.sql] = m.ans
			b.types[s.sql] = paramTypes(m.ans)
		}
	}
}

// Greeting: a PostgreSQL client speaks first.
func (b *book) Greeting(uint32) []byte { return nil }

// Fallback answers nothing: statements are answered from the book by the
// Answerer itself (their units are Local).
func (b *book) Fallback(*wire.Request) ([]byte, int, bool) { return nil, 0, false }

// described reports whether some recording described sql's statement.
func (b *book) described(sql string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	_, ok := b.descr[sql]
	return ok
}

// stmtOn resolves a statement name on a recorded connection.
func (b *book) stmtOn(conn int64, name string) (stmt, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if q, ok := b.onConn[connName{conn, name}]; ok {
		return stmt{sql: q}, true
	}
	if q, ok := b.anyConn[name]; ok {
		return stmt{sql: q}, true
	}
	return stmt{}, false
}

// answers returns the recorded answers to sql's Parse and Describe (nil
// when none was recorded), and the start-up's ParameterStatus messages.
func (b *book) answers(sql string) (parsed, descr []byte) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.parsed[sql], b.descr[sql]
}

func (b *book) startupParams() [][]byte {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.params
}

// typesOf returns the parameter types recorded for sql's statement.
func (b *book) typesOf(sql string) []uint32 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.types[sql]
}

// paramStatuses returns the ParameterStatus messages of a recorded
// start-up answer.
func paramStatuses(resp []byte) [][]byte {
	var out [][]byte
	Messages(resp, false, false, func(m Message) bool {
		if m.Type == ParameterStatus {
			out = append(out, append([]byte{ParameterStatus, 0, 0, 0, 0}, m.Body...))
			binary.BigEndian.PutUint32(out[len(out)-1][1:], uint32(4+len(m.Body)))
		}
		return true
	})
	return out
}

// paramTypes returns the parameter types of the ParameterDescription in
// a Describe's answer.
func paramTypes(ans []byte) []uint32 {
	var out []uint32
	Messages(ans, false, false, func(m Message) bool {
		if m.Type != ParameterDescription || len(m.Body) < 2 {
			return true
		}
		n := int(binary.BigEndian.Uint16(m.Body))
		for i := 0; i < n && 2+4*i+4 <= len(m.Body); i++ {
			out = append(out, binary.BigEndian.Uint32(m.Body[2+4*i:]))
		}
		return false
	})
	return out
}
