package capture

import (
	"bytes"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http2"
)

var _ hook.StreamRecorder = (*Recorder)(nil)

// h2In is what the Recorder knows of an accepted HTTP/2 connection: both
// directions reassembled into streams (wire/http2.Conn), and the sessions
// of the sampled streams in progress. Each stream is one session, ended
// when its exchange is (END_STREAM both ways, or RST_STREAM), submitted in
// the recorded form v1 of wire/http2.
type h2In struct {
	mu      sync.Mutex
	conn    *http2.Conn
	streams map[uint32]*active // sampled streams in progress
	failed  bool               // the connection could not be followed: nothing more is recorded of it
}

// h2Of returns the HTTP/2 state of an accepted connection, made on first
// use (req is stream 1's request of a connection upgraded from HTTP/1.1,
// nil for one with prior knowledge); nil for a dialled one.
func (r *Recorder) h2Of(c *hook.ConnInfo, upgrade *http2.Message) *h2In {
	ic := inboundOf(c)
	if ic == nil {
		return nil
	}
	if h := ic.h2.Load(); h != nil {
		return h
	}
	h := &h2In{streams: map[uint32]*active{}}
	if upgrade != nil {
		h.conn = http2.Upgraded(http2.Limits{}, *upgrade)
	} else {
		h.conn = http2.NewConn(http2.Limits{})
	}
	max := r.max
	h.conn.KeepData = func(id uint32) int {
		if h.streams[id] == nil {
			return 0 // not sampled: followed, data not kept
		}
		return max
	}
	if !ic.h2.CompareAndSwap(nil, h) {
		return ic.h2.Load()
	}
	return h
}

// StartStream samples the stream and, when sampled, starts its session.
func (r *Recorder) StartStream(c *hook.ConnInfo, stream uint32) string {
	h := r.h2Of(c, nil)
	if h == nil || !r.pipe.Sample() {
		return ""
	}
	if r.activeN.Add(1) > r.maxActive {
		r.activeN.Add(-1)
		r.overflow.Add(1)
		return ""
	}
	now := time.Now()
	a := &active{at: now, start: int64(now.Sub(r.base)), in: inboundOf(c), conn: c, stream: stream}
	for {
		a.id = trace.NewID()
		if r.sessions.putNew(a) {
			break
		}
	}
	h.mu.Lock()
	if h.failed {
		h.mu.Unlock()
		r.drop(a)
		return ""
	}
	if prev := h.streams[stream]; prev != nil {
		h.streams[stream] = nil
		defer r.dropIncomplete(prev)
	}
	h.streams[stream] = a
	h.mu.Unlock()
	return a.id
}

// H2Read feeds the client's bytes.
func (r *Recorder) H2Read(c *hook.ConnInfo, p []byte) { r.h2InFeed(c, http2.Client, p) }

// H2Write feeds the server's bytes.
func (r *Recorder) H2Write(c *hook.ConnInfo, p []byte) { r.h2InFeed(c, http2.Server, p) }

func (r *Recorder) h2InFeed(c *hook.ConnInfo, side http2.Side, p []byte) {
	h := r.h2Of(c, nil)
	if h == nil {
		return
	}
	done, lost, err := h.feed(side, p)
	if err == nil && lost == nil && done == nil {
		return
	}
	if err != nil {
		r.h2Failed.Add(1)
		if r.log != nil && r.h2Logged.CompareAndSwap(false, true) {
			r.log.Error("retrace: an inbound HTTP/2 connection could not be followed; its streams are not recorded (counted in h2_lost)",
				"conn", c.Remote, "err", err)
		}
	}
	for _, a := range lost {
		r.dropIncomplete(a)
	}
	for _, d := range done {
		r.finishStream(d.a, d.x)
	}
}

// feed feeds one direction's bytes and returns the sampled streams that
// ended; when the connection can no longer be followed (an error, or a
// panic of the decoder, recovered here so that the lock is released and
// the application's I/O goes on), the sessions in progress are lost with
// err.
func (h *h2In) feed(side http2.Side, p []byte) (done []streamDone, lost []*active, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed {
		return nil, nil, nil
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("capture: HTTP/2 decoder panic: %v", v)
		}
		if err != nil {
			// The connection's HPACK state or framing is lost: no later
			// stream can be decoded.
			h.failed = true
			for id, a := range h.streams {
				lost = append(lost, a)
				delete(h.streams, id)
			}
		}
	}()
	if side == http2.Client {
		err = h.conn.Client(p)
	} else {
		err = h.conn.Server(p)
	}
	return h.take(h.conn.Exchanges()), nil, err
}

// streamDone is a sampled stream whose exchange ended.
type streamDone struct {
	a *active
	x *http2.Exchange
}

// take pairs the exchanges that ended with their sessions; the streams
// not sampled are forgotten. Called with h.mu held.
func (h *h2In) take(xs []*http2.Exchange) []streamDone {
	var out []streamDone
	for _, x := range xs {
		if a := h.streams[x.StreamID]; a != nil {
			delete(h.streams, x.StreamID)
			out = append(out, streamDone{a, x})
		}
	}
	return out
}

// H2Upgraded turns the session of the request that asked for h2c into
// stream 1 of the connection: its response comes as HTTP/2.
func (r *Recorder) H2Upgraded(c *hook.ConnInfo, tid string) {
	ic := inboundOf(c)
	if ic == nil || ic.h2.Load() != nil {
		return
	}
	a := ic.session(tid)
	var req *http2.Message
	if a != nil {
		a.mu.Lock()
		raw := a.req.view()
		a.mu.Unlock()
		end := bytes.Index(raw, []byte("\r\n\r\n"))
		if m, ok, err := http2.UpgradeRequest(raw[:max(0, end+4)]); end >= 0 && ok && err == nil {
			m.Data = raw[end+4:]
			req = &m
		}
	}
	if req == nil {
		req = &http2.Message{}
		if a != nil {
			ic.unlink(a)
			r.dropIncomplete(a)
			a = nil
		}
	}
	h := r.h2Of(c, req)
	if a == nil {
		return
	}
	ic.unlink(a) // no longer an HTTP/1 request: the 101 and what follows are not its
	a.stream = 1
	h.mu.Lock()
	h.streams[1] = a
	h.mu.Unlock()
}

// unlink takes a off the connection's list of HTTP/1 requests in progress.
func (ic *inbound) unlink(a *active) {
	ic.newest.CompareAndSwap(a, nil)
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.first == a {
		ic.first = a.next
	} else {
		for p := ic.first; p != nil && p.next != nil; p = p.next {
			if p.next == a {
				p.next = a.next
				break
			}
		}
	}
	a.next = nil
}

// h2Closed ends the streams still in progress when the connection closes:
// a stream that had its response headers is recorded as it got (noted as
// unfinished), one without is dropped as incomplete.
func (r *Recorder) h2Closed(ic *inbound) {
	h := ic.h2.Load()
	if h == nil {
		return
	}
	done, rest := h.close()
	for _, d := range done {
		r.finishStream(d.a, d.x)
	}
	for _, a := range rest {
		r.dropIncomplete(a)
	}
}

// close ends the connection's streams: those that ended (or were open)
// with their exchanges, and the sessions left without one.
func (h *h2In) close() (done []streamDone, rest []*active) {
	h.mu.Lock()
	defer h.mu.Unlock()
	defer func() {
		if v := recover(); v != nil {
			done = nil // the Conn is broken: every session left goes as incomplete
		}
		for id, a := range h.streams {
			rest = append(rest, a)
			delete(h.streams, id)
		}
		h.failed = true
	}()
	if !h.failed {
		done = h.take(h.conn.Close("the connection closed"))
	}
	return done, nil
}

func (r *Recorder) dropIncomplete(a *active) {
	if r.drop(a) {
		r.incomplete.Add(1)
	}
}

// finishStream submits the session of a stream whose exchange ended; a
// stream that never had response headers is dropped as incomplete.
func (r *Recorder) finishStream(a *active, x *http2.Exchange) {
	if x.Response.Header == nil && len(x.Response.Interim) == 0 {
		r.dropIncomplete(a)
		return
	}
	end := r.now()
	a.mu.Lock()
	if a.ended.Swap(true) {
		a.mu.Unlock()
		return
	}
	calls := a.calls
	a.calls = nil
	rnd := a.random
	a.mu.Unlock()
	proto := http2.Name
	if x.IsGRPC() {
		proto = http2.GRPCName
	}
	tls := tlsOf(a.in.tls)
	tls.Note = streamNote(x)
	tp, _ := http2.Get(x.Request.Header, "traceparent")
	s := &recording.Session{
		V: recording.SchemaVersion, ID: a.id, Trace: trace.TraceParentID(tp), App: r.app, At: a.at,
		Inbound: recording.Inbound{Proto: proto, Local: a.conn.Local, Remote: a.conn.Remote,
			DurNs: end - a.start, TLS: tls},
	}
	in := &s.Inbound
	in.Request, in.RequestTruncated = recordedHalf(x.Request, nil, r.max)
	in.Response, in.ResponseTruncated = recordedHalf(x.Response, x.Pace, r.max)
	r.submit(a, s, calls, rnd, end)
}

// recordedHalf is a stream's half in the recorded form within max bytes
// (http2.AppendCapped: the pipeline's cap would otherwise cut the form
// itself, which would no longer parse). truncated: data was cut (here, or
// not kept by the Conn).
func recordedHalf(m http2.Message, pace []http2.Mark, max int) (b []byte, truncated bool) {
	size := 32 + len(m.Data) + 16*len(pace)
	for _, block := range append(append(m.Interim, m.Header), m.Trailer) {
		for _, f := range block {
			size += len(f.Name) + len(f.Value) + 4
		}
		size += 2
	}
	b, cut := http2.AppendCapped(make([]byte, 0, size), m, pace, max)
	return b, cut || m.Dropped > 0 || m.Truncated
}

// streamNote says how a stream ended when not with both halves whole.
func streamNote(x *http2.Exchange) string {
	switch {
	case x.Reset != nil:
		return "HTTP/2 stream reset by the " + x.Reset.By.String() + " with " + x.Reset.Code.String()
	case x.Unfinished != "":
		return "HTTP/2 stream unfinished: " + x.Unfinished
	}
	return ""
}

// h2Attrs is the HTTP/2 counter of the closing log line.
func (r *Recorder) h2Attrs() slog.Attr { return slog.Int64("h2_lost", r.h2Failed.Load()) }
