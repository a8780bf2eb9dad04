package capture

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Headers is a HEADERS frame of fields (name, value pairs), encoded
// with enc (the direction's HPACK state).
func h2Headers(t *testing.T, enc *hpack.Encoder, hb *bytes.Buffer, id uint32, end bool, fields ...string) []byte {
	t.Helper()
	hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}))
	}
	var out bytes.Buffer
	require.NoError(t, http2.NewFramer(&out, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: end}))
	return out.Bytes()
}

// h2Data is a DATA frame.
func h2Data(t *testing.T, id uint32, end bool, p string) []byte {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, http2.NewFramer(&out, nil).WriteData(id, end, []byte(p)))
	return out.Bytes()
}

// TestH2StreamsRecorded drives the Recorder's StreamRecorder side as the
// agent does: a stream is one session in the recorded form, with its W3C
// trace id; then bytes that are no HTTP/2 lose the connection
// (h2_lost, the stream in progress dropped as incomplete), and later
// reports of it do nothing (no lock is left held).
func TestH2StreamsRecorded(t *testing.T) {
	r, out := newTestRecorder(t, 1, -1)
	var cb, sb bytes.Buffer
	cenc, senc := hpack.NewEncoder(&cb), hpack.NewEncoder(&sb)
	c := inConn

	tid := r.StartStream(c, 1)
	require.NotEmpty(t, tid)
	r.H2Read(c, append([]byte(http2.ClientPreface), h2Headers(t, cenc, &cb, 1, false, ":method", "POST", ":path", "/a", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")...))
	r.H2Read(c, h2Data(t, 1, true, "ping"))
	r.H2Write(c, append(h2Headers(t, senc, &sb, 1, false, ":status", "200"), h2Data(t, 1, true, "pong")...))
	settle(t, r)
	s := out.byID(tid)
	require.NotNil(t, s)
	require.Equal(t, "http2", s.Inbound.Proto)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.Trace)
	require.Equal(t, ":method: POST\r\n:path: /a\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\nDATA 4\r\nping", string(s.Inbound.Request))
	require.Equal(t, ":status: 200\r\n\r\nPACE 4:4\r\nDATA 4\r\npong", string(s.Inbound.Response))

	// a stream in progress, then garbage
	require.NotEmpty(t, r.StartStream(c, 3))
	r.H2Read(c, h2Headers(t, cenc, &cb, 3, true, ":method", "GET", ":path", "/b"))
	r.H2Write(c, []byte{0, 0, 4, 0xff, 0, 0, 0, 0})                 // a frame header cut short is fine…
	r.H2Read(c, []byte("\x00\x00\x01\x01\x04\x00\x00\x00\x05\xff")) // …a header block that is no HPACK is not
	require.Equal(t, int64(1), r.Stats().H2Lost)
	require.Zero(t, r.Stats().Active)
	require.Equal(t, int64(1), r.Stats().Incomplete)
	r.H2Read(c, h2Data(t, 5, true, "x")) // ignored, not blocked
	require.Empty(t, r.StartStream(c, 7), "a lost connection starts no session")
	r.Closed(c)
	settle(t, r)
	out.mu.Lock()
	defer out.mu.Unlock()
	require.Len(t, out.ss, 1)
}
