package hook

import (
	"bytes"
	"sync"

	"github.com/retrace-dev/retrace/trace"
)

// StreamRecorder is implemented by a Recorder that records the streams of
// inbound HTTP/2 connections (grpc-go servers, h2c with prior knowledge or
// by Upgrade, h2 over TLS), each as a session of its own. Without it, record
// mode counts such connections in ReadStats().H2Unrecorded and logs them
// once. The methods are called as the Recorder's are (fast, never blocking,
// slices valid during the call).
//
// The agent passes each connection's two directions whole: the client's as
// the application reads it (the preface first, every retrace-* field
// removed from its header blocks), the server's before it goes out (its
// first writes may come before the client's preface was read: they are
// passed once the first read shows the connection is HTTP/2). The Recorder
// reassembles the streams from them.
type StreamRecorder interface {
	// StartStream is called when the header block that opens stream id
	// (a request's headers) has been read, before those bytes are passed
	// to H2Read and before the application sees them. It returns the
	// trace id to bind to the stream's handler, or "" when the stream is
	// not sampled.
	StartStream(c *ConnInfo, stream uint32) (tid string)
	// H2Read reports bytes of the client's direction.
	H2Read(c *ConnInfo, p []byte)
	// H2Write reports bytes of the server's direction.
	H2Write(c *ConnInfo, p []byte)
	// H2Upgraded reports that the server switched the connection from
	// HTTP/1.1 to h2c (it wrote 101 Switching Protocols to an Upgrade:
	// h2c request): the request being served, of trace tid ("" when not
	// sampled), is stream 1, whose response comes as HTTP/2. It is called
	// before the 101 is reported with InboundWrite; the client's preface
	// and frames follow through H2Read.
	H2Upgraded(c *ConnInfo, tid string)
}

// h2Conns are the inbound connections followed as HTTP/2, by h2Key, for
// the hook on net/http's HTTP/2 server (h2serve.go), which knows a
// connection by its addresses.
var h2Conns sync.Map

func h2Key(remote, local string) string { return remote + " " + local }

// h2Upgrade makes an accepted connection HTTP/2 from its next read: the
// server has just written 101 Switching Protocols to h2c. Stream 1 is the
// request being served, whose trace (bound by the HTTP/1 path) its
// handler keeps; the binding is released when stream 1 ends.
func (e *engine) h2Upgrade(st *connState) {
	if h := st.h2.Load(); h != nil && h != h2Not {
		return
	}
	h := newH2In(false)
	h.upgraded = true
	t := st.cur.Load()
	if t == nil {
		t = &trace.Trace{}
	}
	h.traces[1] = t
	h.bindings[1] = st.unbind
	st.h2.Store(h)
	if e.cfg.Mode == Record {
		e.recordCall("h2-upgraded", func() { e.streamRec.H2Upgraded(&st.info, t.ID) })
	}
}

// switchesToH2C reports whether b starts with a whole HTTP/1.1 101
// response head that switches to h2c.
func switchesToH2C(b []byte) bool {
	const status = "HTTP/1.1 101"
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if len(b) < len(status) || string(b[:len(status)]) != status || end < 0 ||
		bytes.Count(b[:end], []byte("\n")) != bytes.Count(b[:end], []byte("\r\n")) {
		return false // (a line ended by a bare LF: no server writes that)
	}
	for _, line := range bytes.Split(b[:end], []byte("\r\n"))[1:] {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(name), []byte("upgrade")) {
			continue
		}
		for _, tok := range bytes.Split(value, []byte(",")) {
			if bytes.EqualFold(bytes.TrimSpace(tok), []byte("h2c")) {
				return true
			}
		}
	}
	return false
}
