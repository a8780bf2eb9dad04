package replaytest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http2"
)

// H2Recorder records the inbound HTTP/2 streams of a real server (gRPC or
// h2c) the way the agent records them (DESIGN.md 12): it wraps the
// server's listener, keeps both directions of every connection it
// accepts in the order the server read and wrote them, and reassembles
// each stream into one session (wire/http2.Conn) whose halves are in the
// recorded form. Serve the server on it; call Sessions once the calls are
// done.
type H2Recorder struct {
	net.Listener
	mu    sync.Mutex
	conns []*h2Tap
}

// NewH2Recorder wraps l.
func NewH2Recorder(l net.Listener) *H2Recorder { return &H2Recorder{Listener: l} }

// Accept implements net.Listener.
func (r *H2Recorder) Accept() (net.Conn, error) {
	c, err := r.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &h2Tap{Conn: c}
	r.mu.Lock()
	r.conns = append(r.conns, tc)
	r.mu.Unlock()
	return tc, nil
}

// h2Tap is the server's end of a connection.
type h2Tap struct {
	net.Conn
	mu  sync.Mutex
	log []h2Chunk
}

type h2Chunk struct {
	client bool
	b      []byte
}

func (c *h2Tap) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.log = append(c.log, h2Chunk{true, append([]byte(nil), p[:n]...)})
		c.mu.Unlock()
	}
	return n, err
}

func (c *h2Tap) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.log = append(c.log, h2Chunk{false, append([]byte(nil), p...)}) // before the peer can answer it
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Sessions returns one session per finished stream, in order of
// connection and stream. A session's id is the value of its request's
// idField metadata when it has one that is a valid trace id, else
// "h2-<conn>-<stream>". Streams that did not finish (the connection still
// open) are left out.
func (r *H2Recorder) Sessions(t testing.TB, idField string) []*recording.Session {
	t.Helper()
	r.mu.Lock()
	conns := append([]*h2Tap(nil), r.conns...)
	r.mu.Unlock()
	var out []*recording.Session
	at := time.Now().UTC()
	for ci, c := range conns {
		c.mu.Lock()
		log := append([]h2Chunk(nil), c.log...)
		c.mu.Unlock()
		hc := http2.NewConn(http2.Limits{})
		var xs []*http2.Exchange
		for _, ch := range log {
			var err error
			if ch.client {
				err = hc.Client(ch.b)
			} else {
				err = hc.Server(ch.b)
			}
			if err != nil {
				t.Fatalf("connection %d: %v", ci, err)
			}
			xs = append(xs, hc.Exchanges()...)
		}
		for _, x := range xs {
			if x.Unfinished != "" || x.Promised {
				continue
			}
			id := fmt.Sprintf("h2-%d-%d", ci, x.StreamID)
			if v, ok := http2.Get(x.Request.Header, idField); ok && trace.ValidID(v) {
				id = v
			}
			proto := http2.Name
			if ct, _ := http2.Get(x.Request.Header, "content-type"); strings.HasPrefix(ct, "application/grpc") {
				proto = http2.GRPCName
			}
			out = append(out, &recording.Session{V: 1, ID: id, App: "h2test", At: at, Inbound: recording.Inbound{
				Proto:    proto,
				Request:  http2.AppendMessage(nil, x.Request, nil),
				Response: http2.AppendMessage(nil, x.Response, x.Pace),
				DurNs:    int64(time.Millisecond),
			}})
		}
	}
	return out
}
