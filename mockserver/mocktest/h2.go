package mocktest

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire/http2"
)

// H2Listener keeps, in order, what a real HTTP/2 server (grpc-go, net/http)
// reads and writes on each connection it accepts, and turns it into
// recorded sessions: the test stand-in for recording an HTTP/2 downstream,
// each stream reassembled by wire/http2.Conn.
type H2Listener struct {
	net.Listener
	mu  sync.Mutex
	log [][]h2Chunk
}

type h2Chunk struct {
	client bool
	b      []byte
}

type h2Conn struct {
	net.Conn
	l *H2Listener
	i int
}

func (l *H2Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, nil)
	return &h2Conn{Conn: c, l: l, i: len(l.log) - 1}, nil
}

func (c *h2Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.l.mu.Lock()
		c.l.log[c.i] = append(c.l.log[c.i], h2Chunk{true, bytes.Clone(p[:n])})
		c.l.mu.Unlock()
	}
	return n, err
}

func (c *h2Conn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.log[c.i] = append(c.l.log[c.i], h2Chunk{false, bytes.Clone(p)})
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// NewH2Listener wraps l; serve the real server on the result.
func NewH2Listener(l net.Listener) *H2Listener { return &H2Listener{Listener: l} }

// Sessions turns the tapped exchanges into one recorded session per
// trace (the "x-trace" header, or traceOf), in stream order, and one
// background session of the streams of no trace. Each call is a stream
// in the recorded form of wire/http2, one after the other in time.
func (l *H2Listener) Sessions(t testing.TB, dst string, traceOf func(*http2.Exchange) string) []*recording.Session {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	byTrace := map[string]*recording.Session{}
	var order []string
	for ci, log := range l.log {
		c := http2.NewConn(http2.Limits{})
		for _, ch := range log {
			var err error
			if ch.client {
				err = c.Client(ch.b)
			} else {
				err = c.Server(ch.b)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, x := range c.Close("end") {
			if x.Unfinished != "" {
				continue
			}
			tid := traceOf(x)
			s := byTrace[tid]
			if s == nil {
				s = &recording.Session{V: 1, ID: tid, Background: tid == ""}
				if tid == "" {
					s.ID = "background"
				}
				byTrace[tid] = s
				order = append(order, tid)
			}
			proto := http2.Name
			if x.IsGRPC() {
				proto = http2.GRPCName
			}
			n := int64(len(s.Calls))
			s.Calls = append(s.Calls, recording.Call{Seq: len(s.Calls), Proto: proto, Dst: dst, Conn: int64(ci + 1),
				StartNs: 1000 * n, DurNs: 500, Request: http2.AppendMessage(nil, x.Request, nil), Response: http2.AppendMessage(nil, x.Response, x.Pace)})
		}
	}
	out := make([]*recording.Session, 0, len(order))
	for _, tid := range order {
		out = append(out, byTrace[tid])
	}
	return out
}
