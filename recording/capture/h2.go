package capture

import (
	"fmt"

	xhttp2 "golang.org/x/net/http2"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http2"
)

// HTTP/2 (DESIGN.md 12). A dialled connection whose client starts with
// the HTTP/2 preface, or whose TLS negotiated h2, carries the streams of
// many traces at once, each its own call. wire/http2.Conn reassembles
// both directions into streams (the agent reports writes before they go
// out and reads after they came, so a stream's frames are fed in the
// order they happened); a stream's call is made when its request's
// headers are framed, filed into the session of the trace those headers
// carry in-band (retrace-trace-id, which the agent's rewriter removed
// before the real server saw it, and which the recording leaves out too),
// or into the background sessions when they carry none, and filled when
// the stream ends: END_STREAM both ways, RST_STREAM, the GOAWAY that
// drops it, or the connection's end. The writing goroutine's trace means
// nothing here (grpc-go writes every frame from one goroutine).
// Connection-level frames (SETTINGS, PING, WINDOW_UPDATE, GOAWAY) are no
// call.

// h2Conn is capture's state of an HTTP/2 connection (under its outConn's
// lock); before the preface is whole, of a connection whose first bytes
// are its start (c nil, those bytes in pending).
type h2Conn struct {
	c       *http2.Conn
	pending []byte
	calls   map[uint32]*call // streams in progress whose calls are kept
	limit   int              // payload cap of a recorded half, negative for none
	now     int64            // Recorder clock of the bytes being fed
	// failed says why the connection stopped being followed (its bytes
	// stopped being HTTP/2); nothing more of it is recorded.
	failed string
}

// on reports an HTTP/2 connection (not one still deciding).
func (hc *h2Conn) on() bool { return hc != nil && hc.c != nil }

// h2Call is what a call of an HTTP/2 stream has beyond any call's.
type h2Call struct {
	x     *http2.Exchange
	proto string // http2.GRPCName or http2.Name
	note  string // why the stream ended otherwise than by its answer
	ended bool   // the stream is over: req and resp hold it whole
}

// preface says whether a client whose first bytes are before and then p
// speaks HTTP/2: Sure once they hold the preface, NotYet while they are
// the start of it.
func preface(before, p []byte) http2.Verdict {
	if len(before) > 0 {
		p = append(before[:len(before):len(before)], p...)
	}
	return http2.Detect(p)
}

// startH2 makes oc an HTTP/2 connection (called with oc.mu held, before
// its first bytes are fed): early holds server bytes read before.
func (r *Recorder) startH2(oc *outConn) {
	hc := &h2Conn{calls: map[uint32]*call{}, limit: r.max}
	hc.c = http2.NewConn(http2.Limits{})
	if r.max >= 0 {
		hc.c.MaxData = r.max + 1 // a cut half is marked truncated
	}
	hc.c.Truncate = true
	hc.c.OnFrame = func(from http2.Side, f *http2.Frame, x *http2.Exchange) { r.h2Frame(oc, from, f, x) }
	oc.det, oc.h2 = nil, hc
	oc.proto, oc.tap = nil, nil
	if len(oc.early) > 0 {
		early := oc.early
		oc.early = nil
		r.h2Feed(oc, http2.Server, early, hc.now)
	}
}

// h2Feed feeds bytes one side sent and files the streams they end
// (called with oc.mu held).
func (r *Recorder) h2Feed(oc *outConn, side http2.Side, p []byte, now int64) {
	hc := oc.h2
	if hc.failed != "" {
		return
	}
	hc.now = now
	var err error
	if side == http2.Client {
		err = hc.c.Client(p)
	} else {
		err = hc.c.Server(p)
	}
	for _, x := range hc.c.Exchanges() {
		hc.end(x, now)
	}
	if err != nil {
		hc.failed = err.Error()
		hc.close("the connection stopped being followed: "+hc.failed, now)
	}
}

// h2Frame sees each frame as it is framed: a client HEADERS frame that
// opens a stream makes its call.
func (r *Recorder) h2Frame(oc *outConn, from http2.Side, f *http2.Frame, x *http2.Exchange) {
	if x == nil {
		return
	}
	hc := oc.h2
	if c := hc.calls[x.StreamID]; c != nil {
		c.end = hc.now
		if from == http2.Client && f.Type == xhttp2.FrameHeaders && len(x.Request.Trailer) > 0 {
			x.Request.Trailer, _ = http2.WithoutRetrace(x.Request.Trailer)
		}
		return
	}
	if from != http2.Client || f.Type != xhttp2.FrameHeaders || x.Promised || len(x.Request.Trailer) > 0 {
		return
	}
	var tid string
	x.Request.Header, tid = http2.WithoutRetrace(x.Request.Header)
	if tid != "" && !trace.ValidID(tid) {
		tid = ""
	}
	c := oc.newCall()
	c.tid, c.start, c.end = tid, hc.now, hc.now
	c.tls = oc.info.TLS.Load()
	c.h2 = &h2Call{x: x, proto: http2.Name}
	if x.IsGRPC() {
		c.h2.proto = http2.GRPCName
	}
	place(oc, c, r.sessionFor(oc, tid))
	if !c.keep && tid == "" {
		// a stream of no request: start-up, health checks, background
		// jobs (and requests not sampled), within the background budget
		c.keep = r.bg.add(oc, c)
	}
	if c.keep {
		hc.calls[x.StreamID] = c
	}
}

// end files a finished stream's call.
func (hc *h2Conn) end(x *http2.Exchange, now int64) {
	c := hc.calls[x.StreamID]
	if c == nil {
		return
	}
	delete(hc.calls, x.StreamID)
	c.end = now
	h := c.h2
	switch {
	case x.Reset != nil:
		h.note = fmt.Sprintf("stream reset by the %s: %v", x.Reset.By, x.Reset.Code)
	case x.Unfinished != "":
		h.note = "stream cut: " + x.Unfinished
	}
	h.ended = true
	c.h2Fill(hc.limit)
}

// close ends the streams in progress (the connection's end, or its bytes
// stopped being HTTP/2).
func (hc *h2Conn) close(why string, now int64) {
	for _, x := range hc.c.Close(why) {
		hc.end(x, now)
	}
}

// h2Fill puts the stream's halves, as far as they went, in the call's
// payloads, in wire/http2's recorded form (called with the connection's
// lock held; again when the session is written before the stream ended).
func (c *call) h2Fill(limit int) {
	x := c.h2.x
	req, reqCut := http2.AppendCapped(nil, x.Request, nil, limit)
	resp, respCut := http2.AppendCapped(nil, x.Response, x.Pace, limit)
	c.req = payload{b: req, n: int64(len(req)), truncated: reqCut || x.Request.Truncated}
	c.resp = payload{b: resp, n: int64(len(resp)), truncated: respCut || x.Response.Truncated}
	if !c.h2.ended {
		// an answer still coming: reads wait for it (background.take)
		c.resp.n = 0
	}
}

// h2Snapshot is what snapshotLocked takes of an HTTP/2 stream's call.
func (c *call) h2Snapshot() (proto, note string) {
	h := c.h2
	if !h.ended {
		c.h2Fill(c.oc.h2.limit)
		return h.proto, "stream in progress when the session was written"
	}
	return h.proto, h.note
}

// closedH2 ends the streams of an HTTP/2 connection the application
// closed.
func (r *Recorder) closedH2(c *hook.ConnInfo) {
	oc, ok := c.Data.Load().(*outConn)
	if !ok {
		return
	}
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.h2.on() && oc.h2.failed == "" {
		oc.h2.close("the connection closed", r.now())
	}
}
