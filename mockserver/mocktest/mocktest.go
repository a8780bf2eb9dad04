// Package mocktest helps tests of the mock server and of code that talks to
// it: a dialer that frames writes as the replay agent does (usable as a
// go-redis Dialer, a go-sql-driver/mysql dial function or an http.Transport
// DialContext), goroutine-bound trace ids for pooled clients shared by many
// traces, a Recorder that captures real traffic into recording.Sessions, and
// a started Server with cleanup.
package mocktest

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/petermattis/goid"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

var bound sync.Map // goroutine id → trace id

// Bind binds trace id tid to the calling goroutine, as the agent binds a
// replayed request's trace to the goroutine serving it, until the returned
// function is called.
func Bind(tid string) (undo func()) {
	g := goid.Get()
	bound.Store(g, tid)
	return func() { bound.Delete(g) }
}

// CurrentTID returns the trace id bound to the calling goroutine, or "".
func CurrentTID() string {
	if v, ok := bound.Load(goid.Get()); ok {
		return v.(string)
	}
	return ""
}

// Dialer dials the mock server and frames every write with a trace id and
// the original destination (DESIGN.md 3.3), preamble included.
type Dialer struct {
	// Mock is the address of the mock server.
	Mock string
	// TID is the trace of every write; "" means the trace bound to the
	// writing goroutine (Bind), read at each write.
	TID string
	// Dst is the original destination; "" means the address being dialled.
	Dst string
}

// DialContext dials the mock server on behalf of addr.
func (d *Dialer) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", d.Mock)
	if err != nil {
		return nil, err
	}
	dst := d.Dst
	if dst == "" {
		dst = addr
	}
	c := &Conn{Conn: nc, Dst: dst, tid: d.TID}
	if _, err := nc.Write(trace.AppendFrameHeader(nil, c.trace(), dst, 0)); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Conn is a connection to the mock server whose writes are framed.
type Conn struct {
	net.Conn
	Dst string
	tid string
	mu  sync.Mutex
	buf []byte
}

func (c *Conn) trace() string {
	if c.tid != "" {
		return c.tid
	}
	return CurrentTID()
}

// Write sends p as one frame.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = trace.AppendFrame(c.buf[:0], c.trace(), c.Dst, p)
	if _, err := c.Conn.Write(c.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// NewServer starts a mock server on loopback ports chosen by the system,
// loaded with sessions, and closes it when the test ends. Zero fields of cfg
// get test-friendly values (ephemeral Listen and Admin addresses).
func NewServer(t testing.TB, cfg mockserver.Config, sessions ...*recording.Session) *mockserver.Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Admin == "" {
		cfg.Admin = "127.0.0.1:0"
	}
	srv, err := mockserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Load(context.Background(), mockserver.SessionsSource(sessions...)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}
