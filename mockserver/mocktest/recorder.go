package mocktest

import (
	"context"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// Recorder captures the bytes real clients exchange with real servers and
// turns them into recorded sessions, one per trace id: the test stand-in for
// record mode. A call is one write (or run of writes) and everything read
// back before the next write; it belongs to the trace bound to the writing
// goroutine, or to Dialer's fixed trace. Set-up traffic without a trace goes
// to the first session.
type Recorder struct {
	start time.Time

	mu      sync.Mutex
	calls   map[string][]recording.Call
	order   []string
	orphans []recording.Call
	conns   int64
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), calls: map[string][]recording.Call{}}
}

// Dialer returns a dial function for a client of protocol proto ("http",
// "redis", "mysql", "raw") that connects to the real address and records
// the traffic, with the dialled address as destination. A non-empty tid
// fixes the trace of every call on its connections.
func (r *Recorder) Dialer(proto, tid string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.conns++
		id := r.conns
		r.mu.Unlock()
		return &capConn{Conn: nc, r: r, proto: proto, dst: addr, id: id, tid: tid,
			tap: protocols.All.For(proto).NewTap()}, nil
	}
}

// Sessions returns the recorded sessions in the order their traces first
// appeared, calls sorted by start and numbered.
func (r *Recorder) Sessions() []*recording.Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*recording.Session
	for i, tid := range r.order {
		calls := append([]recording.Call(nil), r.calls[tid]...)
		if i == 0 {
			calls = append(calls, r.orphans...)
		}
		sort.SliceStable(calls, func(a, b int) bool { return calls[a].StartNs < calls[b].StartNs })
		for j := range calls {
			calls[j].Seq = j
		}
		out = append(out, &recording.Session{V: recording.SchemaVersion, ID: tid, App: "mocktest", At: r.start,
			Inbound: recording.Inbound{Proto: "http"}, Calls: calls})
	}
	return out
}

func (r *Recorder) add(tid string, c recording.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tid == "" {
		if c.Setup {
			r.orphans = append(r.orphans, c)
		}
		return
	}
	if _, ok := r.calls[tid]; !ok {
		r.order = append(r.order, tid)
	}
	r.calls[tid] = append(r.calls[tid], c)
}

type capConn struct {
	net.Conn
	r          *Recorder
	proto, dst string
	id         int64
	tid        string
	// tap classifies the calls as record mode does (set-up, a body after
	// 100 Continue)
	tap wire.Tap

	mu      sync.Mutex
	cur     *recording.Call
	curTID  string
	started time.Time
	last    time.Time // the current call's last byte, written or read
	n       int       // calls finished on this connection
}

func (c *capConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	tid := c.traceNow()
	// A write after the answer starts the next call (a body sent after
	// 100 Continue still belongs to its request, the protocol says), and
	// so does a write of another trace (a statement closed without answer
	// by one request, then a query of the next on the same pooled
	// connection).
	begins := c.cur == nil || len(c.cur.Response) > 0 || c.curTID != tid
	f := c.tap.Write(p, tid, begins)
	if c.cur != nil && begins && !(f.Continue && c.curTID == tid) {
		c.finish()
	}
	if c.cur == nil {
		c.begin()
		c.cur.Setup = f.Setup
	}
	c.cur.Request = append(c.cur.Request, p...)
	c.last = time.Now()
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *capConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.cur == nil {
			c.begin()
			c.cur.Setup = c.n == 0 // the server speaks first: its greeting
		}
		c.tap.Read(p[:n])
		c.cur.Response = append(c.cur.Response, p[:n]...)
		c.last = time.Now()
		c.mu.Unlock()
	}
	return n, err
}

func (c *capConn) Close() error {
	c.mu.Lock()
	if c.cur != nil {
		c.finish()
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

func (c *capConn) traceNow() string {
	if c.tid != "" {
		return c.tid
	}
	return CurrentTID()
}

func (c *capConn) begin() {
	tid := c.traceNow()
	c.started = time.Now()
	c.last = c.started
	c.curTID = tid
	c.cur = &recording.Call{Proto: c.proto, Dst: c.dst, Conn: c.id, StartNs: int64(c.started.Sub(c.r.start))}
}

func (c *capConn) finish() {
	call := *c.cur
	call.DurNs = int64(c.last.Sub(c.started)) // as record mode: up to the last byte of the answer
	c.n++
	c.cur = nil
	c.r.add(c.curTID, call)
}
