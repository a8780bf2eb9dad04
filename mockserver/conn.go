package mockserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// errQuit ends a connection whose client said goodbye (COM_QUIT, QUIT,
// Connection: close) or whose request has no protocol error to answer with.
var errQuit = errors.New("client ended the connection")

// conn is one framed connection from an agent. Its goroutine reads frames,
// assembles protocol messages and answers them in order.
type conn struct {
	s   *Server
	nc  net.Conn
	br  *bufio.Reader
	ctx context.Context

	// dst is the recorded destination that answers the connection; live
	// is the one its frames name (they differ when the replay environment
	// is configured with other addresses, DESIGN.md section 10).
	dst, live string
	// unresolved: no recording names live, and the connection's first
	// request (or, for a client that sends nothing, a protocol whose
	// server speaks first) decides which recorded destination answers it.
	// tentative: the choice made is weak (an untraced ping); the first
	// traced request may change it.
	unresolved, tentative bool
	quietBy               time.Duration // when a client that sent nothing is taken to wait for a greeting
	proto                 wire.Protocol // with ad, once known
	ad                    wire.Answerer
	buf                   []byte // payload bytes of requests not yet complete
	msgTID                string // trace of the request being assembled
	out                   []byte // answers not yet written

	up     net.Conn // real destination for untraced requests, dialled on demand
	upAddr string

	// lastHead is the previous frame's header up to its length digits, with
	// its trace and destination: a pooled connection's frames mostly repeat
	// it, and recognising it saves decoding (and allocating) both strings.
	lastHead         []byte
	lastTID, lastDst string

	rdl, wdl time.Duration // read and write deadlines in force, on the server's clock
	// this connection's children of the labelled counters, for the label
	// it used last (a connection's protocol, a destination's strategy)
	requests, matches, misses counterSlot

	held hold // the answer being built, when causal order holds it back
	// recDur is how long the recorded call of the answer being built took
	// (0 for an answer not from the trace's recording): the longest an
	// answer the client had cancelled is held (awaitCancel)
	recDur time.Duration

	// clock is when the last answer was built, zero once the next frame is
	// awaited: a reading for the write deadline and the idle time that
	// saves two clock readings per request.
	clock time.Duration

	// The state of the trace of the last request, valid while the trace
	// table's generation is tsGen: a connection's requests mostly belong
	// to one trace in turn.
	ts    *traceState
	tsTID string
	tsGen uint64
	ds    dstState
}

// dstState is what matching a request of trace ts on this connection
// looks up by destination, kept while the connection's requests stay in
// that trace.
type dstState struct {
	ts    *traceState
	du    *dstUnits
	used  []bool         // the trace's used units of du (shared by its connections)
	cur   map[string]int // the trace's cursors for this destination
	chain []Strategy
}

// dstStateOf looks up (or creates) ts's state for the connection's
// destination; the caller holds ts.mu and ts.entry is not nil.
func (c *conn) dstStateOf(ts *traceState) dstState {
	return c.s.dstState(ts, c.dst, c.s.cfg.chain(c.dst))
}

// dstState looks up (or creates) ts's state for destination dst, matched
// with chain; the caller holds ts.mu and ts.entry is not nil.
func (s *Server) dstState(ts *traceState, dst string, chain []Strategy) dstState {
	d := dstState{ts: ts, du: s.idx.unitsFor(ts.entry, dst), chain: chain}
	if d.du != nil {
		if d.used = ts.used[dst]; d.used == nil {
			d.used = make([]bool, len(d.du.units))
			ts.used[dst] = d.used
		}
	}
	if d.cur = ts.cursor[dst]; d.cur == nil {
		d.cur = map[string]int{}
		ts.cursor[dst] = d.cur
	}
	return d
}

// traceState returns the state of trace tid (see Server.trace).
func (c *conn) traceState(tid string) *traceState {
	gen := c.s.traces.gen.Load()
	if c.ts == nil || c.tsTID != tid || c.tsGen != gen {
		ts := c.s.trace(c.ctx, tid)
		if ts.transient {
			return ts // not cached: a recording loaded later must be found
		}
		c.ts, c.tsTID, c.tsGen = ts, tid, gen
	} else {
		c.s.traces.touch(c.ts)
	}
	return c.ts
}

// hold is an answer held back until the trace has sent what its recording
// sent before that answer arrived (see awaitSent).
type hold struct {
	ts   *traceState
	need int   // leading entries of ts.entry.sent that must have been sent
	conn int64 // recorded connection of the answered call
}

// serve runs the connection until the peer leaves, a protocol or frame
// error occurs, or the server closes.
func (c *conn) serve() {
	err := c.run()
	if c.up != nil {
		c.up.Close()
	}
	c.nc.Close()
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, errQuit), errors.Is(err, net.ErrClosed):
	default:
		c.s.metrics.connErrors.Inc()
		c.s.log.Warn("closing connection", "remote", c.nc.RemoteAddr().String(), "dst", c.dst, "err", err)
	}
}

func (c *conn) run() error {
	for {
		h, err := c.readFrame()
		if errors.Is(err, errQuiet) {
			// a client that sent nothing after connecting waits for the
			// server to speak first
			c.quietBy = 0
			if d, ok := c.s.resolveServerFirst(c.live, c.msgTID); ok {
				c.dst, c.tentative, c.unresolved = d.Recorded, d.Tentative, false
				if err := c.start(protocols.All.For(d.Proto)); err != nil {
					return err
				}
			} else if p := c.s.protoFor(c.live); p != "" {
				if err := c.start(protocols.All.For(p)); err != nil {
					return err
				}
			} else {
				// a client waiting for a server that speaks first, of no
				// recorded destination: closed at once rather than left to
				// hang
				reason := fmt.Sprintf("client sent nothing after connecting to %s, which no recording names, and no recorded destination speaks first", c.live)
				c.s.traces.addMissing(MissingMock{Trace: c.msgTID, Dst: c.live, Reason: reason})
				return fmt.Errorf("%w: %s", errQuit, reason)
			}
			continue
		}
		if err != nil {
			return err
		}
		if c.dst == "" {
			c.live = h.Dst
			if h.Dst == trace.RandomDst {
				return c.serveRandom()
			}
			if h.Dst == trace.TLSDst {
				return c.serveTLS()
			}
			if real, ok := c.s.cfg.passthrough(h.Dst); ok {
				return c.passthrough(real)
			}
			if err := c.open(); err != nil {
				return err
			}
		}
		if len(c.buf) == 0 {
			continue
		}
		c.quietBy = 0
		if c.ad == nil {
			// no recording names the destination: the protocol its first
			// bytes are sure to be (raw, which closes the connection, when
			// none is) and, with it, the recorded destination whose calls
			// fit the first request best; with none, every answer is a
			// missing mock
			p := protocols.All.DetectNow(c.buf, nil)
			if _, mux := p.(wire.Multiplexed); !mux {
				c.resolve(p) // a multiplexed connection's first request decides (serveMux)
			}
			if err := c.start(p); err != nil {
				return err
			}
		}
		if mp, ok := c.proto.(wire.Multiplexed); ok {
			return c.serveMux(mp)
		}
		if err := c.process(); err != nil {
			return err
		}
	}
}

// open decides, at a connection's first frame, which recorded destination
// answers it and in which protocol, when that needs no request: the
// recordings or the mapping name the live destination, or its port is
// that of a protocol whose server speaks first. Otherwise the first
// request decides (resolve), or, for a client that sends nothing, quietBy.
func (c *conn) open() error {
	if d, ok := c.s.resolveFixed(c.live); ok && d.Recorded != "" {
		c.dst = d.Recorded
		if d.Proto != "" {
			return c.start(protocols.All.For(d.Proto))
		}
		return nil
	}
	c.dst, c.unresolved = c.live, true
	if len(c.buf) > 0 {
		return nil
	}
	p := c.s.protoFor(c.live) // the MySQL port, with no recording of it
	if p == "" {
		c.quietBy = c.s.now() + quietWait
		return nil
	}
	c.unresolved = false
	if d, ok := c.s.resolveServerFirst(c.live, c.msgTID); ok {
		c.dst, c.tentative = d.Recorded, d.Tentative
		p = d.Proto
	}
	return c.start(protocols.All.For(p))
}

// quietWait is how long the mock server waits for the first bytes of a
// client connected to a destination no recording names before it takes
// the client to be waiting for a greeting (MySQL): clients of protocols
// whose client speaks first write at once.
const quietWait = 150 * time.Millisecond

// errQuiet is readFrame's report that a client sent nothing by quietBy.
var errQuiet = errors.New("client sent nothing")

// start makes the connection's answerer for p and sends its greeting, if
// the protocol's server speaks first.
func (c *conn) start(p wire.Protocol) error {
	c.ad = c.newAnswerer(p)
	if g := c.ad.Greeting(); g != nil {
		return c.write(g)
	}
	return nil
}

// resolve chooses the recorded destination for an unresolved connection
// from its first request, parsed by a throw-away answerer of p.
func (c *conn) resolve(p wire.Protocol) {
	if !c.unresolved {
		return
	}
	c.unresolved = false
	r, n, _, err := p.NewAnswerer(wire.Env{Book: wire.NoBook{}, MaxMessage: c.s.cfg.MaxMessage,
		TraceID: func() string { return c.msgTID }}).Next(append([]byte(nil), c.buf...))
	if err != nil || n == 0 {
		r = wire.Request{Raw: c.buf}
	}
	d := c.s.resolveByRequest(c.live, p, &r, c.msgTID)
	if d.Recorded != "" {
		c.dst, c.tentative = d.Recorded, d.Tentative
	}
}

// reresolve gives a connection whose destination was chosen tentatively
// a firmer choice, from its first traced request.
func (c *conn) reresolve(r *wire.Request, tid string) {
	c.tentative = false
	d := c.s.resolveByRequest(c.live, c.proto, r, tid)
	if d.Recorded != "" && d.Recorded != c.dst {
		c.dst, c.ds = d.Recorded, dstState{}
	}
}

// readFrame reads one frame and appends its payload to c.buf. Once the first
// byte of a frame has arrived, the whole frame must arrive within
// ReadTimeout (at least three quarters of it: deadlines are refreshed
// lazily so most frames cost no timer update). Before that the connection is
// idle, which is no error unless IdleTimeout is set and has passed.
func (c *conn) readFrame() (trace.FrameHeader, error) {
	cfg := &c.s.cfg
	idleSince := c.clock // the end of the answer just written, if any
	c.clock = 0
	if idleSince == 0 {
		idleSince = c.s.now()
	}
	c.armRead(idleSince)
	started := c.br.Buffered() > 0
	want := 1
	for {
		b, err := c.br.Peek(want)
		if len(b) == 0 && err != nil {
			var ne net.Error
			if !started && errors.As(err, &ne) && ne.Timeout() {
				now := c.s.now()
				if c.quietBy > 0 && now >= c.quietBy {
					return trace.FrameHeader{}, errQuiet
				}
				if cfg.IdleTimeout > 0 && now-idleSince >= cfg.IdleTimeout {
					return trace.FrameHeader{}, fmt.Errorf("idle for %s: %w", cfg.IdleTimeout, err)
				}
				c.armRead(now)
				continue
			}
			return trace.FrameHeader{}, err
		}
		if !started {
			started = true
			c.armRead(c.s.now())
		}
		if buf := c.br.Buffered(); buf > len(b) {
			b, _ = c.br.Peek(min(buf, trace.MaxFrameHeader)) // all that is buffered: never blocks
		}
		h, n, perr := c.parseHeader(b)
		if perr == nil {
			if h.Len > cfg.MaxFrame {
				return h, fmt.Errorf("%w: %d > %d bytes (destination %s)", trace.ErrFrameTooLong, h.Len, cfg.MaxFrame, h.Dst)
			}
			c.br.Discard(n)
			if len(c.buf) == 0 || c.msgTID == "" {
				c.msgTID = h.TID
			}
			start := len(c.buf)
			c.buf = append(c.buf, make([]byte, h.Len)...)
			if _, err := io.ReadFull(c.br, c.buf[start:]); err != nil {
				return h, fmt.Errorf("reading %d payload bytes of a frame to %s: %w", h.Len, h.Dst, unexpected(err))
			}
			return h, nil
		}
		if perr != io.ErrUnexpectedEOF {
			return h, perr
		}
		if err != nil {
			return h, unexpected(err)
		}
		if want >= trace.MaxFrameHeader {
			return h, fmt.Errorf("%w: header longer than %d bytes", trace.ErrFrameSyntax, trace.MaxFrameHeader)
		}
		if buf := c.br.Buffered(); buf > len(b) {
			want = min(buf, trace.MaxFrameHeader)
		} else {
			want = min(len(b)+1, trace.MaxFrameHeader)
		}
	}
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// process answers every complete request in c.buf, in order, and writes the
// answers at once (a pipeline gets one write).
func (c *conn) process() error {
	off := 0
	var quit error
	for off < len(c.buf) {
		r, n, interim, err := c.ad.Next(c.buf[off:])
		if err != nil {
			return fmt.Errorf("%s request to %s: %w", c.proto.Name(), c.dst, err)
		}
		c.out = append(c.out, interim...)
		if n == 0 {
			break
		}
		start := c.s.now()
		mark := len(c.out)
		closeAfter := c.answer(&r)
		c.clock = c.s.now()
		c.s.metrics.latency.Observe((c.clock - start).Seconds())
		c.s.metrics.answers.record(c.clock - start)
		c.awaitSent()
		if err := c.awaitCancel(mark); err != nil {
			return err
		}
		off += n
		if r.Quit || closeAfter {
			quit = errQuit
			break
		}
	}
	c.buf = c.buf[:copy(c.buf, c.buf[off:])]
	if len(c.buf) == 0 {
		c.msgTID = ""
	}
	if len(c.out) > 0 {
		err := c.write(c.out)
		c.out = c.out[:0]
		if cap(c.out) > 1<<20 {
			c.out = nil
		}
		if err != nil {
			return err
		}
	}
	return quit
}

func (c *conn) write(b []byte) error {
	now := c.clock
	if now == 0 {
		now = c.s.now()
	}
	if c.wdl-now < c.s.cfg.WriteTimeout*3/4 {
		c.wdl = now + c.s.cfg.WriteTimeout
		c.nc.SetWriteDeadline(c.s.epoch.Add(c.wdl))
	}
	_, err := c.nc.Write(b)
	return err
}

// armRead makes sure at least three quarters of ReadTimeout are left before
// the read deadline.
func (c *conn) armRead(now time.Duration) {
	if c.quietBy > 0 && c.quietBy < now+c.s.cfg.ReadTimeout {
		c.rdl = c.quietBy
		c.nc.SetReadDeadline(c.s.epoch.Add(c.rdl))
		return
	}
	if c.rdl-now < c.s.cfg.ReadTimeout*3/4 {
		c.rdl = now + c.s.cfg.ReadTimeout
		c.nc.SetReadDeadline(c.s.epoch.Add(c.rdl))
	}
}

// answer appends the answer to r to c.out. It reports whether the
// connection must close after it (a missing mock in a protocol without an
// error message).
func (c *conn) answer(r *wire.Request) (closeAfter bool) {
	s := c.s
	proto := c.proto.Name()
	c.requests.inc(s.metrics.requests, proto)
	tid := c.msgTID
	if r.Owner != "" {
		tid = r.Owner
	}
	if c.tentative && tid != "" && !r.Setup && !r.Local {
		c.reresolve(r, tid)
	}
	var ts *traceState
	if tid != "" {
		ts = c.traceState(tid)
	}
	oc := ObservedCall{Proto: proto, Dst: c.dst, Setup: r.Setup, Request: r.Raw, Matched: -1, Statement: r.Stmt}
	if c.live != c.dst {
		oc.Live = c.live
	}
	var out []byte
	reason := ""
	observed := false
	switch {
	case r.Local:
		out = c.ad.Synth(r)
		oc.Matched, oc.Strategy, oc.Synthesized = 0, "setup", true
	case r.Setup:
		if a, ok := s.idx.answerSetup(c.dst, r); ok {
			out = c.ad.Reply(r, a.resp)
			oc.Matched, oc.Strategy, oc.Score = a.seq, "setup", 1
		} else {
			out = c.ad.Synth(r)
			oc.Matched, oc.Strategy, oc.Synthesized = 0, "setup", true
		}
	case tid == "":
		real, ok := s.cfg.untraced(c.live)
		_, unproxied := c.ad.AnswerLen(r, nil)
		if !ok {
			// start-up and background traffic: answered from the
			// background recordings by similarity
			if a, found := s.idx.answerBackground(c.dst, r); found {
				out = c.ad.Reply(r, a.resp)
				oc.Matched, oc.Strategy, oc.Score = a.seq, "background", 1
				break
			}
		}
		if ok && unproxied == nil {
			var err error
			if out, err = c.proxy(real, r); err == nil {
				oc.Proxied = true
				break
			} else {
				reason = fmt.Sprintf("untraced request to %s could not be proxied to %s: %v", c.dst, real, err)
			}
		} else if ok {
			reason = fmt.Sprintf("untraced %s request to %s: %v", proto, c.dst, unproxied)
		} else {
			reason = fmt.Sprintf("untraced request (empty trace id) to %s: no start-up or background recording of the destination answers %s %q, and no proxy is configured for it", c.dst, r.Op, clip(r.Key))
		}
	default:
		ts.mu.Lock()
		out, reason = c.matchTrace(ts, r, &oc)
		if reason == "" {
			// answered: observed in the same hold of the lock
			ts.observe(oc, s.cfg.MaxObserved)
			observed = true
		}
		ts.mu.Unlock()
	}
	if reason != "" && !r.NoReply {
		oc.Error = reason
		out = c.ad.Missing(r, reason)
		closeAfter = out == nil
		c.misses.inc(s.metrics.misses, proto)
		s.traces.addMissing(MissingMock{Trace: tid, Proto: proto, Dst: c.dst, Request: append([]byte(nil), r.Raw...), Reason: reason})
		s.log.Info("missing mock", "trace", tid, "dst", c.dst, "proto", proto, "op", r.Op, "reason", reason)
	} else if oc.Strategy != "" {
		c.matches.inc(s.metrics.matches, oc.Strategy)
	}
	if ts != nil && !observed && (reason == "" || !r.NoReply) {
		ts.mu.Lock()
		ts.observe(oc, s.cfg.MaxObserved)
		ts.mu.Unlock()
	}
	c.out = append(c.out, out...)
	return closeAfter
}

// matchTrace finds the recorded answer to r in the trace's recording; the
// caller holds ts.mu.
func (c *conn) matchTrace(ts *traceState, r *wire.Request, oc *ObservedCall) ([]byte, string) {
	s := c.s
	reason := ""
	if ts.entry == nil {
		reason = fmt.Sprintf("trace %q resolves to no recording (no session %q is loaded and no alias names it)", ts.id, ts.recID)
	} else {
		if c.ds.ts != ts {
			c.ds = c.dstStateOf(ts)
		}
		du, used := c.ds.du, c.ds.used
		res, why := match(c.ds.chain, r, du, used, c.ds.cur)
		if why == "" {
			used[res.unit] = true
			u := &du.units[res.unit]
			oc.Matched, oc.Strategy, oc.Score = u.seq, string(res.strategy), res.score
			out := c.ad.Reply(r, u.resp)
			ts.markSent(u.call)
			c.recDur = time.Duration(ts.entry.s.Calls[u.call].DurNs)
			if rc := &ts.entry.s.Calls[u.call]; len(out) > 0 && s.cfg.CausalWait > 0 {
				// held only if the trace has not sent every call the
				// recording sent before this answer (usually it has)
				h := hold{ts: ts, need: ts.entry.sentBefore(rc.StartNs + rc.DurNs), conn: rc.Conn}
				if len(ts.unsent(h.need, h.conn)) > 0 {
					c.held = h
				}
			}
			return out, ""
		}
		reason = fmt.Sprintf("recording %q: %s (%s %q)", ts.recID, why, r.Op, clip(r.Key))
	}
	// Not in the trace's recording: set-up traffic of the destination, or a
	// statement prepared by any recording of it (a statement prepared once
	// more, on another connection after a retry), still has an answer. It
	// is reported as set-up: Matched is then a call of another recording,
	// not one of this trace's.
	if a, ok := s.idx.answerSetup(c.dst, r); ok {
		oc.Setup, oc.Matched, oc.Strategy, oc.Score = true, a.seq, "setup", 1
		return c.ad.Reply(r, a.resp), ""
	}
	if resp, seq, ok := s.idx.fallback(c.dst, r); ok {
		oc.Setup, oc.Matched, oc.Strategy, oc.Score = true, seq, "setup", 1
		return c.ad.Reply(r, resp), ""
	}
	return nil, reason
}

// awaitSent releases the answer just built once the trace has sent every
// request its recording had sent before that answer came back — at most
// CausalWait later. This keeps the recorded order between a request's
// concurrent goroutines: when one goroutine's answer (a failure) made the
// request cancel another's call, the recording holds that call only if it
// was sent before the answer arrived, and an answer given at once would
// let the replay cancel it before it is sent (or the other way round).
// Only calls the recording shows as sent before the answer can be waited
// for, so a replay of the same build never waits for a call that depends
// on the answer; a call the replay does not send is waited for once per
// trace, then given up.
func (c *conn) awaitSent() {
	h := c.held
	c.held = hold{}
	if c.s.await(c.ctx, h, c.dst) {
		c.clock = 0 // a reading from before the wait is stale
	}
}

// await waits until the calls hold h waits for are sent (see
// conn.awaitSent), ctx ends, or CausalWait passes; it reports whether it
// waited at all.
func (s *Server) await(ctx context.Context, h hold, dst string) (waited bool) {
	if h.ts == nil {
		return false
	}
	var timer *time.Timer
	for {
		h.ts.mu.Lock()
		missing := h.ts.unsent(h.need, h.conn)
		if len(missing) == 0 {
			h.ts.mu.Unlock()
			return timer != nil
		}
		if h.ts.wake == nil {
			h.ts.wake = make(chan struct{})
		}
		wake := h.ts.wake
		h.ts.mu.Unlock()
		if timer == nil {
			s.metrics.holds.Inc()
			timer = time.NewTimer(s.cfg.CausalWait)
			defer timer.Stop()
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return true
		case <-timer.C:
			h.ts.mu.Lock()
			for _, i := range h.ts.unsent(h.need, h.conn) {
				h.ts.giveUp(i)
			}
			h.ts.mu.Unlock()
			s.metrics.holdsGivenUp.Inc()
			s.log.Info("answer released without calls recorded before it", "trace", h.ts.id, "dst", dst, "calls", missing)
			return true
		}
	}
}

// awaitCancel holds the answer just built (c.out from mark on) when the
// recorded answer came back because the client cancelled its request from
// another connection (wire.Canceller: PostgreSQL's query_canceled): what
// the server sent before it was cancelled goes at once, the rest once the
// live client's cancel reaches the mock server, or at most twice as long
// as the recorded call took and a second (a client that does not cancel
// gets the answer then).
func (c *conn) awaitCancel(mark int) error {
	d := c.recDur
	c.recDur = 0
	cn, ok := c.ad.(wire.Canceller)
	if !ok {
		return nil
	}
	cancelled, head, done, ok := cn.AwaitCancel()
	if !ok {
		return nil
	}
	defer done()
	if d <= 0 || mark+head > len(c.out) {
		return nil
	}
	if n := mark + head; n > 0 {
		if err := c.write(c.out[:n]); err != nil {
			return err
		}
		c.out = c.out[:copy(c.out, c.out[n:])]
	}
	// the live client cancels later than the recorded one did when
	// replaying is slower than recording was
	d = 2*d + time.Second
	c.clock = 0 // a reading from before the wait is stale
	c.s.metrics.holds.Inc()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-cancelled:
	case <-timer.C:
		c.s.log.Info("answer of a cancelled call released: the client did not cancel it", "dst", c.dst, "after", d)
	case <-c.ctx.Done():
	}
	return nil
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// counterSlot increments one child of a labelled counter without the
// vector's shared lookup while the label stays the same.
type counterSlot struct {
	label string
	ctr   prometheus.Counter
}

func (cs *counterSlot) inc(vec *prometheus.CounterVec, label string) {
	if cs.ctr == nil || cs.label != label {
		cs.label, cs.ctr = label, vec.WithLabelValues(label)
	}
	cs.ctr.Inc()
}

// parseHeader decodes the frame header at the start of b like
// trace.ParseFrameHeader, taking a shortcut when the header repeats the
// previous one but for its length.
func (c *conn) parseHeader(b []byte) (trace.FrameHeader, int, error) {
	if p := len(c.lastHead); p > 0 && bytes.HasPrefix(b, c.lastHead) {
		n, q := 0, p
		for q < len(b) && q-p < 18 && b[q] >= '0' && b[q] <= '9' {
			n = n*10 + int(b[q]-'0')
			q++
		}
		if q > p && (b[p] != '0' || q-p == 1) && q+3 <= len(b) && string(b[q:q+3]) == "}*/" {
			return trace.FrameHeader{TID: c.lastTID, Dst: c.lastDst, Len: n}, q + 3, nil
		}
	}
	h, n, err := trace.ParseFrameHeader(b)
	if err == nil {
		c.lastHead = append(c.lastHead[:0], b[:n-len("}*/")-len(strconv.Itoa(h.Len))]...)
		c.lastTID, c.lastDst = h.TID, h.Dst
	}
	return h, n, err
}

// maxRandomReports bounds the divergences kept for one trace (the agent
// sends one per source).
const maxRandomReports = 16

// serveRandom notes the divergences of replayed randomness an agent
// reports on a connection named trace.RandomDst: each frame is one JSON
// trace.Divergence of the frame's trace, answered with a newline once
// noted, so that the runner, which reads the trace's report after the
// response, finds it there.
func (c *conn) serveRandom() error {
	return serveQuestions(c, "divergence report", func(tid string, d *trace.Divergence) ([]byte, error) {
		if tid != "" {
			ts := c.traceState(tid)
			ts.mu.Lock()
			if len(ts.random) < maxRandomReports {
				ts.random = append(ts.random, *d)
			}
			ts.mu.Unlock()
		}
		c.s.log.Info("replayed randomness diverged", "trace", tid, "divergence", d.String())
		return nil, nil
	})
}

// serveQuestions serves a connection an agent opened to one of the mock's
// own destinations (trace.RandomDst, trace.TLSDst): each frame of it is
// one JSON Q of the frame's trace, answered by answer's bytes and a
// newline.
func serveQuestions[Q any](c *conn, what string, answer func(tid string, q *Q) ([]byte, error)) error {
	for {
		c.buf = c.buf[:0]
		h, err := c.readFrame()
		if err != nil {
			return err
		}
		if h.Len == 0 {
			continue
		}
		var q Q
		if err := json.Unmarshal(c.buf, &q); err != nil {
			return fmt.Errorf("%s of trace %q: %w", what, h.TID, err)
		}
		line, err := answer(h.TID, &q)
		if err != nil {
			return err
		}
		if err := c.write(append(line, '\n')); err != nil {
			return err
		}
	}
}

// divergences returns a copy of the divergences noted; the caller holds
// ts.mu.
func (ts *traceState) divergences() []trace.Divergence {
	return append([]trace.Divergence(nil), ts.random...)
}
