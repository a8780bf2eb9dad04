package hook

import (
	"sync"
	"sync/atomic"

	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http1"
)

// Which request an accepted connection is serving.
//
// A client may pipeline requests: send the next ones before the answer to
// the first. Their heads can then arrive in one read, together with the
// first, long before the server turns to them. An HTTP/1.x server answers
// a connection's requests strictly in order, and net/http (like most
// servers) starts the handler of request k+1 only once the response to
// request k is written whole: the goroutine that reads a connection's
// requests runs their handlers one after the other.
//
// So the hook keeps, per connection, the current request (the one being
// served, whose trace is bound) and a queue of requests read whose turn has
// not come. A request whose head has been read becomes current at once when
// the current request's response has begun — that is the ordinary
// keep-alive case: the server reads the next request after answering — and
// waits in the queue when the current response has not begun: the client
// pipelined it. While requests wait, the bytes written on the connection go
// through a response framer, and where the current response ends the next
// request becomes current and is bound to the goroutine that wrote that
// end: the server's serving goroutine, about to run its handler.
//
// The common case pays one atomic load per inbound Write (serving.resp) and
// one compare-and-swap per response; framing, the queue and its lock are
// only for connections on which requests wait.
type serving struct {
	// resp says how the connection's writes relate to its requests:
	// respIdle, respStarted or respQueued. It is respQueued exactly while
	// the queue is not empty; that, and every change from or to
	// respQueued, is under mu. The Write hook's fast path reads it without
	// the lock, and moves it from respIdle to respStarted with a
	// compare-and-swap, so that a request queued at that very moment (its
	// compare-and-swap from respIdle to respQueued won) is never missed:
	// the framer then sees the current response from its first byte.
	resp atomic.Uint32

	mu      sync.Mutex
	cur     bool   // a request has been read: the current one
	curHead bool   // the current request is HEAD: its response has no body
	release func() // the current request's binding, nil when untraced
	queue   []waiting
	framer  http1.Response // where the current response ends, while queue is not empty
}

// Values of serving.resp.
const (
	// respIdle: nothing of the current request's response has been
	// written yet (or nothing has been read: no current request).
	respIdle uint32 = iota
	// respStarted: the current response has begun and no request waits:
	// writes go out as they are, charged to the current request.
	respStarted
	// respQueued: requests wait behind the current one; writes go through
	// serving.framer.
	respQueued
)

// waiting is a request read whose turn has not come.
type waiting struct {
	tid  string
	t    *trace.Trace // bound when it becomes current; nil when untraced
	head bool         // a HEAD request
}

// maxWaiting bounds the queue of one connection. net/http reads ahead at
// most its buffer's worth of requests (4 KiB); a client that gets further
// ahead than this has its later requests made current as they are read,
// as if they were not pipelined.
const maxWaiting = 1024

// admit makes the request whose head has just been read, with trace tid
// ("" for none), the connection's current request and binds it to the
// calling goroutine, or queues it when the current request's response has
// not begun (see serving). Called with st.rmu held, in the order requests
// are read.
func (e *engine) admit(st *connState, tid string, h *trace.RequestHead) {
	var t *trace.Trace
	if tid != "" {
		t = e.newTrace(tid, h)
		if t.Random != nil && e.randomRec != nil {
			e.recordCall("random-started", func() { e.randomRec.RandomStarted(&st.info, tid, t.Random) })
		}
	}
	head := h.Method == "HEAD"
	s := &st.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur {
		n := len(s.queue)
		// (the load first: in the keep-alive case the response has begun,
		// and a compare-and-swap that fails still costs a locked cycle)
		if n > 0 && n < maxWaiting || n == 0 && s.resp.Load() == respIdle && s.resp.CompareAndSwap(respIdle, respQueued) {
			if n == 0 {
				s.framer = http1.Response{NoBody: s.curHead}
			}
			s.queue = append(s.queue, waiting{tid: tid, t: t, head: head})
			counters.pipelined.Add(1)
			return
		}
		if n > 0 {
			e.reportOnce("pipeline-overflow", "more pipelined requests wait on a connection than the agent follows; later ones are bound as they are read",
				"waiting", n, "conn", st.info.Remote)
			clear(s.queue)
			s.queue = nil
		}
	}
	s.cur, s.curHead = true, head
	e.bind(st, t)
	s.resp.Store(respIdle)
}

// inboundWriteTurn is inboundWrite when the connection's writes are not
// plainly the current response's: bytes written while requests wait, or
// the first bytes of a response that may be an interim one. Out of line,
// to keep the common path's frame small.
//
//go:noinline
func (e *engine) inboundWriteTurn(st *connState, c *netConn, b []byte) (int, error) {
	s := &st.srv
	if len(b) > 12 && b[10] == '0' && b[11] == '1' && (e.cfg.Mode == Replay || e.streamRec != nil) && switchesToH2C(b) {
		e.h2Upgrade(st)
	}
	r := s.resp.Load()
	// An interim response (100 Continue, written when the handler first
	// reads the body) does not begin the final one: a request read with
	// the body is still pipelined.
	if r == respIdle && !interimOnly(b) && !s.resp.CompareAndSwap(respIdle, respStarted) {
		r = s.resp.Load() // a request was queued behind the current one just now
	}
	if r == respQueued && !st.broken.Load() && e.serveQueued(st, b) {
		return e.rawWrite(st, c, b)
	}
	// the current response's bytes (serveQueued did nothing: the queue
	// emptied meanwhile, or the framing panicked and the connection's
	// writes now go out unframed)
	e.reportInboundWrite(st, b)
	return e.rawWrite(st, c, b)
}

// serveQueued reports b, written while requests wait, piece by piece with
// the trace of the response each piece belongs to, and makes the next
// request current (bound to the calling goroutine) where the current
// response ends. false means nothing was done: no request waits any more,
// or the hook panicked (the connection's writes then go out unframed).
func (e *engine) serveQueued(st *connState, b []byte) (ok bool) {
	s := &st.srv
	defer func() {
		if r := recover(); r != nil {
			e.recovered("inbound-write", r)
			st.broken.Store(true)
			ok = false
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		// emptied since the caller looked (the connection is closing):
		// the writes are the current response's again
		s.resp.CompareAndSwap(respQueued, respStarted)
		return false
	}
	for len(b) > 0 {
		if len(s.queue) == 0 {
			// the response of the request just made current begins here
			s.resp.CompareAndSwap(respIdle, respStarted)
			e.reportInboundWrite(st, b)
			break
		}
		n := s.framer.Take(b)
		e.reportInboundWrite(st, b[:n])
		b = b[n:]
		if s.framer.Done() {
			e.next(st)
		}
	}
	return true
}

// next makes the first waiting request current, bound to the calling
// goroutine. Called with st.srv.mu held.
func (e *engine) next(st *connState) {
	s := &st.srv
	w := s.queue[0]
	s.queue[0] = waiting{}
	s.queue = s.queue[1:]
	s.curHead = w.head
	e.bind(st, w.t)
	if len(s.queue) == 0 {
		s.queue = nil
		s.resp.Store(respIdle)
		return
	}
	s.framer = http1.Response{NoBody: w.head}
}

// reportInboundWrite reports response bytes with the current request's
// trace (record mode).
func (e *engine) reportInboundWrite(st *connState, p []byte) {
	if e.cfg.Mode != Record || len(p) == 0 {
		return
	}
	if tid := st.tid(); tid != "" {
		e.recordCall("inbound-write", func() { e.cfg.Recorder.InboundWrite(&st.info, tid, p) })
	}
}

// interimOnly reports whether b is exactly one interim (1xx, not 101)
// response head, as net/http writes "100 Continue".
func interimOnly(b []byte) bool {
	const pre = "HTTP/1.x 1"
	// the status's first digit first: every final response fails there
	if len(b) < len(pre)+6 || b[9] != '1' || b[8] != ' ' || string(b[:7]) != pre[:7] ||
		b[10] == '0' && b[11] == '1' {
		return false
	}
	for i := len(pre); i < len(b)-3; i++ {
		if b[i] == '\r' && b[i+1] == '\n' && b[i+2] == '\r' && b[i+3] == '\n' {
			return i+4 == len(b)
		}
	}
	return false
}

// bind makes t (nil: no trace) the trace of the connection's current
// request on the calling goroutine, releasing the previous request's
// binding. Called with st.srv.mu held.
func (e *engine) bind(st *connState, t *trace.Trace) {
	s := &st.srv
	if s.release != nil {
		s.release()
		s.release = nil
	}
	if t != nil {
		s.release = trace.Bind(t)
		counters.bound.Add(1)
		if !t.ReplayTime.IsZero() {
			s.release = withReplayClock(s.release)
		}
	}
	st.cur.Store(t)
}

// unbind releases the connection's binding and forgets the requests that
// wait (the connection is closing).
func (st *connState) unbind() {
	s := &st.srv
	s.mu.Lock()
	rel := s.release
	s.release = nil
	clear(s.queue)
	s.queue = nil
	s.resp.Store(respStarted) // a write still in progress goes out as it is
	s.mu.Unlock()
	if rel != nil {
		rel()
	}
}
