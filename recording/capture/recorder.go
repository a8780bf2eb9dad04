package capture

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http1"
)

// DefaultMaxActive bounds the sessions in progress when Config.MaxActive is
// zero.
const DefaultMaxActive = 10000

// Config configures a Recorder.
type Config struct {
	// Pipeline receives finished sessions and decides sampling; the
	// Recorder closes it in Close. Required.
	Pipeline *recording.Pipeline
	// App is stored in every session. Empty stores none.
	App string
	// MaxActive bounds the sessions in progress (requests whose response
	// is not complete yet); a request sampled beyond it is not recorded and
	// counted in Stats.Overflow. Zero means DefaultMaxActive.
	MaxActive int
	// Logger receives a line at Close with the counters. Nil logs nothing.
	Logger *slog.Logger
}

// Stats are the Recorder's counters, with its pipeline's.
type Stats struct {
	recording.Stats
	Active     int64 `json:"active"`     // sessions in progress
	Overflow   int64 `json:"overflow"`   // sampled requests not recorded: MaxActive sessions in progress
	Incomplete int64 `json:"incomplete"` // sessions dropped: connection closed before any response byte
	// H2Lost counts inbound HTTP/2 connections that could not be followed
	// (bad framing or HPACK): their streams from then on are not recorded.
	H2Lost int64 `json:"h2_lost,omitempty"`
}

// Recorder implements hook.Recorder: it assembles sessions from the
// traffic the agent reports and submits them to a recording.Pipeline.
type Recorder struct {
	pipe      *recording.Pipeline
	app       string
	max       int // payload cap, negative for none
	maxActive int64
	log       *slog.Logger
	base      time.Time // monotonic origin of the *Ns fields

	// sessions are the sessions in progress by trace id. What the
	// Recorder knows of each connection is in its hook.ConnInfo.Data: an
	// *inbound or an *outConn.
	sessions sessionIndex
	bg       background // calls of no request (background.go)

	activeN, overflow, incomplete atomic.Int64
	// h2Failed counts inbound HTTP/2 connections that could not be
	// followed (h2in.go), logged once (h2Logged).
	h2Failed  atomic.Int64
	h2Logged  atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var (
	_ hook.Recorder       = (*Recorder)(nil)
	_ hook.PathUser       = (*Recorder)(nil)
	_ hook.RandomRecorder = (*Recorder)(nil)
)

// New returns a Recorder that submits to cfg.Pipeline.
func New(cfg Config) (*Recorder, error) {
	if cfg.Pipeline == nil {
		return nil, errors.New("capture: recorder needs a pipeline")
	}
	if cfg.MaxActive <= 0 {
		cfg.MaxActive = DefaultMaxActive
	}
	return &Recorder{
		pipe:      cfg.Pipeline,
		app:       cfg.App,
		max:       cfg.Pipeline.MaxPayload(),
		maxActive: int64(cfg.MaxActive),
		log:       cfg.Logger,
		base:      time.Now(),
	}, nil
}

// now is monotonic nanoseconds since the Recorder was made.
func (r *Recorder) now() int64 { return int64(time.Since(r.base)) }

// Stats returns the counters.
func (r *Recorder) Stats() Stats {
	return Stats{Stats: r.pipe.Stats(), Active: r.activeN.Load(), Overflow: r.overflow.Load(),
		Incomplete: r.incomplete.Load(), H2Lost: r.h2Failed.Load()}
}

// Flush writes every finished session to the store.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushBackground(r.now(), true)
	return r.pipe.Flush(ctx)
}

// Close drops the sessions still in progress (counted as Incomplete), then
// closes the pipeline: queued sessions are written and the store closed,
// bounded by ctx. Safe to call twice.
func (r *Recorder) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		for _, a := range r.sessions.drain() {
			if r.drop(a) {
				r.incomplete.Add(1)
			}
		}
		r.flushBackground(r.now(), true)
		r.closeErr = r.pipe.Close(ctx)
		if r.log != nil {
			st := r.Stats()
			level := slog.LevelInfo
			if st.Dropped > 0 || r.closeErr != nil {
				level = slog.LevelError // sessions were lost: say so at the default level
			}
			r.log.Log(context.Background(), level, "retrace: recorder closed", "seen", st.Seen, "sampled", st.Sampled,
				"recorded", st.Recorded, "dropped", st.Dropped, "buffer_full", st.BufferFull,
				"abandoned", st.Abandoned, "rejected", st.Rejected, "masked", st.Masked,
				"mask_skipped", st.MaskSkipped, "truncated", st.Truncated, "write_errors", st.WriteErrors,
				"overflow", st.Overflow, "incomplete", st.Incomplete, r.h2Attrs(), "err", r.closeErr)
		}
	})
	return r.closeErr
}

// payload is bytes kept up to a cap.
type payload struct {
	b         []byte
	n         int64 // bytes seen, kept or not
	truncated bool
}

func (p *payload) add(b []byte, limit int, ar *arena) {
	p.n += int64(len(b))
	if limit >= 0 && len(p.b)+len(b) > limit {
		b = b[:max(0, limit-len(p.b))]
		p.truncated = true
	}
	if len(b) > 0 {
		ar.add(p, b)
	}
}

// view returns the bytes kept so far; later adds never change them.
func (p *payload) view() []byte {
	if p.b == nil {
		return nil
	}
	return p.b[:len(p.b):len(p.b)]
}

// inbound is what the Recorder knows of one accepted connection: its
// sessions in progress, a list by active.next in request order (responses
// come in that order).
type inbound struct {
	mu    sync.Mutex // guards first and the next links of its sessions
	first *active
	// newest is the session last enqueued: the request being read, and
	// on a connection that does not pipeline the only one in progress.
	newest atomic.Pointer[active]
	// tls is what the connection's TLS handshake negotiated (it precedes
	// every request), nil for plain TCP.
	tls *hook.TLSInfo
	// h2 is the connection's HTTP/2 state (h2in.go), nil for HTTP/1.
	h2 atomic.Pointer[h2In]
}

// inboundOf returns the state of an accepted connection, made on first
// use; nil for a dialled one.
func inboundOf(c *hook.ConnInfo) *inbound {
	if ic, ok := c.Data.Load().(*inbound); ok {
		return ic
	}
	if !c.Inbound {
		return nil // a dialled connection: its Data is an *outConn
	}
	ic := &inbound{tls: c.TLS.Load()}
	if !c.Data.CompareAndSwap(nil, ic) {
		ic, _ = c.Data.Load().(*inbound) // another report made it first
	}
	return ic
}

// session returns the session of tid in progress on the connection, or
// nil. A request's reads and writes look their session up here, among the
// connection's few, rather than in the Recorder's index of all sessions,
// which other cores change with every request that starts or ends.
func (ic *inbound) session(tid string) *active {
	if a := ic.newest.Load(); a != nil && a.id == tid && !a.ended.Load() {
		return a
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	for a := ic.first; a != nil; a = a.next {
		if a.id == tid {
			return a
		}
	}
	return nil
}

// active is a session in progress.
type active struct {
	// The first 64 bytes (a 320-byte object starts on a cache line) hold
	// what every report to the session reads: its id and state, and the
	// lock and list a call attaches to.
	id string
	// ended is set, under mu, when the session is submitted or dropped;
	// lookups that keep a session found earlier (outConn.sess,
	// inbound.newest) read it without the lock.
	ended atomic.Bool
	mu    sync.Mutex // guards what follows, up to next
	// stream is the HTTP/2 stream of the session, 0 for HTTP/1 (in the
	// padding before calls)
	stream uint32
	calls  []*call

	arena  arena // the bytes of req and resp
	req    payload
	resp   payload
	framer http1.Response

	trace  string        // W3C trace-id of the request's traceparent, or ""
	random *trace.Random // what the request draws (RETRACE_RANDOM), or nil
	at     time.Time     // wall clock at the request's start
	start  int64         // Recorder.now at the request's start
	in     *inbound      // the connection the request came on
	// conn is the inbound connection (its Local and Remote, which never
	// change, go into the session): one word where the two strings took
	// four, so random and trace fit in six cache lines
	conn *hook.ConnInfo

	// next is the session of the next sampled request on the same
	// connection, pipelined behind this one (its head read before this
	// one's response began); guarded by in.mu.
	next *active
}

// answering reports whether the final response has begun: an interim
// "100 Continue" alone does not count, the request's body may still come
// (and requests pipelined behind it).
func (a *active) answering() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.resp.n > 0 && !a.framer.AwaitingFinal()
}

// responded reports whether any response byte has been reported.
func (a *active) responded() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.resp.n > 0
}

// UsesPath reports that StartRequest does not read the head's Path (see
// hook.PathUser): a session keeps the request's bytes.
func (r *Recorder) UsesPath() bool { return false }

// StartRequest samples the request and, when sampled, starts its session.
func (r *Recorder) StartRequest(c *hook.ConnInfo, head trace.RequestHead) string {
	if !r.pipe.Sample() {
		return ""
	}
	if r.activeN.Add(1) > r.maxActive {
		r.activeN.Add(-1)
		r.overflow.Add(1)
		return ""
	}
	ic := inboundOf(c)
	if ic == nil { // not an accepted connection
		r.activeN.Add(-1)
		return ""
	}
	// one reading of the clock for both: At + a call's StartNs must place
	// the call on the wall clock even if the goroutine is preempted here
	now := time.Now()
	a := &active{at: now, start: int64(now.Sub(r.base)), in: ic, conn: c}
	a.framer.NoBody = head.Method == "HEAD"
	// The session id is fresh for every request: the requests of one
	// distributed trace share its traceparent, which the session keeps as
	// a field of its own, and must not share (and overwrite) one id.
	a.trace = head.TraceParent
	for {
		a.id = trace.NewID()
		if r.sessions.putNew(a) {
			break
		}
	}
	for over := ic.enqueue(a); over != nil; over = over.next {
		r.end(over)
	}
	return a.id
}

// enqueue adds a to the sessions in progress on connection conn and
// returns those it ends, a list by next, or nil.
//
// A request read while the last one before it has not begun its final
// response was pipelined: it waits its turn behind it, as the agent's requests do
// (hook, serving.go), and both stay in progress. A request read once that
// response has begun is the next one the server serves — it reads the
// next request after answering — so the sessions before it are over even
// though the framing did not see their responses end (a body it could not
// follow).
func (ic *inbound) enqueue(a *active) (over *active) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.newest.Store(a)
	if ic.first == nil {
		ic.first = a
		return nil
	}
	last := ic.first
	for last.next != nil {
		last = last.next
	}
	if last.answering() {
		over, ic.first = ic.first, a
		return over
	}
	last.next = a
	return nil
}

// end ends a session whose response will not be reported any further:
// submitted when it has had response bytes, dropped as incomplete if not.
func (r *Recorder) end(a *active) {
	if a.responded() {
		r.finish(a)
	} else if r.drop(a) {
		r.incomplete.Add(1)
	}
}

// session returns the session of tid in progress, or nil.
func (r *Recorder) session(tid string) *active {
	if tid == "" {
		return nil
	}
	return r.sessions.get(tid)
}

// inboundSession returns the session of tid in progress on an accepted
// connection, or nil.
func inboundSession(c *hook.ConnInfo, tid string) *active {
	if ic, ok := c.Data.Load().(*inbound); ok && tid != "" {
		return ic.session(tid)
	}
	return nil
}

// RandomStarted keeps the request's randomness with its session, to store
// when the session ends.
func (r *Recorder) RandomStarted(c *hook.ConnInfo, tid string, rnd *trace.Random) {
	a := inboundSession(c, tid)
	if a == nil {
		a = r.session(tid) // an HTTP/2 stream's
	}
	if a == nil {
		return
	}
	a.mu.Lock()
	a.random = rnd
	a.mu.Unlock()
}

// recordedRandom is what a session stores of the request's randomness.
func recordedRandom(rnd *trace.Random) *recording.Random {
	if rnd == nil {
		return nil
	}
	return &recording.Random{Seed: rnd.Seed, Math: rnd.MathDraws(trace.MathRand), MathV2: rnd.MathDraws(trace.MathRandV2),
		Crypto: rnd.Draws()}
}

// InboundRead adds request bytes to the session.
func (r *Recorder) InboundRead(c *hook.ConnInfo, tid string, p []byte) {
	a := inboundSession(c, tid)
	if a == nil {
		return
	}
	a.mu.Lock()
	if !a.ended.Load() {
		a.req.add(p, r.max, &a.arena)
	}
	a.mu.Unlock()
}

// InboundWrite adds response bytes to the session and ends it when the
// response is complete.
func (r *Recorder) InboundWrite(c *hook.ConnInfo, tid string, p []byte) {
	a := inboundSession(c, tid)
	if a == nil {
		return
	}
	a.mu.Lock()
	complete := false
	if !a.ended.Load() {
		a.resp.add(p, r.max, &a.arena)
		complete = a.framer.Feed(p)
	}
	a.mu.Unlock()
	if complete {
		r.finish(a)
	}
}

// Closed ends the sessions in progress on an inbound connection (a
// response delimited by the close). What the Recorder knows of a dialled
// connection goes with its ConnInfo.
func (r *Recorder) Closed(c *hook.ConnInfo) {
	ic, ok := c.Data.Load().(*inbound)
	if !ok {
		r.closedH2(c)
		return
	}
	ic.mu.Lock()
	first := ic.first
	ic.first = nil
	ic.mu.Unlock()
	// taken off the connection, the list changes no more
	for a := first; a != nil; a = a.next {
		r.end(a)
	}
	r.h2Closed(ic)
}

// drop ends a session without recording it; false if it had ended.
func (r *Recorder) drop(a *active) bool {
	a.mu.Lock()
	was := a.ended.Swap(true)
	a.calls = nil
	a.mu.Unlock()
	if was {
		return false
	}
	r.forgetActive(a)
	return true
}

func (r *Recorder) forgetActive(a *active) {
	r.sessions.remove(a)
	ic := a.in
	ic.newest.CompareAndSwap(a, nil) // not kept alive by an idle connection
	ic.mu.Lock()
	if ic.first == a {
		ic.first = a.next
	} else {
		for p := ic.first; p != nil && p.next != nil; p = p.next {
			if p.next == a {
				p.next = a.next
				break
			}
		}
	}
	ic.mu.Unlock()
	r.activeN.Add(-1)
}

// finish ends a session and submits it.
func (r *Recorder) finish(a *active) {
	end := r.now()
	a.mu.Lock()
	if a.ended.Swap(true) {
		a.mu.Unlock()
		return
	}
	calls := a.calls
	a.calls = nil
	rnd := a.random
	s := &recording.Session{
		V: recording.SchemaVersion, ID: a.id, Trace: a.trace, App: r.app, At: a.at,
		Inbound: recording.Inbound{Proto: recording.ProtoHTTP, Local: a.conn.Local, Remote: a.conn.Remote,
			Request: a.req.view(), Response: a.resp.view(), DurNs: end - a.start,
			RequestTruncated: a.req.truncated, ResponseTruncated: a.resp.truncated, TLS: tlsOf(a.in.tls)},
	}
	a.mu.Unlock()
	r.submit(a, s, calls, rnd, end)
}

// submit hands the pipeline s, the session of a, which ended at end with
// calls and rnd, and flushes the background sessions when they are due.
func (r *Recorder) submit(a *active, s *recording.Session, calls []*call, rnd *trace.Random, end int64) {
	r.forgetActive(a)
	s.Calls = snapshotCalls(calls, a.start)
	s.Random = recordedRandom(rnd)
	r.pipe.Submit(s)
	if r.bg.due(end) {
		r.flushBackground(end, false)
	}
}

// attach adds the set-up calls pending, then c, to the session, unless it
// has ended.
func (a *active) attach(pending []*call, c *call) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended.Load() {
		return false
	}
	if a.calls == nil {
		// a request usually makes a few calls: one allocation, not a
		// growth per call
		a.calls = make([]*call, 0, max(8, len(pending)+1))
	}
	a.calls = append(append(a.calls, pending...), c)
	return true
}
