package mysql

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/retrace-dev/retrace/wire"
)

// Name is the protocol's name in recordings.
const Name = "mysql"

// DefaultPort is MySQL's port: the mock server speaks MySQL to it when no
// recording names the destination (the server speaks first, so there are
// no client bytes to detect from).
const DefaultPort = "3306"

// Protocol is MySQL as a wire.Protocol.
var Protocol wire.Protocol = protocol{}

type protocol struct{}

func (protocol) Name() string { return Name }

// Port makes MySQL a wire.Ported protocol: its server speaks first.
func (protocol) Port() string { return DefaultPort }

// Detect is sure of a server greeting of protocol version 10: a packet of
// sequence id 0 and a plausible length whose payload starts with 10 and a
// printable server version. A connection whose client spoke first is not
// MySQL.
func (protocol) Detect(client, server []byte) wire.Verdict {
	if len(server) == 0 {
		if len(client) > 0 {
			return wire.No
		}
		return wire.NotYet
	}
	return detectGreeting(server)
}

func detectGreeting(p []byte) wire.Verdict {
	if len(p) >= 3 {
		if n := int(p[0]) | int(p[1])<<8 | int(p[2])<<16; n <= 20 || n >= 1024 {
			return wire.No
		}
	} else if len(p) == 2 && p[1] >= 1024>>8 {
		return wire.No
	}
	if len(p) >= 4 && p[3] != 0 {
		return wire.No
	}
	if len(p) >= 5 && p[4] != 10 {
		return wire.No
	}
	if len(p) < 6 {
		return wire.NotYet
	}
	// the server version: printable up to its NUL
	for i, c := range p[5:] {
		if c == 0 {
			if i == 0 {
				return wire.No
			}
			return wire.Sure
		}
		if c < ' ' || c > '~' || i > 64 {
			return wire.No
		}
	}
	return wire.NotYet
}

func (protocol) NewFramer(side wire.Side, limit int) wire.Framer {
	return &framer{side: side, limit: limit}
}

// framer: a client message is a command (a run of full-size packets and
// the shorter one that ends it); a server message is one packet (a result
// set is many: where it ends depends on the command).
type framer struct {
	side  wire.Side
	limit int
}

func (f *framer) Next(buf []byte) (int, error) {
	if f.side == wire.Server {
		_, _, n, ok := NextPacket(buf)
		if !ok {
			if len(buf) >= 4 && int(buf[0])|int(buf[1])<<8|int(buf[2])<<16 > f.limit {
				return 0, fmt.Errorf("%w: MySQL packet of more than %d bytes", wire.ErrTooLong, f.limit)
			}
			return 0, nil
		}
		return n, nil
	}
	_, _, n, err := NextMessage(buf, f.limit)
	if errors.Is(err, ErrTooLarge) {
		err = fmt.Errorf("%w: %w", wire.ErrTooLong, err)
	}
	return n, err
}

func (*framer) Request([]byte) {}

// ---- capture ----

func (protocol) NewTap() wire.Tap { return &tap{} }

// maxStmts bounds tap.stmts: past it (statements prepared and never
// closed), closes are charged to the writing goroutine's trace.
const maxStmts = 4096

// prepareIDEnd is where the statement id of a COM_STMT_PREPARE_OK packet
// ends: its header and the first 12 bytes of its payload.
const prepareIDEnd = 4 + 12

type tap struct {
	authed bool // the handshake response has been written
	// the trace of the request that prepared each live statement. A
	// pooled connection runs the COM_STMT_CLOSE of one request's
	// statement whenever database/sql gets round to it — often on the
	// goroutine of the next request that took the connection (driverConn
	// onPut) — so a close is charged to its statement's request, not to
	// the writer's.
	stmts map[uint32]string
	// the current call ends with a COM_STMT_PREPARE of trace prepTID: its
	// answer's first bytes (up to the statement id) are kept in head until
	// they tell the statement id
	prepare bool
	prepTID string
	headN   uint8
	head    [prepareIDEnd]byte
}

func (t *tap) Write(p []byte, tid string, begins bool) wire.Filing {
	f := wire.Filing{Trace: tid}
	if !t.authed {
		// the greeting's answer: the handshake response
		t.authed = true
		f.Setup = true
		return f
	}
	f.Trace = t.stmtOwner(tid, p)
	if begins {
		f.Setup = isSetupCommand(p)
		t.headN = 0
	}
	t.prepare, t.prepTID = endsWithPrepare(p), f.Trace
	return f
}

func (t *tap) Read(p []byte) bool {
	if t.prepare {
		t.notePrepared(p)
	}
	return true
}

func (t *tap) ReadsOnWriter() bool { return true }

// stmtOwner returns the trace a write is charged to: the trace that
// prepared the statement when the write closes statements (COM_STMT_CLOSE
// carries no answer, and database/sql sends it from whichever goroutine
// releases the connection next), else tid.
func (t *tap) stmtOwner(tid string, p []byte) string {
	owner, found := tid, false
	for len(p) > 0 {
		m, _, n, err := NextMessage(p, len(p))
		if err != nil || n == 0 || len(m) != 5 || m[0] != ComStmtClose {
			return tid // not only closes: the writer's own command
		}
		id, _ := RequestStmtID(m)
		if o, ok := t.stmts[id]; ok {
			delete(t.stmts, id)
			if !found {
				owner, found = o, true
			}
		}
		p = p[n:]
	}
	return owner
}

// notePrepared reads the statement id from the answer to a
// COM_STMT_PREPARE and notes which trace prepared it.
func (t *tap) notePrepared(p []byte) {
	t.headN += uint8(copy(t.head[t.headN:], p))
	if t.headN < prepareIDEnd {
		return
	}
	t.prepare = false
	id, ok := StmtID(t.head[:])
	if !ok || len(t.stmts) >= maxStmts {
		return
	}
	if t.stmts == nil {
		t.stmts = map[uint32]string{}
	}
	t.stmts[id] = t.prepTID
}

// endsWithPrepare reports whether the last command in p is a
// COM_STMT_PREPARE.
func endsWithPrepare(p []byte) bool {
	last := byte(0)
	for len(p) > 0 {
		m, _, n, err := NextMessage(p, len(p))
		if err != nil || n == 0 {
			return false
		}
		if len(m) > 0 {
			last = m[0]
		}
		p = p[n:]
	}
	return last == ComStmtPrepare
}

// isSetupCommand reports whether a command-phase request is session
// set-up (SET …, SELECT @@…).
func isSetupCommand(req []byte) bool {
	p, _, n, err := NextMessage(req, len(req))
	if err != nil || n == 0 || n != len(req) || len(p) < 2 || p[0] != ComQuery {
		return false
	}
	return IsSetupQuery(string(p[1:]))
}

// ---- mock server: what the recordings say ----

func (protocol) NewBook() wire.Book { return &book{} }

type setupAns struct {
	resp []byte
	seq  int
}

// book: the destination's greeting and its statements, from any
// recording.
type book struct {
	greeting []byte              // greeting payload
	prepares map[string]setupAns // SQL text → COM_STMT_PREPARE answer
	stmtSQL  map[uint32]string   // recorded statement id → SQL
}

func (b *book) Learn(c wire.Call) {
	if b.greeting == nil && len(c.Request) == 0 {
		if g, ok := FindGreeting(c.Response); ok {
			b.greeting = g
		}
	}
	p := lastMessage(c.Request)
	if len(p) < 2 || p[0] != ComStmtPrepare {
		return
	}
	id, ok := StmtID(c.Response)
	if !ok {
		return
	}
	if b.prepares == nil {
		b.prepares, b.stmtSQL = map[string]setupAns{}, map[uint32]string{}
	}
	q := string(p[1:])
	if _, seen := b.prepares[q]; !seen {
		b.prepares[q] = setupAns{c.Response, c.Seq}
	}
	if _, seen := b.stmtSQL[id]; !seen {
		b.stmtSQL[id] = q
	}
}

func (b *book) Greeting(connID uint32) []byte {
	if b.greeting != nil {
		return Greeting(b.greeting, connID)
	}
	return DefaultGreeting(connID)
}

// Fallback answers a COM_STMT_PREPARE from any recording that prepared
// the same SQL.
func (b *book) Fallback(r *wire.Request) ([]byte, int, bool) {
	if !r.Prepare {
		return nil, 0, false
	}
	a, ok := b.prepares[r.Key]
	return a.resp, a.seq, ok
}

func (protocol) NewSession(b wire.Book) wire.Session {
	bk, _ := b.(*book)
	return &session{book: bk, stmts: map[connStmt]string{}}
}

type connStmt struct {
	conn int64
	id   uint32
}

// session resolves a recording's statement ids to their SQL: on the
// call's connection, else on any of the recording's connections, else in
// any recording of the destination.
type session struct {
	book  *book
	stmts map[connStmt]string
}

func (s *session) lookup(conn int64) func(uint32) (string, bool) {
	return func(id uint32) (string, bool) {
		if q, ok := s.stmts[connStmt{conn, id}]; ok {
			return q, true
		}
		if q, ok := s.stmts[connStmt{-1, id}]; ok {
			return q, true
		}
		if s.book != nil {
			q, ok := s.book.stmtSQL[id]
			return q, ok
		}
		return "", false
	}
}

// Units makes one unit per command of a recorded call: commands without
// an answer (COM_STMT_CLOSE) may precede, in the same write, the command
// the response answers.
func (s *session) Units(c wire.Call) []wire.Unit {
	if p := lastMessage(c.Request); len(p) > 1 && p[0] == ComStmtPrepare {
		if id, ok := StmtID(c.Response); ok {
			s.stmts[connStmt{c.Conn, id}] = string(p[1:])
			s.stmts[connStmt{-1, id}] = string(p[1:])
		}
	}
	stmtSQL := s.lookup(c.Conn)
	var units []wire.Unit
	req := c.Request
	for len(req) > 0 {
		p, _, n, err := NextMessage(req, 1<<30)
		if err != nil || n == 0 {
			break
		}
		units = append(units, wire.Unit{Req: Features(req[:n], p, stmtSQL)})
		req = req[n:]
	}
	if len(units) == 0 || len(req) > 0 {
		return []wire.Unit{{Req: wire.Request{Raw: c.Request, Op: "?", Canon: c.Request, Body: c.Request}, Resp: c.Response}}
	}
	units[len(units)-1].Resp = c.Response
	return units
}

// lastMessage returns the payload of the last command in a recorded
// request (the one the recorded response answers).
func lastMessage(req []byte) []byte {
	var last []byte
	for len(req) > 0 {
		p, _, n, err := NextMessage(req, 1<<30)
		if err != nil || n == 0 {
			return nil
		}
		last, req = p, req[n:]
	}
	return last
}

var stmtVerbs = map[byte]string{ComStmtExecute: "EXECUTE ", ComStmtClose: "CLOSE ",
	ComStmtSendLongData: "LONG DATA ", ComStmtReset: "RESET "}

// Features computes what matching knows of one command payload; msg is
// the command's packets. stmtSQL resolves a statement id to the SQL it was
// prepared from.
func Features(msg, payload []byte, stmtSQL func(uint32) (string, bool)) wire.Request {
	r := wire.Request{Raw: msg, Canon: payload, Body: payload}
	if len(payload) == 0 {
		r.Op = "COM_EMPTY"
		return r
	}
	switch payload[0] {
	case ComQuery:
		q := string(payload[1:])
		norm, lits := NormalizeSQL(q)
		r.Op, r.Key = norm, q
		r.Args = make([][]byte, len(lits))
		for i, l := range lits {
			r.Args[i] = []byte(l)
		}
		r.Setup = IsSetupQuery(q)
	case ComStmtPrepare:
		q := string(payload[1:])
		norm, _ := NormalizeSQL(q)
		r.Op, r.Key, r.Prepare = "PREPARE "+norm, q, true
	case ComStmtExecute, ComStmtClose, ComStmtSendLongData, ComStmtReset:
		var idb [4]byte
		copy(idb[:], payload[1:]) // never append to payload: it aliases the recording
		id := binary.LittleEndian.Uint32(idb[:])
		q, ok := stmtSQL(id)
		if ok {
			r.Stmt = q
		} else {
			q = fmt.Sprintf("#%d", id)
		}
		norm, _ := NormalizeSQL(q)
		r.Op, r.Key = stmtVerbs[payload[0]]+norm, q
		params := payload[min(len(payload), 5):]
		r.Args = [][]byte{params}
		r.Canon = append([]byte(q+"\x00"), params...)
		r.NoReply = payload[0] == ComStmtClose || payload[0] == ComStmtSendLongData
		r.Setup = payload[0] == ComStmtReset
	case ComQuit:
		r.Op, r.Setup, r.Quit, r.NoReply = "COM_QUIT", true, true, true
	case ComPing, ComInitDB, ComResetConnection, ComChangeUser, ComSetOption:
		r.Op, r.Setup = fmt.Sprintf("COM_0x%02x", payload[0]), true
	default:
		r.Op = fmt.Sprintf("COM_0x%02x", payload[0])
	}
	return r
}

// ---- mock server: one live connection ----

func (protocol) NewAnswerer(env wire.Env) wire.Answerer {
	return &answerer{env: env, stmts: map[uint32]string{}, owners: map[uint32]string{}}
}

type answerer struct {
	env     wire.Env
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
}

func (a *answerer) Greeting() []byte { return a.env.Book.Greeting(a.env.ConnID) }

func (a *answerer) tid() string {
	if a.env.TraceID == nil {
		return ""
	}
	return a.env.TraceID()
}

func (a *answerer) Next(buf []byte) (wire.Request, int, []byte, error) {
	p, seq, n, err := NextMessage(buf, a.env.MaxMessage)
	if err != nil || n == 0 {
		if errors.Is(err, ErrTooLarge) {
			err = fmt.Errorf("%w: %w", wire.ErrTooLong, err)
		}
		return wire.Request{}, 0, nil, err
	}
	a.lastSeq = seq
	if !a.authed {
		// HandshakeResponse41, after an SSL request when the client asked
		// for TLS (the agent completed its handshake without TLS, and the
		// response comes in plaintext): any credentials are accepted.
		if IsSSLRequest(p) {
			return wire.Request{Raw: buf[:n], Op: "SSL REQUEST", Setup: true, Local: true, NoReply: true}, n, nil, nil
		}
		a.authed = true
		return wire.Request{Raw: buf[:n], Op: "HANDSHAKE", Setup: true, Local: true}, n, nil, nil
	}
	r := Features(buf[:n], p, func(id uint32) (string, bool) { q, ok := a.stmts[id]; return q, ok })
	switch {
	case p[0] == ComStmtClose:
		if id, ok := RequestStmtID(p); ok {
			if t := a.owners[id]; t != "" && t != a.tid() {
				r.Owner = t
			}
			delete(a.stmts, id)
			delete(a.owners, id)
		}
	case p[0] == ComStmtPrepare:
		a.pending, a.pendingTID = r.Key, a.tid()
	case p[0] == ComChangeUser || p[0] == ComResetConnection:
		r.Local = true
	}
	return r, n, nil, nil
}

func (a *answerer) Reply(r *wire.Request, resp []byte) []byte {
	if r.Prepare {
		if _, ok := StmtID(resp); ok {
			a.nextID++
			a.stmts[a.nextID] = a.pending
			a.owners[a.nextID] = a.pendingTID
			resp = WithStmtID(resp, a.nextID)
		}
	}
	return Resequence(resp, a.lastSeq+1)
}

func (a *answerer) Synth(r *wire.Request) []byte {
	if r.NoReply {
		return nil
	}
	return OK(a.lastSeq + 1)
}

func (a *answerer) Missing(r *wire.Request, reason string) []byte {
	if r.NoReply {
		return nil
	}
	const erUnknown = 1105
	return Err(a.lastSeq+1, erUnknown, "HY000", "retrace: "+reason)
}

func (a *answerer) AnswerLen(*wire.Request, []byte) (int, error) {
	return 0, errors.New("MySQL requests cannot be proxied one by one (pass the destination through instead)")
}

// ---- decoded form ----

// Decode shows client commands one per line: the SQL of a query or a
// prepare, "EXECUTE #id (…)" with the typed parameters of an execute,
// the command's name otherwise; fields "sql", "stmt_id", "params[i]"
// (or "packet[n]." before them for several commands), the downstream
// diff's paths. Server packets show as OK, ERR with its message, or their
// count.
func (protocol) Decode(side wire.Side, msg []byte) (wire.Decoded, bool) {
	if side == wire.Server {
		return decodeServer(msg)
	}
	var cmds []Command
	for b := msg; len(b) > 0; {
		p, seq, n, err := NextMessage(b, len(b))
		if err != nil || n == 0 {
			return wire.Decoded{}, false
		}
		if seq == 1 && len(b) == len(msg) && len(p) > 32 && ClientCaps(p)&CapProtocol41 != 0 {
			// the handshake response (commands start at sequence 0)
			user, _, _ := bytes.Cut(p[32:], []byte{0})
			text := "HANDSHAKE user=" + string(user)
			return wire.Decoded{Text: text, Fields: []wire.Field{{Path: "user", Value: string(user)}}}, true
		}
		cmd, ok := ParseCommand(p)
		if !ok {
			return wire.Decoded{}, false
		}
		cmds = append(cmds, cmd)
		b = b[n:]
	}
	if len(cmds) == 0 {
		return wire.Decoded{}, false
	}
	var d wire.Decoded
	var text strings.Builder
	for n, c := range cmds {
		pre := ""
		if len(cmds) > 1 {
			pre = "packet[" + strconv.Itoa(n) + "]."
			text.WriteString(map[bool]string{true: "\n", false: ""}[n > 0])
		}
		text.WriteString(c.String())
		for _, f := range c.Fields() {
			d.Fields = append(d.Fields, wire.Field{Path: pre + f.Path, Value: f.Value})
		}
	}
	d.Text = text.String()
	return d, true
}

func decodeServer(b []byte) (wire.Decoded, bool) {
	p, _, n, ok := NextPacket(b)
	if !ok || len(p) == 0 {
		return wire.Decoded{}, false
	}
	packets := 1
	for rest := b[n:]; len(rest) > 0; packets++ {
		_, _, m, ok := NextPacket(rest)
		if !ok {
			return wire.Decoded{}, false
		}
		rest = rest[m:]
	}
	var text string
	switch {
	case p[0] == 0xff && len(p) >= 9 && p[3] == '#':
		text = fmt.Sprintf("ERR %d (%s): %s", binary.LittleEndian.Uint16(p[1:3]), p[4:9], p[9:])
	case p[0] == 0xff && len(p) >= 3:
		text = fmt.Sprintf("ERR %d: %s", binary.LittleEndian.Uint16(p[1:3]), p[3:])
	case p[0] == 0x00 && packets == 1:
		text = "OK"
	case p[0] == 10 && bytes.IndexByte(p[1:], 0) > 0:
		text = "greeting " + string(p[1:1+bytes.IndexByte(p[1:], 0)])
	default:
		text = fmt.Sprintf("%d packets", packets)
	}
	return wire.Decoded{Text: text, Fields: []wire.Field{{Path: "reply", Value: text}}}, true
}
