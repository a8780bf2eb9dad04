package hook

import (
	"errors"
	"sync/atomic"

	"github.com/retrace-dev/retrace/wire/http2/inband"
)

// A dialled connection whose first write starts with the HTTP/2 client
// preface (grpc-go, net/http's HTTP/2 client over TLS or h2c) carries the
// streams of many traces, each with its trace in-band in
// retrace-trace-id (added on the caller's goroutine: grpc.go,
// transport.go). In record mode every write goes through an
// inband.Rewriter, which removes the retrace-* fields from the client's
// header blocks and encodes each block again, so that the real server's
// HPACK decoder stays in step with what it is sent, and the bytes are
// reported as the client wrote them, the field in them: capture reads
// each stream's trace from it and records the block without it. (Replay
// mode sends the field to the mock, which reads it; a connection replay
// mode lets through to a real destination, RETRACE_PASSTHROUGH or
// RETRACE_BAFFLE, carries it there unrewritten, as an in-process test
// runner relies on.)
//
// Failing open: an error of the Rewriter (bytes that are not HTTP/2, a
// header block it cannot decode) or a panic leaves the connection's
// bytes from there on as the client wrote them: the frames rewritten
// before go out, then everything else unchanged (inband.Unrewritten), so
// no byte is lost or reordered. The server's HPACK table then lags the
// client's by the entries the removed fields took, so a later block may
// not decode there: nothing would have made it decode, and the
// connection fails as it would on any corrupt block. From then on the
// callers add no field in-band (h2Broken), so no new connection carries
// one to a real server unrewritten (engine.h2Broken).
type h2Out struct {
	rw *inband.Rewriter // nil once it failed: bytes pass unchanged
	// peer follows the server's frames for the table size it allows
	// the Rewriter's encoder (read side, one reader at a time); limit is
	// the last it found plus one, 0 for none, taken by the writer.
	peer  inband.PeerSettings
	limit atomic.Uint64
}

// h2OutNot marks a dialled connection that is not HTTP/2 (decided on its
// first write).
var h2OutNot = &h2Out{}

// h2RewritePanic makes the Rewriter panic (tests of failing open).
var h2RewritePanic atomic.Bool

// h2OutDecide decides on the first write of a dialled connection in
// record mode whether it is HTTP/2. Called with st.wmu held.
func (e *engine) h2OutDecide(st *connState, b []byte) *h2Out {
	const pri = "PRI "
	if len(b) < len(pri) || string(b[:len(pri)]) != pri || st.wr.hasCur || st.wr.holding {
		st.h2w.Store(h2OutNot)
		return h2OutNot
	}
	h := &h2Out{rw: inband.NewRewriter(true)}
	st.h2w.Store(h)
	counters.h2out.Add(1)
	return h
}

// h2OutWrite writes b on an outbound HTTP/2 connection (see h2Out).
// Called with st.wmu held; returns the application's byte count.
func (e *engine) h2OutWrite(h *h2Out, st *connState, c *netConn, b []byte) (int, error) {
	if len(b) > 0 { // record mode only (outboundWriteSplit)
		e.recordOutboundWrite(st, "", b)
	}
	out := e.h2Rewrite(h, st, b)
	if len(out) == 0 {
		// Everything was the start of a frame: held until it is whole. A
		// write of nothing still fails on a closed connection.
		if len(b) > 0 {
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
	if n, err := e.rawWrite(st, c, out); err != nil {
		return min(n, len(b)), err
	}
	return len(b), nil
}

// h2Rewrite returns the bytes to send for b: rewritten, or after a
// failure as they came.
func (e *engine) h2Rewrite(h *h2Out, st *connState, b []byte) (out []byte) {
	if h.rw == nil {
		return b
	}
	// What the Rewriter holds before this write (nil but for a frame
	// split over writes): after a panic its state is unknown, and these
	// bytes and b go as they came.
	held := h.rw.Unwritten()
	defer func() {
		if r := recover(); r != nil {
			e.recovered("h2-outbound-rewrite", r)
			h.rw = nil
			e.h2Broken.Store(true)
			counters.h2outFailed.Add(1)
			out = append(held, b...)
		}
	}()
	if h2RewritePanic.Load() {
		panic("forced by a test")
	}
	if v := h.limit.Swap(0); v != 0 {
		h.rw.SetPeerTableLimit(uint32(v - 1))
	}
	rewritten, _, err := h.rw.Write(b)
	if err == nil {
		return rewritten
	}
	rest := h.rw.Unwritten()
	h.rw = nil
	if errors.Is(err, inband.ErrNotHTTP2) {
		// "PRI " and then not the preface: another protocol, whose bytes
		// go as they are; nothing was rewritten
		return rest
	}
	e.h2Broken.Store(true)
	counters.h2outFailed.Add(1)
	e.reportOnce("h2-outbound-rewrite", "an outbound HTTP/2 connection could not be rewritten: its bytes go on unchanged, and calls carry their trace in-band no more",
		"conn", st.info.Remote, "err", err)
	return append(append([]byte(nil), rewritten...), rest...)
}

// h2OutRead follows the server's bytes just read for the header table
// size it allows the client's encoder.
func (e *engine) h2OutRead(h *h2Out, b []byte) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("h2-outbound-read", r)
		}
	}()
	if v, ok := h.peer.Feed(b); ok {
		h.limit.Store(uint64(v) + 1)
	}
}

// h2OutOf returns the HTTP/2 state of a dialled connection that is
// rewritten, nil for any other.
func (st *connState) h2OutOf() *h2Out {
	if h := st.h2w.Load(); h != nil && h != h2OutNot {
		return h
	}
	return nil
}
