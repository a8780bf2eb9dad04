package mockserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/retrace-dev/retrace/wire"
)

// A connection of a multiplexed protocol (HTTP/2: gRPC and HTTP/2
// streams) carries many requests of many traces at once, each answered
// on its own and, for a streaming call, piece by piece as its request
// arrives. The connection's goroutine reads frames and feeds the
// protocol's wire.Mux; every request gets a goroutine of its own that
// finds its answer in the recording of the trace the request carries
// in-band (or the background recordings), waits out the causal hold of
// that trace, and gives the answer to the Mux, which paces it by the
// recording; one writer goroutine sends what the Mux has to send. A
// trace whose answer is held, or whose recording is being fetched, holds
// up its own requests only.

// muxConn is the state of one multiplexed connection.
type muxConn struct {
	c   *conn
	ctx context.Context
	// dst is the recorded destination, once decided (under mu until
	// then; c.dst is the reader's)
	dst string
	// chain matches a destination's requests: its own chain if it has
	// one, else the messages by similarity and then the server's chain.
	chain []Strategy

	mu      sync.Mutex // mux, streams and every muxStream
	mux     wire.Mux
	streams map[uint32]*muxReq

	kick    chan struct{} // output to write
	stop    chan struct{} // closed when the reader ends: the writer flushes and returns
	werr    error         // the writer's error, read after it returned
	wdone   chan struct{}
	wdl     time.Duration
	matches sync.WaitGroup
}

// muxReq is the mock's state of one request (stream).
type muxReq struct {
	id    uint32
	proto string
	tid   string
	last  wire.MuxEvent // the latest report of the request
	raw   []byte        // its latest recorded form
	more  chan struct{} // the request changed while its answer was sought

	decided  bool // answered or missing
	over     bool // ended or gone
	observed bool
	ts       *traceState
	oc       ObservedCall
}

// serveMux answers the rest of the connection through mp's Mux. c.buf
// holds the client bytes read so far.
func (c *conn) serveMux(mp wire.Multiplexed) error {
	ctx, cancel := context.WithCancel(c.ctx)
	m := &muxConn{c: c, ctx: ctx, streams: map[uint32]*muxReq{}, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), wdone: make(chan struct{})}
	m.mux = mp.NewMux(wire.Env{Book: wire.NoBook{}, MaxMessage: c.s.cfg.MaxMessage, TraceID: func() string { return "" }})
	if !c.unresolved {
		m.setDst(c.dst)
	}
	go m.writer()
	err := m.read()
	cancel()
	m.matches.Wait()
	if m.dst != "" {
		c.dst, c.unresolved = m.dst, false
	}
	close(m.stop)
	<-m.wdone
	m.mu.Lock()
	for _, r := range m.streams {
		r.over = true
		m.observe(r)
	}
	m.mu.Unlock()
	if m.werr != nil {
		err = m.werr // the reader's error is then the closed connection
	}
	return err
}

func (m *muxConn) setDst(dst string) {
	m.dst = dst
	if ch, ok := m.c.s.cfg.DstStrategies[dst]; ok {
		m.chain = ch
	} else {
		m.chain = append([]Strategy{StrategyHamming}, m.c.s.cfg.Strategies...)
	}
}

// read is the connection's goroutine: frames in, fed to the Mux.
func (m *muxConn) read() error {
	c := m.c
	for {
		if len(c.buf) > 0 {
			if err := m.feed(c.buf); err != nil {
				return err
			}
			c.buf = c.buf[:0]
		}
		if _, err := c.readFrame(); err != nil {
			return err
		}
	}
}

// feed gives the client's bytes to the Mux and starts, follows or ends
// the requests they change.
func (m *muxConn) feed(p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.wake()
	evs, err := m.mux.Feed(p)
	for _, e := range evs {
		r := m.streams[e.ID]
		if r == nil {
			r = &muxReq{id: e.ID, proto: e.Proto, tid: e.Req.Owner, more: make(chan struct{}, 1)}
			m.streams[e.ID] = r
			m.c.s.metrics.requests.WithLabelValues(e.Proto).Inc()
			m.matches.Add(1)
			go m.answer(r)
		}
		r.last = e
		if e.Req.Raw != nil {
			r.raw = e.Req.Raw
		}
		if e.Ended || e.Gone {
			r.over = true
			m.observe(r)
		}
		select {
		case r.more <- struct{}{}:
		default:
		}
	}
	if err != nil {
		return fmt.Errorf("%s connection to %s: %w", m.c.proto.Name(), m.c.live, err)
	}
	return nil
}

// resolve decides, for a connection to a destination no recording
// names, which recorded destination answers it, from the first request
// whose goroutine gets there (its trace's recording may have to be
// fetched first: the others do not wait for it).
func (m *muxConn) resolve(e *wire.MuxEvent) {
	m.mu.Lock()
	done := m.dst != ""
	m.mu.Unlock()
	if done {
		return
	}
	c := m.c
	d := c.s.resolveByRequest(c.live, c.proto, &e.Req, e.Req.Owner)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dst == "" {
		if d.Recorded != "" {
			m.setDst(d.Recorded)
		} else {
			m.setDst(c.live)
		}
	}
}

// wake has the writer send what the Mux holds.
func (m *muxConn) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// writer sends the Mux's output, each burst in one write, in the order
// the Mux produced it, until the reader ends (then once more: a GOAWAY).
func (m *muxConn) writer() {
	defer close(m.wdone)
	for {
		stopping := false
		select {
		case <-m.kick:
		case <-m.stop:
			stopping = true
		}
		m.mu.Lock()
		out := m.mux.Output()
		m.mu.Unlock()
		if len(out) > 0 && m.werr == nil {
			if err := m.write(out); err != nil {
				m.werr = err
				m.c.nc.Close() // the reader returns
			}
		}
		if stopping {
			return
		}
	}
}

func (m *muxConn) write(b []byte) error {
	s := m.c.s
	if now := s.now(); m.wdl-now < s.cfg.WriteTimeout*3/4 {
		m.wdl = now + s.cfg.WriteTimeout
		m.c.nc.SetWriteDeadline(s.epoch.Add(m.wdl))
	}
	_, err := m.c.nc.Write(b)
	return err
}

// answer is the goroutine of one request: it finds the answer, waits out
// the trace's causal hold, and gives it to the Mux.
func (m *muxConn) answer(r *muxReq) {
	defer m.matches.Done()
	s := m.c.s
	var ts *traceState
	if r.tid != "" {
		// may fetch the recording: this request waits, no other; with the
		// server's context, as the fetch may be shared with other
		// connections' requests, which this one's end must not cancel
		ts = s.trace(m.c.ctx, r.tid)
	}
	var patience *time.Timer
	patient := true
	for {
		m.mu.Lock()
		e := r.last
		m.mu.Unlock()
		m.resolve(&e)
		t0 := s.now()
		resp, h, reason, wait := m.find(r, ts, &e, patient)
		took := s.now() - t0 // the answer's time, waits and holds left out
		if wait {
			if patience == nil {
				patience = time.NewTimer(muxPatience)
				defer patience.Stop()
			}
			select {
			case <-r.more:
				continue
			case <-patience.C:
				patient = false // matched with what there is
				continue
			case <-m.ctx.Done():
				reason = "the connection closed before the request could be matched"
			}
		}
		if reason == "" {
			s.await(m.ctx, h, m.dst)
		}
		t1 := s.now()
		m.mu.Lock()
		r.ts = ts
		if reason == "" {
			if err := m.mux.Answer(r.id, resp); err != nil {
				reason = fmt.Sprintf("recorded answer of call %d unreadable: %v", r.oc.Matched, err)
			}
		}
		if reason != "" {
			m.miss(r, reason)
		} else {
			s.metrics.matches.WithLabelValues(r.oc.Strategy).Inc()
		}
		d := took + s.now() - t1
		s.metrics.latency.Observe(d.Seconds())
		s.metrics.answers.record(d)
		r.decided = true
		m.observe(r)
		m.mu.Unlock()
		m.wake()
		return
	}
}

// muxPatience is how long a request whose recording has several calls
// alike waits for the first of its body, which tells them apart, before
// it is matched on its headers alone (a streaming call whose server spoke
// first).
const muxPatience = 100 * time.Millisecond

// find looks for the answer to request e of r: in its trace's recording
// (ts), else the background recordings for a request of no trace. wait:
// the recording has several calls alike and the request has nothing yet
// to tell them apart (only its headers): more of it is awaited, if
// patient.
func (m *muxConn) find(r *muxReq, ts *traceState, e *wire.MuxEvent, patient bool) (resp []byte, h hold, reason string, wait bool) {
	s := m.c.s
	oc := &r.oc
	*oc = ObservedCall{Proto: r.proto, Dst: m.dst, Matched: -1}
	if m.c.live != m.dst {
		oc.Live = m.c.live
	}
	req := &e.Req
	if ts == nil {
		// start-up and background traffic (a health check): answered
		// from the background recordings by similarity; never proxied
		if a, ok := s.idx.answerBackground(m.dst, req); ok {
			oc.Matched, oc.Strategy, oc.Score = a.seq, "background", 1
			return a.resp, h, "", false
		}
		reason = fmt.Sprintf("untraced %s request (no in-band trace) to %s: no start-up or background recording of the destination answers %s", r.proto, m.dst, req.Op)
		if real, ok := s.cfg.untraced(m.c.live); ok {
			reason += fmt.Sprintf(", and it cannot be proxied to %s: a multiplexed connection is not proxied request by request", real)
		}
		return nil, h, reason, false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.entry == nil {
		return nil, h, fmt.Sprintf("trace %q resolves to no recording (no session %q is loaded and no alias names it)", ts.id, ts.recID), false
	}
	ds := s.dstState(ts, m.dst, m.chain)
	if patient && !e.Ended && !e.Gone && len(req.Canon) == 0 && ds.du != nil {
		alike := 0
		for _, i := range ds.du.byOp[req.Op] {
			if !ds.used[i] {
				alike++
			}
		}
		if alike > 1 {
			return nil, h, "", true
		}
	}
	res, why := match(ds.chain, req, ds.du, ds.used, ds.cur)
	if why != "" {
		return nil, h, fmt.Sprintf("recording %q: %s (%s)", ts.recID, why, req.Op), false
	}
	ds.used[res.unit] = true
	u := &ds.du.units[res.unit]
	oc.Matched, oc.Strategy, oc.Score = u.seq, string(res.strategy), res.score
	ts.markSent(u.call)
	if rc := &ts.entry.s.Calls[u.call]; s.cfg.CausalWait > 0 {
		// held only if the trace has not sent every call the recording
		// sent before this answer (usually it has), those of the same
		// recorded connection too: its streams are concurrent, not one
		// behind the other
		hh := hold{ts: ts, need: ts.entry.sentBefore(rc.StartNs + rc.DurNs)}
		if len(ts.unsent(hh.need, hh.conn)) > 0 {
			h = hh
		}
	}
	return u.resp, h, "", false
}

// miss answers r with the protocol's error and counts it; the caller
// holds m.mu.
func (m *muxConn) miss(r *muxReq, reason string) {
	s := m.c.s
	m.mux.Missing(r.id, reason)
	r.oc.Error, r.oc.Matched, r.oc.Strategy, r.oc.Score = reason, -1, "", 0
	s.metrics.misses.WithLabelValues(r.proto).Inc()
	s.traces.addMissing(MissingMock{Trace: r.tid, Proto: r.proto, Dst: m.dst, Request: append([]byte(nil), r.raw...), Reason: reason})
	s.log.Info("missing mock", "trace", r.tid, "dst", m.dst, "proto", r.proto, "op", r.last.Req.Op, "reason", reason)
}

// observe files r in its trace's report once it is both answered and
// over, with the whole request; the caller holds m.mu.
func (m *muxConn) observe(r *muxReq) {
	if !r.decided || !r.over || r.observed {
		return
	}
	r.observed = true
	delete(m.streams, r.id)
	if r.ts == nil {
		return
	}
	oc := r.oc
	oc.Request = r.raw
	r.ts.mu.Lock()
	r.ts.observe(oc, m.c.s.cfg.MaxObserved)
	r.ts.mu.Unlock()
}
