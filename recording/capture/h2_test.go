package capture

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xhttp2 "golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
)

// h2Peer writes one side's frames, HPACK-encoded with its own table.
type h2Peer struct {
	buf bytes.Buffer
	fr  *xhttp2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
}

func newH2Peer(client bool) *h2Peer {
	p := &h2Peer{}
	if client {
		p.buf.WriteString(http2.ClientPreface)
	}
	p.fr = xhttp2.NewFramer(&p.buf, nil)
	p.enc = hpack.NewEncoder(&p.hb)
	_ = p.fr.WriteSettings()
	return p
}

func (p *h2Peer) headers(id uint32, end bool, kv ...string) {
	p.hb.Reset()
	for i := 0; i < len(kv); i += 2 {
		_ = p.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	_ = p.fr.WriteHeaders(xhttp2.HeadersFrameParam{StreamID: id, BlockFragment: p.hb.Bytes(), EndHeaders: true, EndStream: end})
}

// take returns what was written since the last take.
func (p *h2Peer) take() []byte {
	b := bytes.Clone(p.buf.Bytes())
	p.buf.Reset()
	return b
}

// feed reports b to r as written (client) or read (server), in pieces of
// every size from 1 up, so frames are split anywhere.
func feed(r *Recorder, c *hook.ConnInfo, client bool, b []byte) {
	for n := 1; len(b) > 0; n++ {
		k := min(n, len(b))
		if client {
			r.OutboundWrite(c, "", b[:k])
		} else {
			r.OutboundRead(c, b[:k])
		}
		b = b[k:]
	}
}

func grpcReq(path, tid string) []string {
	kv := []string{":method", "POST", ":scheme", "http", ":path", path, ":authority", "inventory:50051",
		"content-type", "application/grpc", "te", "trailers"}
	if tid != "" {
		kv = append(kv, "retrace-trace-id", tid, "retrace-other", "x")
	}
	return kv
}

// TestH2StreamsFiledByTrace: streams of two traces and of none, interleaved
// on one connection and fed in pieces of every size, each become one call
// in the session of the trace its headers carried (the field left out),
// the untraced one in a background session; a stream the client reset
// and one a GOAWAY cut say so in their note; connection-level frames are
// no call.
func TestH2StreamsFiledByTrace(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	h2c := &hook.ConnInfo{ID: 9, Local: "127.0.0.1:5009", Remote: "127.0.0.1:50051"}
	cl, sv := newH2Peer(true), newH2Peer(false)
	msg := func(s string) []byte { return grpc.Append(nil, grpc.Message{Data: []byte(s)}) }
	var a, b string
	a = request(t, r, inConn, trace.RequestHead{}, func(ta string) {
		b = request(t, r, inConn2(), trace.RequestHead{}, func(tb string) {
			cl.headers(1, false, grpcReq("/inv.Stock/Get", ta)...)
			cl.headers(3, false, grpcReq("/inv.Stock/Get", tb)...)
			_ = cl.fr.WriteData(3, true, msg("req-b"))
			_ = cl.fr.WriteData(1, true, msg("req-a"))
			cl.headers(5, true, grpcReq("/inv.Stock/Watch", ta)...)
			cl.headers(7, true, grpcReq("/grpc.health.v1.Health/Check", "")...)
			_ = cl.fr.WritePing(false, [8]byte{1})
			feed(r, h2c, true, cl.take())
			_ = sv.fr.WriteSettingsAck()
			sv.headers(3, false, ":status", "200", "content-type", "application/grpc")
			sv.headers(1, false, ":status", "200", "content-type", "application/grpc")
			_ = sv.fr.WriteData(1, false, msg("resp-a"))
			_ = sv.fr.WriteData(3, false, msg("resp-b"))
			sv.headers(1, true, "grpc-status", "0")
			sv.headers(3, true, "grpc-status", "5", "grpc-message", "no b")
			sv.headers(7, true, ":status", "200", "content-type", "application/grpc", "grpc-status", "0")
			sv.headers(5, false, ":status", "200", "content-type", "application/grpc")
			feed(r, h2c, false, sv.take())
			_ = cl.fr.WriteRSTStream(5, xhttp2.ErrCodeCancel)
			feed(r, h2c, true, cl.take())
			a = ta
		})
	})
	r.Closed(h2c)
	require.NoError(t, r.Flush(t.Context()))

	calls := func(id string) []recording.Call {
		s := out.byID(id)
		require.NotNil(t, s, id)
		return s.Calls
	}
	ca, cb := calls(a), calls(b)
	require.Len(t, ca, 2, "trace a: Get and Watch")
	require.Len(t, cb, 1, "trace b: Get")
	half := func(b []byte) http2.Message {
		m, _, err := http2.ParseMessage(b)
		require.NoError(t, err, "%q", b)
		return m
	}
	for _, c := range append(ca, cb...) {
		assert.Equal(t, "grpc", c.Proto)
		assert.NotContains(t, string(c.Request), "retrace-", "no in-band field recorded")
	}
	get := func(c recording.Call, want string, status string) {
		req, resp := half(c.Request), half(c.Response)
		p, _ := http2.Get(req.Header, ":path")
		assert.Equal(t, "/inv.Stock/Get", p)
		ms, _, err := grpc.Split(req.Data, 0)
		require.NoError(t, err)
		require.Len(t, ms, 1)
		assert.Equal(t, "req-"+want, string(ms[0].Data))
		ms, _, _ = grpc.Split(resp.Data, 0)
		require.Len(t, ms, 1)
		assert.Equal(t, "resp-"+want, string(ms[0].Data))
		st, _ := http2.Get(resp.Trailer, "grpc-status")
		assert.Equal(t, status, st)
		assert.Empty(t, c.Note)
	}
	get(ca[0], "a", "0")
	get(cb[0], "b", "5")
	assert.Equal(t, "stream reset by the client: CANCEL", ca[1].Note)
	var bg []recording.Call
	out.mu.Lock()
	for _, s := range out.ss {
		if s.Background {
			bg = append(bg, s.Calls...)
		}
	}
	out.mu.Unlock()
	require.Len(t, bg, 1, "the untraced stream, and nothing of the connection's own frames")
	assert.Contains(t, string(bg[0].Request), ":path: /grpc.health.v1.Health/Check")
	assert.Contains(t, string(bg[0].Response), "grpc-status: 0")
}

func inConn2() *hook.ConnInfo {
	return &hook.ConnInfo{ID: 11, Inbound: true, Local: "127.0.0.1:8080", Remote: "127.0.0.1:5011"}
}

// TestH2CutsAndTruncates: a stream's halves are cut to the payload cap in
// the recorded form (still readable, marked truncated); streams a GOAWAY
// drops and those the connection's close leaves open say so.
func TestH2CutsAndTruncates(t *testing.T) {
	r, out := newTestRecorder(t, 1, 300)
	h2c := &hook.ConnInfo{ID: 9, Local: "127.0.0.1:5009", Remote: "127.0.0.1:50051", Host: "inventory:50051"}
	cl, sv := newH2Peer(true), newH2Peer(false)
	big := strings.Repeat("x", 1000)
	tid := request(t, r, inConn, trace.RequestHead{}, func(tid string) {
		kv := []string{":method", "POST", ":scheme", "https", ":path", "/upload", ":authority", "api", "retrace-trace-id", tid}
		cl.headers(1, false, kv...)
		_ = cl.fr.WriteData(1, true, []byte(big))
		cl.headers(3, true, kv...)
		cl.headers(5, true, kv...)
		feed(r, h2c, true, cl.take())
		sv.headers(1, false, ":status", "200")
		_ = sv.fr.WriteData(1, false, []byte(big[:400]))
		_ = sv.fr.WriteData(1, true, []byte(big[:400]))
		_ = sv.fr.WriteGoAway(3, xhttp2.ErrCodeNo, nil)
		feed(r, h2c, false, sv.take())
		r.Closed(h2c)
	})
	require.NoError(t, r.Flush(t.Context()))
	s := out.byID(tid)
	require.NotNil(t, s)
	require.Len(t, s.Calls, 3)
	up := s.Calls[0]
	assert.Equal(t, "http2", up.Proto)
	assert.Equal(t, "inventory:50051", up.Host)
	assert.True(t, up.RequestTruncated)
	assert.True(t, up.ResponseTruncated)
	assert.LessOrEqual(t, len(up.Request), 300)
	assert.LessOrEqual(t, len(up.Response), 300)
	for _, b := range [][]byte{up.Request, up.Response} {
		m, pace, err := http2.ParseMessage(b)
		require.NoError(t, err, "a cut half stays in the recorded form: %q", b)
		assert.True(t, bytes.Count(m.Data, []byte("x")) == len(m.Data))
		for _, p := range pace {
			assert.LessOrEqual(t, p.Response, len(m.Data), "pace within the data kept")
		}
	}
	assert.Contains(t, s.Calls[2].Note, "GOAWAY from the server with last stream 3")
	assert.Contains(t, s.Calls[1].Note, "the connection closed")
}

// FuzzH2Capture feeds a connection that starts with the preface any
// bytes, both ways, in any split: the Recorder never panics, and every
// call it files holds halves in the recorded form and no retrace-* field.
func FuzzH2Capture(f *testing.F) {
	cl, sv := newH2Peer(true), newH2Peer(false)
	cl.headers(1, false, grpcReq("/a", "t1")...)
	_ = cl.fr.WriteData(1, true, []byte("req"))
	sv.headers(1, false, ":status", "200")
	_ = sv.fr.WriteData(1, true, []byte("resp"))
	f.Add(cl.take()[len(http2.ClientPreface):], sv.take(), 5)
	f.Add([]byte{0, 0, 0, 9, 0, 0, 0, 0, 1}, []byte{0, 0, 8, 7, 0, 0, 0, 0, 0}, 3)
	f.Fuzz(func(t *testing.T, client, server []byte, cut int) {
		r, out := newTestRecorder(t, 1, 512)
		c := &hook.ConnInfo{ID: 21, Local: "127.0.0.1:5021", Remote: "127.0.0.1:50051"}
		cut = min(max(cut, 0), len(client), len(server))
		request(t, r, inConn, trace.RequestHead{}, func(tid string) {
			r.OutboundWrite(c, "", []byte(http2.ClientPreface))
			r.OutboundWrite(c, "", client[:cut])
			r.OutboundRead(c, server[:cut])
			r.OutboundWrite(c, "", client[cut:])
			r.OutboundRead(c, server[cut:])
		})
		r.Closed(c)
		require.NoError(t, r.Flush(t.Context()))
		out.mu.Lock()
		defer out.mu.Unlock()
		for _, s := range out.ss {
			for _, call := range s.Calls {
				if call.RequestTruncated || call.ResponseTruncated {
					continue
				}
				for _, half := range [][]byte{call.Request, call.Response} {
					if _, _, err := http2.ParseMessage(half); err != nil {
						t.Fatalf("%v: %q", err, half)
					}
				}
				m, _, _ := http2.ParseMessage(call.Request)
				for _, f := range append(m.Header, m.Trailer...) {
					if strings.HasPrefix(f.Name, "retrace-") {
						t.Fatalf("a retrace-* field recorded: %q", call.Request)
					}
				}
			}
		}
	})
}
