package capture

import (
	"crypto/tls"
	"sync"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// maxEarly bounds the response bytes a connection keeps while waiting
// for the write they answer to be reported.
const maxEarly = 64 << 10

// outConn is what the Recorder knows of one dialled connection, kept in its
// hook.ConnInfo.Data. What it knows of the connection's protocol is its
// wire.Tap's: capture itself parses nothing.
type outConn struct {
	// What every report on the connection reads comes first, in one cache
	// line (see the padding at the end).
	mu    sync.Mutex    // guards what follows and the payloads of its calls
	wrote bool          // a write has been reported
	owned bool          // a session has taken the connection's set-up calls
	proto wire.Protocol // nil until the first bytes tell
	tap   wire.Tap      // the protocol's state of the connection, made with proto
	cur   *call         // the call that reads belong to
	// sess is the session the connection's last call was placed in, or
	// nil: a request usually makes several calls in a row on the
	// connection it holds, and this spares those after the first the
	// lookup in the Recorder's index.
	sess  *active
	arena arena // the bytes of its calls' payloads

	id      uint64
	info    *hook.ConnInfo  // its Remote and Host: the calls' Dst and Host
	early   []byte          // response bytes that came before their request was reported
	pending []*call         // set-up calls waiting for the connection's first session
	det     *wire.Detector  // while the first bytes left the protocol undecided
	slab    *[callSlab]call // where its next calls are made (see newCall)
	h2      *h2Conn         // an HTTP/2 connection's streams (h2.go); nil for any other
	slabN   uint8           // calls of slab made
	bgSetup bool            // its set-up calls went into a background session
	// to 192 bytes, a size class whose objects start on a cache line (at
	// 160 they would straddle two every other time)
	_ [6]byte
}

// callSlab is how many calls a connection makes at once: a request
// makes about a dozen, and one allocation for eight instead of one each
// spares the allocator and the collector (a slab lives while a call of it
// is in a session in progress or is its connection's current one).
const callSlab = 8

// newCall returns a new call of oc, zero but for oc. Called with oc.mu
// held.
func (oc *outConn) newCall() *call {
	if oc.slab == nil || oc.slabN == callSlab {
		oc.slab, oc.slabN = new([callSlab]call), 0
	}
	c := &oc.slab[oc.slabN]
	oc.slabN++
	c.oc = oc
	return c
}

// call is one downstream exchange in progress or done.
type call struct {
	oc         *outConn
	tid        string
	setup      bool
	keep       bool // bytes are stored: the call belongs (or may belong) to a session
	start, end int64
	req, resp  payload
	// tls is what the handshake of the call's connection negotiated, nil
	// for plain TCP (and for a MySQL connection's calls before its SSL
	// upgrade).
	tls *hook.TLSInfo
	h2  *h2Call // a call of an HTTP/2 stream (h2.go), nil for any other
}

// protoName is the connection's protocol as recorded (called with oc.mu
// held): the fallback, raw, while undecided.
func (oc *outConn) protoName() string {
	if oc.proto == nil {
		return protocols.All.Fallback().Name()
	}
	return oc.proto.Name()
}

// detect follows the connection's first bytes until they tell its
// protocol (called with oc.mu held and oc.tap nil). Most connections are
// decided by their first bytes, which are then not copied. When the
// protocol is decided after client bytes of the call in progress, its
// Tap is told of them first.
func (oc *outConn) detect(side wire.Side, p []byte) {
	var proto wire.Protocol
	var ok bool
	if oc.det == nil {
		client, server := p, []byte(nil)
		if side == wire.Server {
			client, server = nil, p
		}
		if proto, ok = protocols.All.Detect(client, server); !ok {
			oc.det = protocols.All.NewDetector()
			oc.det.Feed(side, p)
			return
		}
	} else if proto, ok = oc.det.Feed(side, p); !ok {
		return
	}
	var before []byte
	if oc.det != nil {
		before = oc.det.Client()
		if side == wire.Client {
			before = before[:max(0, len(before)-len(p))]
		}
		oc.det = nil
	}
	oc.proto, oc.tap = proto, proto.NewTap()
	if len(before) > 0 && oc.cur != nil {
		oc.tap.Write(before, oc.cur.tid, true)
	}
}

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
	proto, note := "", ""
	if c.h2 != nil {
		proto, note = c.h2Snapshot()
	} else {
		proto = c.oc.protoName()
	}
	return recording.Call{Proto: proto, Dst: c.oc.info.Remote, Host: c.oc.info.Host, Setup: c.setup, Conn: int64(c.oc.id),
		Request: c.req.view(), Response: c.resp.view(), StartNs: c.start - base, DurNs: c.end - c.start,
		RequestTruncated: c.req.truncated, ResponseTruncated: c.resp.truncated, TLS: tlsOf(c.tls), Note: note}
}

// tlsOf is the recording's form of a connection's TLS.
func tlsOf(t *hook.TLSInfo) recording.TLS {
	if t == nil {
		return recording.TLS{}
	}
	r := recording.TLS{On: true, ServerName: t.ServerName, ALPN: t.ALPN}
	if t.Version != 0 {
		r.Version = tls.VersionName(t.Version)
		r.CipherSuite = suiteName(t.CipherSuite)
	}
	if t.Curve != 0 {
		r.Curve = t.Curve.String()
	}
	return r
}

// suiteNames are crypto/tls's names of the cipher suites it knows, by id:
// tls.CipherSuiteName builds its lists anew on every call.
var suiteNames = sync.OnceValue(func() map[uint16]string {
	m := map[uint16]string{}
	for _, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
		for _, c := range list {
			m[c.ID] = c.Name
		}
	}
	return m
})

// suiteName is tls.CipherSuiteName(id).
func suiteName(id uint16) string {
	if n, ok := suiteNames()[id]; ok {
		return n
	}
	return tls.CipherSuiteName(id)
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
	oc := &outConn{id: c.ID, info: c}
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
	if oc.tap == nil && !oc.h2.on() {
		var before []byte // the start of the preface, held back
		if oc.h2 != nil {
			before = oc.h2.pending
		}
		v := preface(before, p)
		if t := c.TLS.Load(); t != nil && t.ALPN == "h2" {
			v = http2.Sure
		}
		switch {
		case v == http2.Sure:
			r.startH2(oc) // a stream per call (h2.go)
			if len(before) > 0 {
				r.h2Feed(oc, http2.Client, before, now)
			}
		case v == http2.NotYet:
			// the start of the preface: no call until it is decided
			if oc.h2 == nil {
				oc.h2 = &h2Conn{}
			}
			oc.h2.pending = append(oc.h2.pending, p...)
			return
		default:
			if before != nil {
				// held bytes that were not the preface after all: they
				// start the call
				oc.h2 = nil
				p = append(before[:len(before):len(before)], p...)
			}
			oc.detect(wire.Client, p)
		}
	}
	oc.wrote = true
	if oc.h2 != nil {
		r.h2Feed(oc, http2.Client, p, now)
		return
	}
	cur := oc.cur
	var f wire.Filing
	if oc.tap != nil {
		f = oc.tap.Write(p, tid, cur == nil || cur.tid != tid || cur.resp.n > 0)
		tid = f.Trace
	}
	// The same call goes on while nothing has answered it yet, or while
	// the protocol says so (an HTTP request that got "100 Continue" sends
	// its body).
	if cur != nil && cur.tid == tid && (cur.resp.n == 0 || f.Continue) {
		if cur.keep {
			cur.req.add(p, r.max, &oc.arena)
		}
		cur.end = now
		return
	}
	if f.Skip {
		// an exchange the protocol says cannot be attributed (HTTP of no
		// sampled request): reads until the next write are dropped
		oc.cur = nil
		oc.early = oc.early[:0]
		return
	}
	cur = oc.newCall()
	cur.tid, cur.start, cur.end, cur.setup = tid, now, now, f.Setup
	cur.tls = c.TLS.Load()
	oc.cur = cur
	// the session is looked up here rather than in place: the deepest frame
	// on this path is what makes the runtime grow a client's stack
	place(oc, cur, r.sessionFor(oc, tid))
	if !cur.keep && tid == "" && !cur.setup {
		// traffic of no request: the application's start-up and
		// background traffic, kept within the background budget
		cur.keep = r.bg.add(oc, cur)
	}
	if cur.keep {
		cur.req.add(p, r.max, &oc.arena)
	}
	if len(oc.early) > 0 {
		// bytes read before this request was reported: its answer, for a
		// protocol whose clients read on a goroutine of their own
		if oc.tap != nil && !oc.tap.ReadsOnWriter() && oc.tap.Read(oc.early) {
			cur.resp.add(oc.early, r.maxFor(cur), &oc.arena)
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
		if proto, ok := protocols.All.Detect(nil, p); ok && proto == protocols.All.Fallback() {
			// bytes on a connection whose writes were never reported, of
			// no protocol whose server speaks first: traffic of no sampled
			// request.
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
	if oc.h2.on() {
		r.h2Feed(oc, http2.Server, p, now)
		return
	}
	cur := oc.cur
	switch {
	case cur == nil && !oc.wrote:
		if len(oc.early)+len(p) > maxEarly {
			return
		}
		// for the first request, if its client reads on a goroutine of
		// its own; or the start of a greeting
		oc.early = append(oc.early, p...)
		if oc.tap == nil {
			oc.detect(wire.Server, p)
		}
		if oc.tap == nil || !oc.tap.ReadsOnWriter() {
			// undecided (a server may send its greeting's header and body
			// with separate writes, and the client read the header alone),
			// or an answer kept for its request
			return
		}
		// the server speaks first: its greeting is set-up traffic
		cur = oc.newCall()
		cur.tid, cur.setup, cur.start = trace.CurrentID(), true, now
		oc.cur = cur
		place(oc, cur, r.sessionFor(oc, cur.tid))
		p, oc.early = oc.early, nil // the greeting's bytes read so far
		oc.tap.Read(p)
	case cur == nil:
		return
	case oc.tap != nil && !oc.tap.ReadsOnWriter():
		if !oc.tap.Read(p) {
			// the current call's answer is complete: these bytes answer a
			// request not reported yet
			if len(oc.early)+len(p) <= maxEarly {
				oc.early = append(oc.early, p...)
			}
			return
		}
	default:
		// Clients of these protocols read on the goroutine that wrote: an
		// answer read under another trace answers a write that was not
		// reported (no sampled request made it).
		if cur.tid != trace.CurrentID() {
			return
		}
		if oc.tap == nil {
			oc.detect(wire.Server, p)
		}
		if oc.tap != nil {
			oc.tap.Read(p)
		}
	}
	cur.resp.add(p, r.maxFor(cur), &oc.arena)
	cur.end = now
}

// Decode is the decoded form of a recorded request in its protocol (the
// first lines of wire.Decoded.Text), "" when it does not decode: what
// recording.PipelineConfig.Decode wants.
func Decode(proto string, request []byte) string {
	d, ok := protocols.All.For(proto).Decode(wire.Client, request)
	if !ok {
		return ""
	}
	const max = 4 << 10
	if len(d.Text) > max {
		return d.Text[:max] + "…"
	}
	return d.Text
}
