package mockserver

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/redis"
)

// adapter is one connection's protocol state: where requests end, how
// connection set-up goes, and how answers and errors are spelled.
type adapter interface {
	proto() string
	// greeting is sent right after the preamble; nil for none.
	greeting() []byte
	// next parses the request at the start of buf. n == 0 with a nil error
	// means more bytes are needed; interim, when not nil, is sent at once.
	next(buf []byte) (r request, n int, interim []byte, err error)
	// reply turns the recorded answer to r into the bytes to send.
	reply(r request, resp []byte) []byte
	// synth answers a request the adapter handles itself (r.local) or a
	// set-up request no recording answered.
	synth(r request) []byte
	// missing is the protocol's error answer for a request no recording
	// answered.
	missing(r request, reason string) []byte
}

var (
	_ adapter = (*httpAdapter)(nil)
	_ adapter = (*redisAdapter)(nil)
	_ adapter = (*mysqlAdapter)(nil)
	_ adapter = (*rawAdapter)(nil)
)

// errTooLong reports a protocol message longer than Config.MaxMessage.
var errTooLong = errors.New("message exceeds the size limit")

func (c *conn) newAdapter(proto string) adapter {
	switch proto {
	case protoHTTP:
		return &httpAdapter{max: c.s.cfg.MaxMessage}
	case protoRedis:
		return &redisAdapter{max: c.s.cfg.MaxMessage}
	case protoPostgres:
		return c.newPostgresAdapter()
	case protoMySQL:
		a := &mysqlAdapter{max: c.s.cfg.MaxMessage, stmts: map[uint32]string{}, owners: map[uint32]string{}}
		a.greet = c.mysqlGreeting
		a.tid = func() string { return c.msgTID }
		return a
	}
	return &rawAdapter{}
}

// ---- HTTP/1.1 ----

type httpAdapter struct {
	max       int
	continued bool // 100 Continue sent for the request being assembled
	answered  bool // continued, for the request last returned by next
}

func (a *httpAdapter) proto() string    { return protoHTTP }
func (a *httpAdapter) greeting() []byte { return nil }

func (a *httpAdapter) next(buf []byte) (request, int, []byte, error) {
	h, n, err := http1.RequestLen(buf)
	if err != nil {
		return request{}, 0, nil, err
	}
	if n == 0 {
		if len(buf) > a.max {
			return request{}, 0, nil, fmt.Errorf("%w: HTTP request of more than %d bytes", errTooLong, a.max)
		}
		if h.HeadLen > 0 && h.Expect100 && !a.continued {
			a.continued = true
			return request{}, 0, []byte(http1.Continue), nil
		}
		return request{}, 0, nil, nil
	}
	r := httpRequest(buf[:n], h, min(a.max, 4<<20)) // bounded gunzip for matching
	r.quit = h.Close
	a.answered, a.continued = a.continued, false
	return r, n, nil, nil
}

func (a *httpAdapter) reply(_ request, resp []byte) []byte {
	if a.answered {
		return http1.StripContinue(resp)
	}
	return resp
}

func (a *httpAdapter) synth(request) []byte {
	return http1.ErrorResponse(502, "retrace: no recorded answer")
}

func (a *httpAdapter) missing(_ request, reason string) []byte {
	return http1.ErrorResponse(502, "retrace: "+reason)
}

// ---- Redis ----

type redisAdapter struct {
	max  int
	args [][]byte // reused: a live request's arguments live only while it is answered
}

func (a *redisAdapter) proto() string    { return protoRedis }
func (a *redisAdapter) greeting() []byte { return nil }

func (a *redisAdapter) next(buf []byte) (request, int, []byte, error) {
	args, n, err := redis.AppendCommand(a.args[:0], buf, a.max)
	if err != nil {
		return request{}, 0, nil, err
	}
	if n == 0 {
		if len(buf) > a.max {
			return request{}, 0, nil, fmt.Errorf("%w: Redis command of more than %d bytes", errTooLong, a.max)
		}
		return request{}, 0, nil, nil
	}
	a.args = args
	return redisRequest(buf[:n], args), n, nil, nil
}

func (a *redisAdapter) reply(_ request, resp []byte) []byte { return resp }

func (a *redisAdapter) synth(r request) []byte {
	args, _, err := redis.ParseCommand(r.raw, len(r.raw))
	if err != nil {
		return redis.Error("retrace: unparsable set-up command")
	}
	return redis.SetupReply(args)
}

func (a *redisAdapter) missing(_ request, reason string) []byte {
	return redis.Error("retrace: " + reason)
}

// ---- MySQL ----

var mysqlConnID, pgConnID atomic.Uint32

type mysqlAdapter struct {
	max     int
	greet   func() []byte
	authed  bool
	lastSeq byte              // sequence id of the last packet of the current request
	stmts   map[uint32]string // live statement id → SQL
	nextID  uint32
	pending string // SQL of the COM_STMT_PREPARE being answered
	// owners is the trace that prepared each live statement: a pooled
	// connection's driver may close one request's statement from the
	// next request's goroutine (database/sql), and the close is that
	// statement's request's, not the writer's.
	owners     map[uint32]string
	pendingTID string
	tid        func() string // trace of the request being assembled
}

func (c *conn) mysqlGreeting() []byte {
	id := mysqlConnID.Add(1)
	if d := c.s.idx.dst(c.dst); d != nil {
		c.s.idx.mu.RLock()
		g := d.greeting
		c.s.idx.mu.RUnlock()
		if g != nil {
			return mysql.Greeting(g, id)
		}
	}
	return mysql.DefaultGreeting(id)
}

func (a *mysqlAdapter) proto() string    { return protoMySQL }
func (a *mysqlAdapter) greeting() []byte { return a.greet() }

func (a *mysqlAdapter) next(buf []byte) (request, int, []byte, error) {
	p, seq, n, err := mysql.NextMessage(buf, a.max)
	if err != nil || n == 0 {
		return request{}, 0, nil, err
	}
	a.lastSeq = seq
	if !a.authed {
		// HandshakeResponse41 (or an SSL request, which fails later since
		// the greeting offers no TLS): any credentials are accepted.
		a.authed = true
		if mysql.ClientCaps(p)&mysql.CapSSL != 0 && len(p) == 32 {
			return request{}, 0, nil, errors.New("MySQL client asked for TLS, which the mock server does not speak (use tls=false)")
		}
		return request{raw: buf[:n], op: "HANDSHAKE", setup: true, local: true}, n, nil, nil
	}
	r := mysqlRequest(buf[:n], p, func(id uint32) (string, bool) { q, ok := a.stmts[id]; return q, ok })
	switch {
	case len(p) > 0 && p[0] == mysql.ComStmtClose:
		if id, ok := mysql.RequestStmtID(p); ok {
			if t := a.owners[id]; t != "" && t != a.tid() {
				r.owner = t
			}
			delete(a.stmts, id)
			delete(a.owners, id)
		}
	case len(p) > 0 && p[0] == mysql.ComStmtPrepare:
		a.pending, a.pendingTID = r.key, a.tid()
	case len(p) > 0 && (p[0] == mysql.ComChangeUser || p[0] == mysql.ComResetConnection):
		r.local = true
	}
	return r, n, nil, nil
}

func (a *mysqlAdapter) reply(r request, resp []byte) []byte {
	if bytes.HasPrefix([]byte(r.op), []byte("PREPARE ")) {
		if _, ok := mysql.StmtID(resp); ok {
			a.nextID++
			a.stmts[a.nextID] = a.pending
			a.owners[a.nextID] = a.pendingTID
			resp = mysql.WithStmtID(resp, a.nextID)
		}
	}
	return mysql.Resequence(resp, a.lastSeq+1)
}

func (a *mysqlAdapter) synth(r request) []byte {
	if r.noReply {
		return nil
	}
	return mysql.OK(a.lastSeq + 1)
}

func (a *mysqlAdapter) missing(r request, reason string) []byte {
	if r.noReply {
		return nil
	}
	const erUnknown = 1105
	return mysql.Err(a.lastSeq+1, erUnknown, "HY000", "retrace: "+reason)
}

// ---- generic: one frame is one request ----

type rawAdapter struct{}

func (rawAdapter) proto() string    { return protoRaw }
func (rawAdapter) greeting() []byte { return nil }
func (rawAdapter) next(buf []byte) (request, int, []byte, error) {
	return rawRequest(buf), len(buf), nil, nil
}
func (rawAdapter) reply(_ request, resp []byte) []byte { return resp }
func (rawAdapter) synth(request) []byte                { return nil }
func (rawAdapter) missing(request, string) []byte      { return nil }

// protoFor returns the protocol to speak with dst: what its recordings say,
// else MySQL for the MySQL port (the server speaks first, so there is
// nothing to sniff), else "" (sniff the first request).
func (s *Server) protoFor(dst string) string {
	if d := s.idx.dst(dst); d != nil {
		return d.proto
	}
	if _, port, err := net.SplitHostPort(dst); err == nil && port == "3306" {
		return protoMySQL
	}
	return ""
}
