package hook

import (
	"sync"
	"sync/atomic"

	"github.com/retrace-dev/retrace/internal/stripe"
	"github.com/retrace-dev/retrace/trace"
)

// counters are process-wide and cumulative over every Install. Those that
// count requests, which every core serving them adds to, are striped.
var counters struct {
	requests, traced, bound, framed, stripped, carried stripe.Counter

	conns, preambles, redirected, rewritten, failures, pipelined, diverged atomic.Int64
	h2conns, h2unrecorded, h2out, h2outFailed                              atomic.Int64
	tlsConns, tlsFaked, tlsRecorded                                        atomic.Int64
}

var patchState struct {
	sync.Mutex
	mode    Mode
	patched []string
	refused []string
}

// Stats is a snapshot of the agent's counters. Counts are cumulative over
// the process's life; Patched, Refused, Mode and Conns describe the hooks
// installed now.
type Stats struct {
	Mode    Mode     // mode of the installed hooks; Off when none
	Patched []string // functions patched now
	Refused []string // functions left alone, with the reason

	Conns     int // connections tracked now
	Bound     int // traces bound now (trace.Bound)
	ConnsSeen int64
	Requests  int64 // inbound request heads read
	Traced    int64 // of those, requests that got a trace
	Bindings  int64 // trace.Bind calls made for them
	// Pipelined counts inbound requests read while the response to an
	// earlier one on their connection had not begun: they waited their
	// turn, and their trace was bound when it came.
	Pipelined int64

	RedirectedConnects int64 // replay: connects sent to the mock server
	RewrittenConnects  int64 // replay: connects sent to a Rewrite target
	Preambles          int64 // replay: preamble frames sent
	FramedWrites       int64 // replay: frames sent (preambles not counted)
	CarriedRequests    int64 // HTTP requests that carried their trace in-band
	StrippedRequests   int64 // outbound HTTP requests whose Retrace-* headers were stripped

	// H2Conns counts accepted HTTP/2 connections whose streams were
	// rewritten and bound one by one (replay mode).
	H2Conns int64
	// H2Unrecorded counts accepted HTTP/2 connections record mode could
	// not record (logged once).
	H2Unrecorded int64
	// H2Outbound counts dialled HTTP/2 connections whose header blocks
	// went through the in-band rewriter (retrace-* fields removed before
	// the real server); H2RewriteFailed those whose rewriter failed and
	// whose bytes went on unchanged (h2out.go).
	H2Outbound, H2RewriteFailed int64

	TLSConns      int64 // TLS connections whose plaintext the TLS hooks followed
	TLSHandshakes int64 // replay: TLS handshakes completed without TLS (redirected clients)
	// TLSRecorded counts the TLSHandshakes whose ConnectionState is the
	// recorded one (the mock server told it); the others got a plausible
	// one, logged once per destination.
	TLSRecorded int64

	// Diverged counts the divergences of replayed requests' randomness
	// from their recordings (one per request and source at most).
	Diverged int64

	// Failures counts recovered panics and errors inside hooks (the
	// application's I/O proceeded unhooked each time).
	Failures int64
}

// ReadStats returns the current counters.
func ReadStats() Stats {
	patchState.Lock()
	s := Stats{
		Mode:    patchState.mode,
		Patched: append([]string(nil), patchState.patched...),
		Refused: append([]string(nil), patchState.refused...),
	}
	patchState.Unlock()
	if e := active.Load(); e != nil {
		s.Conns = int(e.conns.count.Load())
	}
	s.Bound = trace.Bound()
	s.ConnsSeen = counters.conns.Load()
	s.Requests = counters.requests.Load()
	s.Traced = counters.traced.Load()
	s.Bindings = counters.bound.Load()
	s.Pipelined = counters.pipelined.Load()
	s.RedirectedConnects = counters.redirected.Load()
	s.RewrittenConnects = counters.rewritten.Load()
	s.Preambles = counters.preambles.Load()
	s.FramedWrites = counters.framed.Load()
	s.CarriedRequests = counters.carried.Load()
	s.StrippedRequests = counters.stripped.Load()
	s.H2Conns = counters.h2conns.Load()
	s.H2Unrecorded = counters.h2unrecorded.Load()
	s.H2Outbound, s.H2RewriteFailed = counters.h2out.Load(), counters.h2outFailed.Load()
	s.TLSConns = counters.tlsConns.Load()
	s.TLSHandshakes = counters.tlsFaked.Load()
	s.TLSRecorded = counters.tlsRecorded.Load()
	s.Failures = counters.failures.Load()
	s.Diverged = counters.diverged.Load()
	return s
}
