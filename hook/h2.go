package hook

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http2/inband"
)

// An accepted connection that starts with the HTTP/2 client preface, in
// replay mode, carries many streams at once (a grpc-go or net/http h2c
// server), each with its trace in-band as retrace-trace-id. The read side
// removes every retrace-* field from the client's header blocks
// (inband.Rewriter, which encodes each block again so that the server's
// HPACK table stays in step) and cuts the bytes it returns after each
// block that opens a stream: the server's reading goroutine then reads
// one new stream per Read, and the agent binds that stream's trace to it
// as the Read returns. A server that starts the stream's handler from the
// reading goroutine (grpc-go, net/http) has the handler inherit the trace
// through the pprof label. A stream with no trace gets an empty binding,
// so that it inherits none. Each stream's binding lives until the server
// ends the stream (END_STREAM or RST_STREAM written) or the connection
// closes: the handlers of a connection's streams run at the same time.
type h2In struct {
	rw   *inband.Rewriter
	out  []byte  // rewritten bytes the application has not read
	cuts []h2Cut // in out, in order
	err  error   // of the read that filled out, returned once out is read
	// prefaceOut: the Rewriter has passed the client preface.
	prefaceOut bool

	mu       sync.Mutex // bindings, written by the read and the write side
	bindings map[uint32]func()
	// traces are the open streams' traces (an empty ID for a stream of
	// none), for the hook that binds net/http's handlers (h2serve.go)
	traces map[uint32]*trace.Trace
	w      h2FrameWalk // the server's frames, for the end of each stream

	// Record mode (rec): the connection's bytes go to the StreamRecorder,
	// reads as the application gets them, writes before they go out. The
	// server may write before the first read decides the connection is
	// HTTP/2 (grpc-go and net/http send their SETTINGS first): those
	// writes wait in early until then (guarded by mu, with decided).
	rec      bool
	decided  bool
	early    []byte
	upgraded bool   // switched from HTTP/1.1 by an h2c Upgrade: stream 1 is the upgrade request
	key      string // in h2Conns
}

// maxEarly bounds the server's bytes kept before the first read of a
// connection that may be HTTP/2 (a server-first protocol writes its
// greeting there).
const maxEarly = 64 << 10

type h2Cut struct {
	end    int // offset in out just after the block
	stream uint32
	tid    string
	replay time.Time // retrace-replay-time, zero when absent
}

// replayTimeField is Retrace-Replay-Time as an HTTP/2 field.
const replayTimeField = "retrace-replay-time"

// h2Not marks a connection that is not HTTP/2 (st.h2 is decided on the
// first read).
var h2Not = &h2In{}

// h2Decide looks at the first bytes read on an accepted connection and
// sets st.h2. The first read of an HTTP/2 client holds the whole preface
// (clients write it with their SETTINGS at once); a first read of fewer
// than its first four bytes ("PRI ") is taken for HTTP/1.
func (e *engine) h2Decide(st *connState, first []byte) *h2In {
	const pri = "PRI "
	if e.cfg.Mode == Record && e.streamRec == nil && len(first) >= len(pri) && string(first[:len(pri)]) == pri {
		// The Recorder records no HTTP/2 streams.
		counters.h2unrecorded.Add(1)
		e.reportOnce("h2-inbound-unrecorded", "inbound HTTP/2 connections (gRPC, h2c, h2) are not recorded: the recorder does not record HTTP/2 streams; counted in ReadStats().H2Unrecorded", "conn", st.info.Remote)
		st.h2.Store(h2Not)
		return h2Not
	}
	if len(first) < len(pri) || string(first[:len(pri)]) != pri {
		if !st.h2.CompareAndSwap(nil, h2Not) {
			st.h2.Store(h2Not) // a provisional state of early writes
		}
		return h2Not
	}
	h := st.h2.Load()
	if h == nil {
		st.h2.CompareAndSwap(nil, newH2In(true))
		h = st.h2.Load()
	}
	h.mu.Lock()
	h.rw = inband.NewRewriter(true)
	h.key = h2Key(st.info.Remote, st.info.Local)
	if e.cfg.Mode == Record {
		h.rec, h.decided = true, true
		if early := h.early; len(early) > 0 {
			h.early = nil
			e.recordCall("h2-write", func() { e.streamRec.H2Write(&st.info, early) })
		}
	}
	h.mu.Unlock()
	h2Conns.Store(h.key, h)
	counters.h2conns.Add(1)
	return h
}

// newH2In returns the state of a connection that may be HTTP/2; with
// reading, decided so by its first read.
func newH2In(reading bool) *h2In {
	h := &h2In{bindings: map[uint32]func(){}, traces: map[uint32]*trace.Trace{}}
	if reading {
		h.rw = inband.NewRewriter(true)
	}
	return h
}

// h2Read serves a read of an HTTP/2 connection whose first n bytes were
// just read into b (n is 0 on later reads: they read themselves).
func (e *engine) h2Read(h *h2In, st *connState, c *netConn, b []byte, n int, err error) (int, error) {
	for {
		if n > 0 {
			if rerr := e.h2Feed(h, st, b[:n]); rerr != nil {
				e.reportOnce("h2-rewrite", "an inbound HTTP/2 connection could not be rewritten; closing it", "conn", st.info.Remote, "err", rerr)
				return 0, rerr
			}
			if err != nil {
				h.err, err = err, nil
			}
		}
		if len(h.out) > 0 {
			return e.h2Serve(h, st, b), nil
		}
		if h.err != nil {
			err, h.err = h.err, nil
			return 0, err
		}
		if err != nil || len(b) == 0 {
			return 0, err
		}
		// Everything read was the start of a frame: read on.
		n, err = e.rawRead(st, c, b)
	}
}

// h2Feed rewrites bytes read and notes where the blocks that open streams
// end. In record mode each stream that opens is started with the
// StreamRecorder, and then the bytes reported as the application will read
// them.
func (e *engine) h2Feed(h *h2In, st *connState, p []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("h2-read", r)
			err = errors.New("retrace: the HTTP/2 rewriter failed")
		}
	}()
	out, blocks, err := h.rw.Write(p)
	if err != nil {
		return err
	}
	base := len(h.out)
	h.out = append(h.out, out...)
	// A stream the client resets ends there: the server may write nothing
	// more on it. The Rewriter's output is whole frames, after the preface.
	frames := out
	if !h.prefaceOut {
		frames = frames[min(len(frames), len(inband.ClientPreface)):]
		h.prefaceOut = len(out) > 0
	}
	if resets := clientResets(frames); resets != nil {
		h.mu.Lock()
		for _, id := range resets {
			h.endStream(id)
		}
		h.mu.Unlock()
	}
	for _, bl := range blocks {
		if !bl.Opens {
			continue
		}
		var tid string
		if h.rec {
			e.recordCall("start-stream", func() { tid = e.streamRec.StartStream(&st.info, bl.Stream) })
			if tid != "" && !trace.ValidID(tid) {
				e.reportOnce("recorder-tid", "the recorder returned an invalid trace id; stream not traced", "tid", tid)
				tid = ""
			}
			h.cuts = append(h.cuts, h2Cut{end: base + bl.End, stream: bl.Stream, tid: tid})
			continue
		}
		tid = bl.Trace()
		if tid != "" && !trace.ValidID(tid) {
			e.reportOnce("bad-trace-id", "ignored a retrace-trace-id that is not a valid trace id", "value", tid)
			tid = ""
		}
		cut := h2Cut{end: base + bl.End, stream: bl.Stream, tid: tid}
		for _, f := range bl.Removed {
			if f.Name == replayTimeField && tid != "" {
				if ns, err := strconv.ParseInt(f.Value, 10, 64); err == nil && ns > 0 {
					cut.replay = time.Unix(0, ns)
				} else {
					e.reportOnce("bad-replay-time", "ignored a retrace-replay-time that is not unix nanoseconds", "value", f.Value)
				}
			}
		}
		h.cuts = append(h.cuts, cut)
	}
	if h.rec && len(out) > 0 {
		e.recordCall("h2-read", func() { e.streamRec.H2Read(&st.info, out) })
	}
	return nil
}

// h2Serve copies to b what the application may read now: up to the next
// cut, where the stream that opens there is bound to the reading
// goroutine.
func (e *engine) h2Serve(h *h2In, st *connState, b []byte) int {
	if len(h.cuts) == 0 {
		k := copy(b, h.out)
		h.out = h.out[k:]
		return k
	}
	limit := len(h.out)
	if len(h.cuts) > 0 {
		limit = h.cuts[0].end
	}
	k := copy(b, h.out[:limit])
	h.out = h.out[k:]
	if len(h.out) == 0 {
		h.out = h.out[:0:0]
	}
	for i := range h.cuts {
		h.cuts[i].end -= k
	}
	if len(h.cuts) > 0 && h.cuts[0].end == 0 {
		cut := h.cuts[0]
		h.cuts = h.cuts[1:]
		counters.requests.Add(1)
		var t *trace.Trace
		if h.rec && cut.tid != "" {
			t = e.newTrace(cut.tid, &trace.RequestHead{})
			if t.Random != nil && e.randomRec != nil {
				e.recordCall("random-started", func() { e.randomRec.RandomStarted(&st.info, cut.tid, t.Random) })
			}
		} else {
			t = &trace.Trace{ID: cut.tid, ReplayTime: cut.replay, Arrived: e.now()} // an empty id: bound to no trace
		}
		if cut.tid != "" {
			counters.traced.Add(1)
		}
		rel := trace.Bind(t)
		counters.bound.Add(1)
		if !cut.replay.IsZero() {
			rel = withReplayClock(rel)
		}
		h.mu.Lock()
		if prev := h.bindings[cut.stream]; prev != nil {
			prev()
		}
		h.bindings[cut.stream] = rel
		h.traces[cut.stream] = t
		h.mu.Unlock()
	}
	return k
}

// h2Wrote follows the frames the server writes and releases the binding
// of each stream it ends; in record mode it reports them first.
func (e *engine) h2Wrote(h *h2In, st *connState, b []byte) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("h2-write", r)
		}
	}()
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.cfg.Mode == Record {
		switch {
		case h.rec:
			e.recordCall("h2-write", func() { e.streamRec.H2Write(&st.info, b) })
		case !h.decided && len(h.early)+len(b) <= maxEarly:
			h.early = append(h.early, b...)
		default:
			h.early = nil
		}
	}
	h.w.walk(b, func(typ, flags byte, stream uint32) {
		const (
			typeData, typeHeaders, typeRST = 0x0, 0x1, 0x3
			endStream                      = 0x1
		)
		if typ == typeRST || (typ == typeData || typ == typeHeaders) && flags&endStream != 0 {
			h.endStream(stream)
		}
	})
}

// endStream forgets a stream that ended: its binding is released. Called
// with h.mu held.
func (h *h2In) endStream(id uint32) {
	delete(h.traces, id)
	if rel := h.bindings[id]; rel != nil {
		delete(h.bindings, id)
		rel()
	}
}

// h2Closed releases every binding of the connection.
func (h *h2In) closed() {
	if h == nil || h == h2Not {
		return
	}
	h.mu.Lock()
	rels := h.bindings
	h.bindings = map[uint32]func(){}
	clear(h.traces)
	key := h.key
	h.mu.Unlock()
	if key != "" {
		h2Conns.CompareAndDelete(key, h)
	}
	for _, rel := range rels {
		rel()
	}
}

// clientResets returns the streams RST_STREAM frames in b reset; b holds
// whole frames.
func clientResets(b []byte) []uint32 {
	var ids []uint32
	for len(b) >= 9 {
		n := 9 + (int(b[0])<<16 | int(b[1])<<8 | int(b[2]))
		if b[3] == 0x3 { // RST_STREAM
			ids = append(ids, (uint32(b[5])<<24|uint32(b[6])<<16|uint32(b[7])<<8|uint32(b[8]))&(1<<31-1))
		}
		if n > len(b) {
			break
		}
		b = b[n:]
	}
	return ids
}

// h2FrameWalk finds frame headers in a direction fed in any split.
type h2FrameWalk struct {
	hdr  [9]byte
	have int // bytes of hdr filled
	skip int // payload bytes of the current frame still to come
}

func (w *h2FrameWalk) walk(b []byte, frame func(typ, flags byte, stream uint32)) {
	for len(b) > 0 {
		if w.skip > 0 {
			n := min(w.skip, len(b))
			w.skip -= n
			b = b[n:]
			continue
		}
		n := copy(w.hdr[w.have:], b)
		w.have += n
		b = b[n:]
		if w.have < len(w.hdr) {
			return
		}
		w.have = 0
		h := w.hdr
		w.skip = int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		frame(h[3], h[4], (uint32(h[5])<<24|uint32(h[6])<<16|uint32(h[7])<<8|uint32(h[8]))&(1<<31-1))
	}
}
