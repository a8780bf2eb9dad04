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
	parsed  map[string]answer   // SQL → the answer to its Parse
	descr   map[string]answer   // SQL → the answer to Describe of the statement
	onConn  map[connName]string // statement name on a recorded connection → SQL
	anyConn map[string]string   // statement name → SQL, the first recorded
	// sslYes and sslNo count the recorded SSLRequests the server answered
	// 'S' (TLS follows) and 'N'
	sslYes, sslNo int
}

// answer is a recorded answer and the Seq of its call.
type answer struct {
	b   []byte
	seq int
}

type connName struct {
	conn int64
	name string
}

var _ wire.Book = (*book)(nil)

func newBook() *book {
	return &book{parsed: map[string]answer{}, descr: map[string]answer{},
		onConn: map[connName]string{}, anyConn: map[string]string{}}
}

// Learn reads one recorded call: the ParameterStatus messages of a
// start-up, and the statements a call prepared with their answers.
func (b *book) Learn(c wire.Call) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(c.Request) > 0 && (c.Request[0] == 0 || c.Request[0] == Password) {
		if m, n, err := Next(c.Request, true, true, 0); err == nil && n > 0 && m.Type == 0 && m.Code == SSLRequestCode {
			switch {
			case len(c.Response) > 0 && c.Response[0] == 'S':
				b.sslYes++
			case len(c.Response) > 0 && c.Response[0] == 'N':
				b.sslNo++
			}
			return
		}
		if b.params == nil {
			b.params = paramStatuses(c.Response)
		}
		return
	}
	var p pairer
	p.addClient(c.Request)
	units := p.addServer(c.Response)
	n := newNames(nil)
	for _, u := range units {
		for _, m := range u.msgs {
			b.learnMessage(c, n, m)
		}
	}
}

func (b *book) learnMessage(c wire.Call, n *names, m msg) {
	conn := c.Conn
	switch m.Type {
	case Parse:
		n.request(m.raw, []Message{m.Message})
		name := CString(m.Body)
		s := n.stmts[name]
		if _, ok := b.parsed[s.sql]; !ok && len(m.ans) > 0 {
			b.parsed[s.sql] = answer{m.ans, c.Seq}
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
			b.descr[s.sql] = answer{m.ans, c.Seq}
		}
	}
}

// Greeting: a PostgreSQL client speaks first.
func (b *book) Greeting(uint32) []byte { return nil }

// Fallback answers, from what any recording said, a unit of prepares
// (r.Prepare: see names.request), message by message — ParseComplete or
// the recorded error for each Parse, the recorded ParameterDescription
// and RowDescription for each Describe, CloseComplete, ReadyForQuery for
// Sync (its status is the live connection's: the Answerer's Reply sets
// it) — and a StartupMessage with the recorded server's ParameterStatus
// messages (r.Op "STARTUP"), and an SSLRequest as the recorded server
// answered the destination's (r.Op "SSL", see sslAnswer). It answers false when a statement is one no
// recording described.
func (b *book) Fallback(r *wire.Request) ([]byte, int, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if r.Op == "SSL" {
		if b.sslYes+b.sslNo == 0 {
			return nil, 0, false
		}
		return []byte{b.sslAnswer()}, 0, true
	}
	if r.Op == "STARTUP" {
		var out []byte
		for _, p := range b.params {
			out = append(out, p...)
		}
		return out, 0, b.params != nil
	}
	if !r.Prepare {
		return nil, 0, false
	}
	var out []byte
	seq, next, failed, ok := 0, 0, false, true
	sqlOf := func() string {
		if next >= len(r.Args) {
			return ""
		}
		next++
		return string(r.Args[next-1])
	}
	Messages(r.Raw, true, false, func(m Message) bool {
		if failed && m.Type != Sync {
			sqlOf() // a server skips what follows an error, up to Sync
			return true
		}
		var ans answer
		switch m.Type {
		case Parse:
			q := sqlOf()
			if ans, ok = b.parsed[q]; !ok {
				// a statement never prepared while recording: known if
				// described (a Describe of the statement follows)
				ans, ok = answer{b: []byte{ParseComplete, 0, 0, 0, 4}}, b.descr[q].b != nil
			}
		case Describe:
			ans, ok = b.descr[sqlOf()]
		case Close:
			ans = answer{b: []byte{CloseComplete, 0, 0, 0, 4}}
		case Sync:
			ans, failed = answer{b: []byte{ReadyForQuery, 0, 0, 0, 5, 'I'}}, false
		}
		if !ok {
			return false
		}
		out = append(out, ans.b...)
		seq = max(seq, ans.seq)
		failed = failed || hasError(ans.b)
		return true
	})
	return out, seq, ok
}

// sslAnswer is the recorded server's answer to SSLRequests: 'S' when it
// accepted some connection's, 'N' when it refused every one; the caller
// holds b.mu and has seen one.
func (b *book) sslAnswer() byte {
	if b.sslYes == 0 {
		return 'N'
	}
	return 'S'
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
