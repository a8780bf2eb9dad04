package http2_test

import (
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"testing"

	"github.com/retrace-dev/retrace/wire/http2"
)

// tapListener keeps both directions of every connection it accepts.
type tapListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*tapConn
}

func listenTap(t testing.TB) *tapListener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &tapListener{Listener: l}
}

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &tapConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, tc)
	l.mu.Unlock()
	return tc, nil
}

// taps returns the connections accepted so far.
func (l *tapListener) taps() []*tapConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*tapConn(nil), l.conns...)
}

// tapConn is the server's end of a connection: what it reads is the
// client's bytes, what it writes the server's.
type tapConn struct {
	net.Conn
	mu             sync.Mutex
	client, server []byte
	log            []chunk // both directions in the order the server read and wrote them
}

type chunk struct {
	from http2.Side
	b    []byte
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.client = append(c.client, p[:n]...)
	if n > 0 {
		c.log = append(c.log, chunk{http2.Client, append([]byte(nil), p[:n]...)})
	}
	c.mu.Unlock()
	return n, err
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.server = append(c.server, p...) // before the peer can answer it
	c.log = append(c.log, chunk{http2.Server, append([]byte(nil), p...)})
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *tapConn) bytes() (client, server []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.client...), append([]byte(nil), c.server...)
}

// feedSplit feeds both directions to a new Conn in pieces of random sizes
// (1 byte up to maxPiece), alternating between directions at random, and
// returns every exchange.
func feedSplit(t testing.TB, client, server []byte, rng *rand.Rand, maxPiece int) []*http2.Exchange {
	t.Helper()
	c := http2.NewConn(http2.Limits{})
	var out []*http2.Exchange
	for len(client) > 0 || len(server) > 0 {
		side := rng.IntN(2)
		if len(client) == 0 {
			side = 1
		} else if len(server) == 0 {
			side = 0
		}
		if side == 0 {
			n := min(len(client), 1+rng.IntN(maxPiece))
			if err := c.Client(client[:n]); err != nil {
				t.Fatal(err)
			}
			client = client[n:]
		} else {
			n := min(len(server), 1+rng.IntN(maxPiece))
			if err := c.Server(server[:n]); err != nil {
				t.Fatal(err)
			}
			server = server[n:]
		}
		out = append(out, c.Exchanges()...)
	}
	return append(out, c.Close("connection ended")...)
}

func sortByStream(xs []*http2.Exchange) {
	sort.Slice(xs, func(i, j int) bool { return xs[i].StreamID < xs[j].StreamID })
}

func (c *tapConn) chunks() []chunk {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chunk(nil), c.log...)
}

// feedLog feeds a connection's chunks in the order they happened, each cut
// in pieces of random sizes (1 byte up to maxPiece), and returns every
// exchange.
func feedLog(t testing.TB, log []chunk, rng *rand.Rand, maxPiece int) []*http2.Exchange {
	t.Helper()
	c := http2.NewConn(http2.Limits{})
	var out []*http2.Exchange
	for _, ch := range log {
		for b := ch.b; len(b) > 0; {
			n := min(len(b), 1+rng.IntN(maxPiece))
			var err error
			if ch.from == http2.Client {
				err = c.Client(b[:n])
			} else {
				err = c.Server(b[:n])
			}
			if err != nil {
				t.Fatal(err)
			}
			b = b[n:]
			out = append(out, c.Exchanges()...)
		}
	}
	return append(out, c.Close("connection ended")...)
}
