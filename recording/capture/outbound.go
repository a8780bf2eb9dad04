package capture

import (
	"bytes"
	"sync"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// maxEarly bounds the response bytes an HTTP connection keeps while waiting
// for the write they answer to be reported.
const maxEarly = 64 << 10

// outConn is what the Recorder knows of one dialled connection.
type outConn struct {
	id  uint64
	dst string

	mu      sync.Mutex // guards what follows and the payloads of its calls
	proto   string     // "" until the first bytes tell
	wrote   bool       // a write has been reported
	cur     *call      // the call that reads belong to
	early   []byte     // HTTP: response bytes that came before their request was reported
	owned   bool       // a session has taken the connection's set-up calls
	pending []*call    // set-up calls waiting for the connection's first session
	authed  bool       // MySQL: the handshake response has been written
	closed  bool
}

// call is one downstream exchange in progress or done.
type call struct {
	oc         *outConn
	tid        string
	setup      bool
	keep       bool // bytes are stored: the call belongs (or may belong) to a session
	start, end int64
	req, resp  payload
	framer     respFramer // HTTP: where the response ends
}

// snapshot returns the call as recorded so far, start relative to base.
func (c *call) snapshot(base int64) recording.Call {
	c.oc.mu.Lock()
	defer c.oc.mu.Unlock()
	return recording.Call{Proto: c.oc.proto, Dst: c.oc.dst, Setup: c.setup, Conn: int64(c.oc.id),
		Request: c.req.view(), Response: c.resp.view(), StartNs: c.start - base, DurNs: c.end - c.start,
		RequestTruncated: c.req.truncated, ResponseTruncated: c.resp.truncated}
}

func (r *Recorder) outConn(c hook.ConnInfo) *outConn {
	return r.outConns.getOrPut(c.ID, func() *outConn { return &outConn{id: c.ID, dst: c.Remote} })
}

// OutboundWrite adds request bytes to the connection's current call, or
// starts the next call: after the current one has had answers, or when the
// bytes are charged to another trace.
func (r *Recorder) OutboundWrite(c hook.ConnInfo, tid string, p []byte) {
	if len(p) == 0 {
		return
	}
	oc := r.outConn(c)
	now := r.now()
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.proto == "" {
		oc.proto = detectClient(p)
	}
	oc.wrote = true
	cur := oc.cur
	// The same call goes on while nothing has answered it yet, or while
	// an HTTP request that got "100 Continue" sends its body.
	if cur != nil && cur.tid == tid && (cur.resp.n == 0 || oc.proto == protoHTTP && cur.framer.awaitingFinal()) {
		if cur.keep {
			cur.req.add(p, r.max)
		}
		cur.end = now
		return
	}
	if tid == "" && oc.proto == protoHTTP && cur != nil && !cur.keep {
		// an HTTP exchange of no sampled request after another: followed
		// for its framing only, in the same (unreferenced) call value
		*cur = call{oc: oc, start: now, end: now, framer: respFramer{head: cur.framer.head[:0]}}
	} else {
		cur = &call{oc: oc, tid: tid, start: now, end: now}
	}
	oc.cur = cur
	switch oc.proto {
	case protoRedis:
		cur.setup = isSetupRedis(p)
	case protoMySQL:
		cur.setup = !oc.authed || isSetupMySQL(p)
		oc.authed = true
	case protoHTTP:
		cur.framer.noBody = bytes.HasPrefix(p, []byte("HEAD "))
	}
	r.place(oc, cur)
	if cur.keep {
		cur.req.add(p, r.max)
	}
	if len(oc.early) > 0 {
		if oc.proto == protoHTTP {
			cur.resp.add(oc.early, r.maxFor(cur))
			cur.framer.feed(oc.early)
		}
		oc.early = oc.early[:0]
	}
}

func (r *Recorder) maxFor(c *call) int {
	if !c.keep {
		return 0
	}
	return r.max
}

// place decides where a new call goes (called with oc.mu held): set-up
// calls stay with the connection until its first session takes them; other
// calls go to their trace's session, taking the connection's set-up calls
// with them the first time.
func (r *Recorder) place(oc *outConn, c *call) {
	if c.tid != "" {
		if r.attach(c.tid, append(oc.pending, c)...) {
			c.keep = true
			if len(oc.pending) > 0 || c.setup {
				oc.owned, oc.pending = true, nil
			}
			return
		}
	}
	if c.setup && !oc.owned {
		c.keep = true
		oc.pending = append(oc.pending, c)
	}
	// otherwise: traffic of no sampled request, followed but not stored
}

// OutboundRead adds answer bytes to the connection's current call.
func (r *Recorder) OutboundRead(c hook.ConnInfo, p []byte) {
	if len(p) == 0 {
		return
	}
	oc, ok := r.outConns.get(c.ID)
	if !ok {
		if !isMySQLGreeting(p) && !bytes.HasPrefix(p, []byte("HTTP/1.")) {
			// bytes on a connection whose writes were never reported:
			// traffic of no sampled request.
			return
		}
		// a server that speaks first (MySQL), or the answer to the first
		// request of a new HTTP connection read before the write was
		// reported (net/http reads on another goroutine than it writes)
		oc = r.outConn(c)
	}
	now := r.now()
	oc.mu.Lock()
	defer oc.mu.Unlock()
	cur := oc.cur
	switch {
	case cur == nil && !oc.wrote:
		if len(oc.early) > 0 || !isMySQLGreeting(p) {
			if len(oc.early)+len(p) <= maxEarly {
				oc.early = append(oc.early, p...) // for the first request, if HTTP
			}
			return
		}
		// the server speaks first: a MySQL greeting is set-up traffic
		oc.proto = protoMySQL
		cur = &call{oc: oc, tid: trace.CurrentID(), setup: true, start: now}
		oc.cur = cur
		r.place(oc, cur)
	case cur == nil:
		return
	case oc.proto == protoHTTP:
		if cur.framer.done() {
			if len(oc.early)+len(p) <= maxEarly {
				oc.early = append(oc.early, p...)
			}
			return
		}
		cur.framer.feed(p)
	default:
		// Clients of these protocols read on the goroutine that wrote: an
		// answer read under another trace answers a write that was not
		// reported (no sampled request made it).
		if cur.tid != trace.CurrentID() {
			return
		}
	}
	cur.resp.add(p, r.maxFor(cur))
	cur.end = now
}
