package capture

import (
	"bytes"
	"sync"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/mysql"
)

// maxEarly bounds the response bytes an HTTP connection keeps while waiting
// for the write they answer to be reported.
const maxEarly = 64 << 10

// outConn is what the Recorder knows of one dialled connection, kept in its
// hook.ConnInfo.Data.
type outConn struct {
	// What every report on the connection reads comes first, in one cache
	// line (see the padding at the end).
	mu     sync.Mutex // guards what follows and the payloads of its calls
	wrote  bool       // a write has been reported
	owned  bool       // a session has taken the connection's set-up calls
	authed bool       // MySQL: the handshake response has been written
	proto  string     // "" until the first bytes tell
	cur    *call      // the call that reads belong to
	// sess is the session the connection's last call was placed in, or
	// nil: a request usually makes several calls in a row on the
	// connection it holds, and this spares those after the first the
	// lookup in the Recorder's index.
	sess  *active
	arena arena // the bytes of its calls' payloads

	id      uint64
	dst     string
	early   []byte  // HTTP: response bytes that came before their request was reported
	pending []*call // set-up calls waiting for the connection's first session
	// MySQL: the trace of the request that prepared each live statement.
	// A pooled connection runs the COM_STMT_CLOSE of one request's
	// statement whenever database/sql gets round to it — often on the
	// goroutine of the next request that took the connection (driverConn
	// onPut) — so a close is charged to its statement's request, not to
	// the writer's.
	stmts map[uint32]string
	slab  []call // where its next calls are made (see newCall)
	// to 192 bytes, a size class whose objects start on a cache line (at
	// 160 they would straddle two every other time)
	_ [8]byte
}

// callSlab is how many calls a connection makes at once: a request
// makes about a dozen, and one allocation for eight instead of one each
// spares the allocator and the collector (a slab lives while a call of it
// is in a session in progress or is its connection's current one).
const callSlab = 8

// newCall returns a new call of oc, zero but for oc. Called with oc.mu
// held.
func (oc *outConn) newCall() *call {
	if len(oc.slab) == cap(oc.slab) {
		oc.slab = make([]call, 0, callSlab)
	}
	oc.slab = oc.slab[:len(oc.slab)+1]
	c := &oc.slab[len(oc.slab)-1]
	c.oc = oc
	return c
}

// maxStmts bounds outConn.stmts: past it (statements prepared and never
// closed), closes are charged to the writing goroutine's trace.
const maxStmts = 4096

// call is one downstream exchange in progress or done.
type call struct {
	oc         *outConn
	tid        string
	setup      bool
	keep       bool // bytes are stored: the call belongs (or may belong) to a session
	start, end int64
	req, resp  payload
	framer     *http1.Response // HTTP: where the response ends (nil for other protocols: most calls)
	// MySQL: the call ends with a COM_STMT_PREPARE; its answer's first
	// bytes (up to the statement id) are kept in head until they tell the
	// statement id.
	prepare bool
	headN   uint8
	head    [prepareIDEnd]byte
}

// httpFramer returns the call's response framer, made if the call began
// before its connection was known to be HTTP.
func (c *call) httpFramer() *http1.Response {
	if c.framer == nil {
		c.framer = &http1.Response{}
	}
	return c.framer
}

// prepareIDEnd is where the statement id of a COM_STMT_PREPARE_OK packet
// ends: its header and the first 12 bytes of its payload.
const prepareIDEnd = 4 + 12

// snapshotCalls returns calls as recorded so far, start relative to base,
// in the order they started and numbered in it. The calls of one
// connection are read under one hold of its lock: a request often makes
// several in a row on the connection it holds, and taking the lock of a
// connection that other requests used since costs a cache miss.
func snapshotCalls(calls []*call, base int64) []recording.Call {
	out := make([]recording.Call, len(calls))
	var taken uint64 // calls[j] (j < 64) read with an earlier one
	for i, c := range calls {
		if i < 64 && taken&(1<<i) != 0 {
			continue
		}
		oc := c.oc
		oc.mu.Lock()
		out[i] = c.snapshotLocked(base)
		for j := i + 1; j < min(len(calls), 64); j++ {
			if calls[j].oc == oc && taken&(1<<j) == 0 {
				out[j] = calls[j].snapshotLocked(base)
				taken |= 1 << j
			}
		}
		oc.mu.Unlock()
	}
	// by start, stably: calls are attached about in the order they
	// started, so this insertion sort mostly only compares
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].StartNs < out[j-1].StartNs; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	for i := range out {
		out[i].Seq = i
	}
	return out
}

// snapshotLocked returns the call as recorded so far, start relative to
// base (called with c.oc.mu held).
func (c *call) snapshotLocked(base int64) recording.Call {
	return recording.Call{Proto: c.oc.proto, Dst: c.oc.dst, Setup: c.setup, Conn: int64(c.oc.id),
		Request: c.req.view(), Response: c.resp.view(), StartNs: c.start - base, DurNs: c.end - c.start,
		RequestTruncated: c.req.truncated, ResponseTruncated: c.resp.truncated}
}

// outConnOf returns the state of a dialled connection, made on first use;
// nil for an accepted one.
func outConnOf(c *hook.ConnInfo) *outConn {
	if oc, ok := c.Data.Load().(*outConn); ok {
		return oc
	}
	return newOutConn(c)
}

// newOutConn is outConnOf's slow path, kept out of line: OutboundWrite runs
// at the bottom of deep client stacks (a driver's write on a request's
// child goroutine), and every byte of frame there can make the runtime
// grow and copy the goroutine's stack.
//
//go:noinline
func newOutConn(c *hook.ConnInfo) *outConn {
	if c.Inbound {
		return nil // its Data is an *inbound
	}
	oc := &outConn{id: c.ID, dst: c.Remote}
	if !c.Data.CompareAndSwap(nil, oc) {
		oc, _ = c.Data.Load().(*outConn) // another goroutine made it first
	}
	return oc
}

// sessionFor returns the session of tid in progress for a call on the
// connection, or nil (called with oc.mu held).
func (r *Recorder) sessionFor(oc *outConn, tid string) *active {
	if a := oc.sess; a != nil && a.id == tid && !a.ended.Load() {
		return a
	}
	a := r.session(tid)
	oc.sess = a
	return a
}

// OutboundWrite adds request bytes to the connection's current call, or
// starts the next call: after the current one has had answers, or when the
// bytes are charged to another trace.
func (r *Recorder) OutboundWrite(c *hook.ConnInfo, tid string, p []byte) {
	if len(p) == 0 {
		return
	}
	oc := outConnOf(c)
	if oc == nil {
		return
	}
	now := r.now()
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.proto == "" {
		oc.proto = detectClient(p)
	}
	oc.wrote = true
	if oc.proto == protoMySQL && oc.authed {
		tid = oc.stmtOwner(tid, p)
	}
	cur := oc.cur
	// The same call goes on while nothing has answered it yet, or while
	// an HTTP request that got "100 Continue" sends its body.
	if cur != nil && cur.tid == tid && (cur.resp.n == 0 || oc.proto == protoHTTP && cur.httpFramer().AwaitingFinal()) {
		if cur.keep {
			cur.req.add(p, r.max, &oc.arena)
		}
		if oc.proto == protoMySQL {
			cur.prepare = endsWithPrepare(p)
		}
		cur.end = now
		return
	}
	if tid == "" && oc.proto == protoHTTP {
		// an HTTP exchange of no sampled request: not followed. Its answer
		// is read before the connection's next request is written (HTTP/1
		// clients do not pipeline), so reads until then are dropped.
		oc.cur = nil
		oc.early = oc.early[:0]
		return
	}
	cur = oc.newCall()
	cur.tid, cur.start, cur.end = tid, now, now
	oc.cur = cur
	switch oc.proto {
	case protoRedis:
		cur.setup = isSetupRedis(p)
	case protoPG:
		cur.setup = isSetupPostgres(p)
	case protoMySQL:
		cur.setup = !oc.authed || isSetupMySQL(p)
		cur.prepare = oc.authed && endsWithPrepare(p)
		oc.authed = true
	case protoHTTP:
		cur.framer = &http1.Response{NoBody: bytes.HasPrefix(p, []byte("HEAD "))}
	}
	// the session is looked up here rather than in place: the deepest frame
	// on this path is what makes the runtime grow a client's stack
	place(oc, cur, r.sessionFor(oc, tid))
	if cur.keep {
		cur.req.add(p, r.max, &oc.arena)
	}
	if len(oc.early) > 0 {
		if oc.proto == protoHTTP {
			cur.resp.add(oc.early, r.maxFor(cur), &oc.arena)
			cur.httpFramer().Feed(oc.early)
		}
		oc.early = oc.early[:0]
	}
}

func (r *Recorder) maxFor(c *call) int {
	if !c.keep {
		return 0
	}
	return r.max
}

// place decides where a new call goes (called with oc.mu held): set-up
// calls stay with the connection until its first session takes them; other
// calls go to their trace's session a (nil: none in progress), taking the
// connection's set-up calls with them the first time.
func place(oc *outConn, c *call, a *active) {
	if a != nil && a.attach(oc.pending, c) {
		c.keep = true
		if len(oc.pending) > 0 || c.setup {
			oc.owned, oc.pending = true, nil
		}
		return
	}
	if c.setup && !oc.owned {
		c.keep = true
		oc.pending = append(oc.pending, c)
	}
	// otherwise: traffic of no sampled request, followed but not stored
}

// OutboundRead adds answer bytes to the connection's current call.
func (r *Recorder) OutboundRead(c *hook.ConnInfo, p []byte) {
	if len(p) == 0 {
		return
	}
	oc, ok := c.Data.Load().(*outConn)
	if !ok {
		if !mayBeMySQLGreeting(p) && !bytes.HasPrefix(p, []byte("HTTP/1.")) {
			// bytes on a connection whose writes were never reported:
			// traffic of no sampled request.
			return
		}
		// a server that speaks first (MySQL), or the answer to the first
		// request of a new HTTP connection read before the write was
		// reported (net/http reads on another goroutine than it writes)
		if oc = outConnOf(c); oc == nil {
			return
		}
	}
	now := r.now()
	oc.mu.Lock()
	defer oc.mu.Unlock()
	cur := oc.cur
	switch {
	case cur == nil && !oc.wrote:
		if len(oc.early)+len(p) > maxEarly {
			return
		}
		// for the first request, if HTTP; or the start of a greeting
		oc.early = append(oc.early, p...)
		if !isMySQLGreeting(oc.early) {
			// not a greeting (yet: a server may send the greeting's header
			// and body with separate writes, and the client read the
			// header alone; the connection's protocol is decided when
			// the next bytes come)
			return
		}
		// the server speaks first: a MySQL greeting is set-up traffic
		oc.proto = protoMySQL
		cur = oc.newCall()
		cur.tid, cur.setup, cur.start = trace.CurrentID(), true, now
		oc.cur = cur
		place(oc, cur, r.sessionFor(oc, cur.tid))
		p, oc.early = oc.early, nil // the greeting's bytes read so far
	case cur == nil:
		return
	case oc.proto == protoHTTP:
		if cur.httpFramer().Done() {
			if len(oc.early)+len(p) <= maxEarly {
				oc.early = append(oc.early, p...)
			}
			return
		}
		cur.httpFramer().Feed(p)
	default:
		// Clients of these protocols read on the goroutine that wrote: an
		// answer read under another trace answers a write that was not
		// reported (no sampled request made it).
		if cur.tid != trace.CurrentID() {
			return
		}
		if cur.prepare {
			oc.notePrepared(cur, p)
		}
	}
	cur.resp.add(p, r.maxFor(cur), &oc.arena)
	cur.end = now
}

// stmtOwner returns the trace a MySQL write is charged to (called with
// oc.mu held): the trace that prepared the statement when the write closes
// statements (COM_STMT_CLOSE carries no answer, and database/sql sends it
// from whichever goroutine releases the connection next), else tid.
func (oc *outConn) stmtOwner(tid string, p []byte) string {
	owner, found := tid, false
	for len(p) > 0 {
		m, _, n, err := mysql.NextMessage(p, len(p))
		if err != nil || n == 0 || len(m) != 5 || m[0] != mysql.ComStmtClose {
			return tid // not only closes: the writer's own command
		}
		id, _ := mysql.RequestStmtID(m)
		if t, ok := oc.stmts[id]; ok {
			delete(oc.stmts, id)
			if !found {
				owner, found = t, true
			}
		}
		p = p[n:]
	}
	return owner
}

// notePrepared reads the statement id from the answer to a
// COM_STMT_PREPARE and notes which trace prepared it (called with oc.mu
// held).
func (oc *outConn) notePrepared(c *call, p []byte) {
	c.headN += uint8(copy(c.head[c.headN:], p))
	if c.headN < prepareIDEnd {
		return
	}
	c.prepare = false
	id, ok := mysql.StmtID(c.head[:])
	if !ok || len(oc.stmts) >= maxStmts {
		return
	}
	if oc.stmts == nil {
		oc.stmts = map[uint32]string{}
	}
	oc.stmts[id] = c.tid
}

// endsWithPrepare reports whether the last MySQL command in p is a
// COM_STMT_PREPARE.
func endsWithPrepare(p []byte) bool {
	last := byte(0)
	for len(p) > 0 {
		m, _, n, err := mysql.NextMessage(p, len(p))
		if err != nil || n == 0 {
			return false
		}
		if len(m) > 0 {
			last = m[0]
		}
		p = p[n:]
	}
	return last == mysql.ComStmtPrepare
}
