package hook

import (
	"syscall"

	"github.com/retrace-dev/retrace/trace"
)

// The doubles of net.(*conn).Read, Write and Close. Their first argument is
// the *net.conn; with no engine active they do exactly what the originals
// do, through the netFD methods.

func connRead(c *netConn, b []byte) (int, error) {
	if c == nil || c.fd == nil {
		return 0, syscall.EINVAL
	}
	var e *engine
	var st *connState
	// record: report the read (record mode); ask: ask skipRead once the
	// bytes are in; h2: an HTTP/2 connection whose server's SETTINGS are
	// followed (h2out.go)
	record, ask := false, false
	var h2 *h2Out
	if e = active.Load(); e != nil {
		ent, w := e.conns.entry(c.fd)
		if w&quietBit != 0 && trace.CurrentID() == "" {
			// a quiet connection, and no trace: nothing to report
		} else if st = e.state(c.fd, ent); st != nil && !st.broken.Load() {
			if st.inbound {
				return e.inboundRead(st, c, b)
			}
			if st.redirect && !st.preamble.Load() {
				return e.outboundRead(st, c, b)
			}
			h2 = st.h2OutOf()
			if e.cfg.Mode == Record {
				// On a connection that carries no HTTP skipRead answers
				// now, while st is in the cache (the read may wait long),
				// and its answer cannot change: passed stays set, untraced
				// only grows to its limit and the goroutine keeps its
				// trace. On HTTP it is asked once the bytes are in: the
				// answer depends on the request last written, and a read
				// may wait for its answer from before it was written.
				if st.passed.Load() {
					record = !st.skipRead()
				} else {
					record, ask = true, true
				}
			}
		}
	}
	// Reads on dialled connections call the netFD from here, as
	// net.(*conn).Read does, so that the stack under the application's Read
	// is no deeper than without the agent: goroutines grow their stacks at
	// its bottom, and every frame there makes each growth's copy dearer and
	// some goroutines grow once more.
	l := layoutOf(e)
	n, err := l.fdRead(c.fd, b)
	if err != nil {
		err = l.readError(c.fd, err)
	}
	if h2 != nil && n > 0 {
		e.h2OutRead(h2, b[:n])
	}
	if record && n > 0 && !(ask && st.skipRead()) {
		e.recordOutboundRead(st, b[:n])
	}
	return n, err
}

func connWrite(c *netConn, b []byte) (int, error) {
	if c == nil || c.fd == nil {
		return 0, syscall.EINVAL
	}
	e := active.Load()
	if e != nil {
		// on a quiet connection (see connTable.markQuiet) an untraced
		// write goes out as it is, unreported
		if ent, w := e.conns.entry(c.fd); w&quietBit == 0 || trace.CurrentID() != "" {
			if st := e.state(c.fd, ent); st != nil {
				if st.inbound {
					return e.inboundWrite(st, c, b)
				}
				if !e.plainOutboundWrite(st, b) {
					return e.outboundWriteSplit(st, c, b)
				}
			}
		}
	}
	// As in connRead, the netFD is called from here.
	l := layoutOf(e)
	n, err := l.fdWrite(c.fd, b)
	if err != nil {
		err = l.opError("write", c.fd, err)
	}
	return n, err
}

// layoutOf is the active engine's netFD layout, else the installed one:
// the same in production, but BenchmarkHookOverhead gives its engine a
// stand-in.
func layoutOf(e *engine) *netLayout {
	if e != nil {
		return e.l
	}
	return netLayoutP.Load()
}

func connClose(c *netConn) error {
	if c == nil || c.fd == nil {
		return syscall.EINVAL
	}
	if e := active.Load(); e != nil {
		e.closing(c)
	}
	return netLayoutP.Load().plainClose(c)
}

func (e *engine) closing(c *netConn) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("close", r)
		}
	}()
	// A pending connect of this socket is not cleared here: reading the
	// descriptor would race with a concurrent Close, and the next connect
	// of the same descriptor number overwrites it anyway.
	if st := e.conns.remove(uintptr(c.fd), 0, true); st != nil {
		if !st.inbound {
			e.flushHeld(st, c)
		}
		e.forget(st)
	}
}

// flushHeld sends, when the application closes a dialled connection, the
// bytes its stream still holds of a request head in progress (see
// stream.attribute): the application wrote them, and the peer gets them
// as it would without the agent. They are reported with the closing
// goroutine's trace. Close must not wait: nothing is sent when a write is
// in progress (it may be blocked until this Close ends it) or when the
// socket's buffer is full, and nothing on a redirected connection (the
// mock server has no use for half a request). The parser's own few bytes
// that may start a Retrace-* header line stay back too: that request
// cannot be served anyway.
func (e *engine) flushHeld(st *connState, c *netConn) {
	if st.redirect || !st.wmu.TryLock() {
		return
	}
	defer st.wmu.Unlock()
	s := st.wr
	if !s.holding || len(s.held) == 0 || st.broken.Load() {
		return
	}
	held := s.held
	s.held, s.holding = nil, false
	w := outWriter{e: e, st: st, c: c}
	w.record(validOrEmpty(trace.CurrentID()), held)
	e.l.writeNoWait(c.fd, held)
}

// inboundRead reads from an accepted connection: Retrace-* headers are
// removed from what the application gets, and each request's trace is
// bound to the reading goroutine when its head has been read.
func (e *engine) inboundRead(st *connState, c *netConn, b []byte) (int, error) {
	st.rmu.Lock()
	defer st.rmu.Unlock()
	if len(st.pending) > 0 {
		n := copy(b, st.pending)
		st.pending = st.pending[n:]
		return n, nil
	}
	if h := st.h2.Load(); h != nil && h != h2Not && h.rw != nil {
		return e.h2Read(h, st, c, b, 0, nil)
	}
	record := e.cfg.Mode == Record
	for {
		n, err := e.rawRead(st, c, b)
		if n > 0 {
			if h := st.h2.Load(); h == nil || h.rw == nil && h != h2Not {
				if h = e.h2Decide(st, b[:n]); h != h2Not {
					return e.h2Read(h, st, c, b, n, err)
				}
			}
		}
		// A connection that is not HTTP/1.x has nothing to strip, bind or
		// (having never had a request) report.
		if n <= 0 || (st.rd.passThrough() && (!record || !st.rd.hasCur)) {
			return n, err
		}
		k, ok := e.parseInbound(st, b, n)
		if !ok {
			return n, err // fail open: the bytes as read
		}
		if k > 0 || err != nil || len(b) == 0 {
			return k, err
		}
		// Everything read was a stripped header (or a held prefix of
		// one): the application asked for bytes, so read on.
	}
}

// parseInbound runs the n bytes just read into b through the connection's
// parser and leaves in b what the application must see (the rest in
// st.pending). ok is false when the hook panicked; b then holds the bytes
// as read, unless the parser, working in place, had already cut a
// Retrace-* header line out of them.
func (e *engine) parseInbound(st *connState, b []byte, n int) (k int, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("inbound-read", r)
			st.broken.Store(true)
			k, ok = n, false
		}
	}()
	s := st.rd
	out, inPlace := s.feedRead(b[:n]) // each head read starts its request (see newState)
	if e.cfg.Mode == Record {
		s.attribute(out, noTrace, func(tid string, p []byte) {
			if tid != "" {
				e.recordCall("inbound-read", func() { e.cfg.Recorder.InboundRead(&st.info, tid, p) })
			}
		})
	}
	if inPlace {
		return len(out), true
	}
	k = copy(b, out)
	if k < len(out) {
		st.pending = append(st.pending[:0], out[k:]...)
	}
	return k, true
}

func noTrace() string { return "" }

// startRequest decides the trace of a request whose head has just been
// read and binds it to the calling goroutine (the one that will serve it),
// or queues it behind the request being served (see serving). It runs in
// the parser's callback, within parseInbound.
func (e *engine) startRequest(st *connState, h *trace.RequestHead) string {
	counters.requests.Add(1)
	var tid string
	switch e.cfg.Mode {
	case Replay:
		if h.BadTraceID {
			e.reportOnce("bad-trace-id", "ignored a Retrace-Trace-Id that is not a valid trace id",
				"value", h.BadValue, "conn", st.info.Remote)
		}
		if h.BadReplayTime {
			e.reportOnce("bad-replay-time", "ignored a Retrace-Replay-Time that is not unix nanoseconds",
				"value", h.BadValue, "conn", st.info.Remote)
		}
		tid = h.TraceID
	case Record:
		e.recordCall("start-request", func() { tid = e.cfg.Recorder.StartRequest(&st.info, *h) })
		if tid != "" && !trace.ValidID(tid) {
			e.reportOnce("recorder-tid", "the recorder returned an invalid trace id; request not traced", "tid", tid)
			tid = ""
		}
	}
	e.admit(st, tid, h)
	if tid != "" {
		counters.traced.Add(1)
	}
	return tid
}

// recordCall runs one Recorder call, recovering its panic.
func (e *engine) recordCall(where string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("recorder-"+where, r)
		}
	}()
	f()
}

// inboundWrite writes a response on an accepted connection: never framed,
// never redirected; reported in record mode. The first write of each
// response marks the response begun (see serving); a write while requests
// wait behind the current one, and one that may be an interim response
// (status 1xx), take inboundWriteTurn.
//
// Record mode reports written bytes before writing them, here and on
// outbound connections: the answer, read on another goroutine, can then
// never be reported before the bytes it answers.
func (e *engine) inboundWrite(st *connState, c *netConn, b []byte) (int, error) {
	if (e.cfg.Mode == Replay || e.streamRec != nil) && st.h2.Load() != h2Not {
		h := st.h2.Load()
		if h == nil {
			// The server writes before it has read anything: not HTTP/1,
			// maybe HTTP/2 (grpc-go sends its SETTINGS first). Follow its
			// frames from the start, until the first read decides.
			st.h2.CompareAndSwap(nil, newH2In(false))
			h = st.h2.Load()
		}
		if h != h2Not {
			e.h2Wrote(h, st, b)
			return e.rawWrite(st, c, b)
		}
	}
	if r := st.srv.resp.Load(); r != respStarted && len(b) > 0 &&
		(r != respIdle || len(b) > 9 && b[9] == '1' || !st.srv.resp.CompareAndSwap(respIdle, respStarted)) {
		return e.inboundWriteTurn(st, c, b)
	}
	e.reportInboundWrite(st, b)
	return e.rawWrite(st, c, b)
}

// outboundRead is the first read of a redirected connection whose
// preamble has not been sent: protocols where the server speaks first have
// the client read before it writes. Later reads are connRead's.
func (e *engine) outboundRead(st *connState, c *netConn, b []byte) (int, error) {
	st.wmu.Lock()
	err := e.sendPreamble(st, c)
	st.wmu.Unlock()
	if err != nil {
		return 0, err
	}
	return e.l.plainRead(c, b)
}

// recordOutboundRead reports an outbound read, recovering its panic (see
// recordOutboundWrite).
func (e *engine) recordOutboundRead(st *connState, b []byte) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("recorder-outbound-read", r)
		}
	}()
	e.cfg.Recorder.OutboundRead(&st.info, b)
}

// sendPreamble writes the len:0 frame naming the original destination,
// once, before any other byte. Called with st.wmu held.
func (e *engine) sendPreamble(st *connState, c *netConn) error {
	if st.preamble.Load() {
		return nil
	}
	var hdr [trace.MaxFrameHeader]byte
	h := trace.AppendFrameHeader(hdr[:0], validOrEmpty(trace.CurrentID()), st.dst, 0)
	if _, err := e.l.plainWrite(c, h); err != nil {
		return err
	}
	st.preamble.Store(true)
	counters.preambles.Add(1)
	return nil
}

func validOrEmpty(tid string) string {
	if tid == "" || trace.ValidID(tid) {
		return tid
	}
	return ""
}

// inBandTrace is the trace of a request written on a dialled connection:
// the one its in-band Retrace-Trace-Id named, "" for none (splitOutbound
// then charges it to the writing goroutine's), or untracedMark for a
// request the Transport hook marked as made on no trace.
func inBandTrace(h trace.RequestHead) string {
	if h.Stripped > 0 {
		counters.stripped.Add(1)
		if h.TraceID == "" {
			return untracedMark
		}
	}
	return h.TraceID
}

// untracedMark is the trace inBandTrace gives a request whose in-band
// Retrace-Trace-Id was empty: the Transport hook says its caller had no
// trace, so the writing goroutine's (net/http's writeLoop, which serves
// the pooled connection for any request) must not be charged instead.
// It is no valid trace id.
const untracedMark = "\x00untraced"

// plainOutboundWrite reports whether a write on a dialled connection goes
// out as it is (a plain connection with no HTTP to strip: the common case),
// having reported it first in record mode; if not, outboundWriteSplit
// writes it: the in-band Retrace-Trace-Id the Transport hook added is
// stripped and becomes the trace of the request's bytes, other bytes are
// charged to the writing goroutine's trace, and on a redirected connection
// every piece is sent as a frame.
func (e *engine) plainOutboundWrite(st *connState, b []byte) bool {
	broken := st.broken.Load()
	if st.redirect || !(broken || st.passed.Load()) {
		return false
	}
	if len(b) > 0 && e.cfg.Mode == Record && !broken {
		tid := trace.CurrentID()
		if tid != "" || st.setupWrite(&e.conns) {
			e.recordOutboundWrite(st, tid, b)
		}
	}
	return true
}

// recordOutboundWrite reports an outbound write, recovering its panic
// (recordCall without the closure's frame: this runs at the bottom of deep
// client stacks, where each frame's bytes can make the runtime grow and
// copy the goroutine's stack).
func (e *engine) recordOutboundWrite(st *connState, tid string, b []byte) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("recorder-outbound-write", r)
		}
	}()
	e.cfg.Recorder.OutboundWrite(&st.info, tid, b)
}

// outboundWriteSplit writes on a dialled connection whose bytes go through
// its stream (HTTP, or redirected) and returns the application's byte
// count.
func (e *engine) outboundWriteSplit(st *connState, c *netConn, b []byte) (int, error) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.redirect {
		if err := e.sendPreamble(st, c); err != nil {
			return 0, err
		}
	} else if h := st.h2w.Load(); h != h2OutNot && e.cfg.Mode == Record {
		if h == nil {
			h = e.h2OutDecide(st, b)
		}
		if h != h2OutNot {
			return e.h2OutWrite(h, st, c, b)
		}
	}
	w := outWriter{e: e, st: st, c: c}
	defer st.publish()
	if !e.splitOutbound(st, b, &w) {
		// The hook panicked: send the bytes as they are (framed with no
		// trace on a redirected connection, so the mock stays in sync).
		w = outWriter{e: e, st: st, c: c}
		w.piece("", b)
	}
	w.flush()
	if w.err != nil {
		return min(w.sent, len(b)), w.err
	}
	if w.sent == 0 && len(b) > 0 {
		// Every byte was held back (a request head in progress) or
		// stripped. A write of nothing still fails on a closed connection
		// or past the write deadline, as this Write would without the agent.
		if st.tls {
			if _, err := e.rawWrite(st, c, nil); err != nil {
				return 0, err
			}
		} else if _, err := e.l.fdWrite(c.fd, nil); err != nil {
			return 0, e.l.opError("write", c.fd, err)
		}
	}
	return len(b), nil
}

// splitOutbound feeds b through the connection's stream and hands w the
// pieces with their traces. false means it panicked and w got nothing.
func (e *engine) splitOutbound(st *connState, b []byte, w *outWriter) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("outbound-write", r)
			st.broken.Store(true)
			w.reset()
			ok = false
		}
	}()
	var gtid string
	var gdone bool
	goroutineTID := func() string {
		if !gdone {
			gtid, gdone = validOrEmpty(trace.CurrentID()), true
		}
		return gtid
	}
	s := st.wr
	if st.broken.Load() || s.passThrough() {
		w.piece(goroutineTID(), b)
		return true
	}
	out := s.feed(b)
	for i := range s.events {
		switch ev := &s.events[i]; ev.tid {
		case "":
			ev.tid = goroutineTID()
		case untracedMark:
			ev.tid = ""
		}
	}
	s.attribute(out, goroutineTID, w.piece)
	return true
}

// outWriter collects the pieces of one outbound Write and sends them: as
// frames on a redirected connection, as they are otherwise. Small pieces
// are batched into one system call; the connection's write lock keeps
// other writers out between a frame's header and its payload.
type outWriter struct {
	e     *engine
	st    *connState
	c     *netConn
	err   error
	sent  int // payload bytes sent
	batch int // payload bytes in st.wbuf
}

const batchMax = 16 << 10

func (w *outWriter) reset() {
	w.st.wbuf = w.st.wbuf[:0]
	w.batch = 0
}

func (w *outWriter) piece(tid string, p []byte) {
	if w.err != nil || len(p) == 0 {
		return
	}
	st := w.st
	if st.redirect {
		st.wbuf = trace.AppendFrameHeader(st.wbuf, tid, st.dst, len(p))
		counters.framed.Add(1)
	}
	w.record(tid, p) // before the bytes go out (see inboundWrite)
	if len(p) >= batchMax {
		w.flush()
		if w.err == nil {
			w.write(p)
		}
		if w.err == nil {
			w.sent += len(p)
		}
		return
	}
	st.wbuf = append(st.wbuf, p...)
	w.batch += len(p)
}

func (w *outWriter) write(p []byte) {
	if _, err := w.e.rawWrite(w.st, w.c, p); err != nil {
		w.err = err
	}
}

func (w *outWriter) flush() {
	st := w.st
	if len(st.wbuf) > 0 && w.err == nil {
		w.write(st.wbuf)
		if w.err == nil {
			w.sent += w.batch
		}
	}
	if cap(st.wbuf) > 4*batchMax {
		st.wbuf = nil
	}
	w.reset()
}

// record reports a piece of an outbound write in record mode. A request of
// no trace on an HTTP connection is not reported, and neither is its
// answer (see skipRead): the recorder would only follow the exchange to
// drop it. Bytes on a connection whose stream gave up on HTTP are reported
// whatever their trace: that is a connection's first write, set-up.
func (w *outWriter) record(tid string, p []byte) {
	if w.e.cfg.Mode != Record {
		return
	}
	if http := !w.st.wr.p.PassThrough(); http || tid != "" {
		// stored only when it changes: a store dirties the cache line
		// that every Read and Write on the connection reads first
		if quiet := http && tid == ""; w.st.quietHTTP.Load() != quiet {
			w.st.quietHTTP.Store(quiet)
		}
		if tid == "" {
			return
		}
	}
	w.e.recordCall("outbound-write", func() { w.e.cfg.Recorder.OutboundWrite(&w.st.info, tid, p) })
}
