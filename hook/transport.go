package hook

import (
	"fmt"
	"net/http"
	"reflect"
	"sync/atomic"

	"github.com/retrace-dev/retrace/trace"
)

// TraceHeader is the header that carries a trace id: sent by the replayer
// to the service (DESIGN.md 3.2), and added in-band by the agent to the
// service's own outbound HTTP requests, where the connection's Write hook
// strips it again.
const TraceHeader = "Retrace-Trace-Id"

// roundTripFunc is (*http.Transport).roundTrip, the unexported method that
// does all of RoundTrip's work; it is called, never patched. Stored
// atomically (always the same value) because a goroutine may still run the
// double of an earlier Install.
type roundTripFunc = func(t *http.Transport, req *http.Request) (*http.Response, error)

var roundTrip atomic.Pointer[roundTripFunc]

// transportTarget finds (*http.Transport).RoundTrip to patch and its
// unexported worker to call.
func transportTarget() (target, error) {
	tt := reflect.TypeFor[*http.Transport]()
	m, ok := tt.MethodByName("RoundTrip")
	if !ok {
		return target{}, fmt.Errorf("%w: http.Transport has no RoundTrip", ErrUnsupported)
	}
	word := methodWord(tt, "roundTrip")
	if word == nil {
		return target{}, fmt.Errorf("%w: (*http.Transport).roundTrip not found through reflect", ErrUnsupported)
	}
	inner := target{name: "net/http.(*Transport).roundTrip", word: word}
	if err := checkName(inner); err != nil {
		return target{}, err
	}
	fn := funcOf[roundTripFunc](word)
	roundTrip.Store(&fn)
	return target{
		name:   "net/http.(*Transport).RoundTrip",
		word:   codeWord(m.Func),
		typ:    m.Func.Type(),
		double: transportRoundTrip,
	}, nil
}

// transportRoundTrip replaces (*http.Transport).RoundTrip: a plain-HTTP
// request made on a goroutine with a trace goes out as a copy carrying the
// trace in-band; the caller's request is never modified.
func transportRoundTrip(t *http.Transport, req *http.Request) (*http.Response, error) {
	sent, inBand := req, false
	if e := active.Load(); e != nil {
		sent, inBand = e.carry(t, req)
	}
	if inBand {
		// The goroutines the round trip may start (a dial, then the new
		// connection's readLoop and writeLoop) serve the connection, and
		// with it later requests of any trace or none: they must not
		// inherit this request's trace, which travels in the request.
		defer trace.Detach().Restore()
	}
	resp, err := (*roundTrip.Load())(t, sent)
	if resp != nil && resp.Request == sent && sent != req {
		resp.Request = req
	}
	return resp, err
}

// carry returns req, or a copy of it with the current trace in
// TraceHeader: plain HTTP, or HTTPS when crypto/tls is hooked (the TLS
// Write hook strips it from the plaintext). HTTP/1 has it stripped by the
// Write hook; HTTP/2 (h2c, or h2 negotiated over TLS) sends it as the
// stream's retrace-trace-id field, which the mock reads in replay mode and
// the write hook's rewriter removes before a real server (h2out.go). In
// replay mode an HTTPS transport that may negotiate HTTP/2 carries none:
// the mock's connections speak HTTP/1, and another destination's h2 would
// need the rewriter, which a failure may have turned off (h2Broken).
// inBand reports that the request sent carries a trace in TraceHeader.
func (e *engine) carry(t *http.Transport, req *http.Request) (out *http.Request, inBand bool) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("http-transport", r)
			out, inBand = req, false
		}
	}()
	if req == nil || req.URL == nil {
		return req, false
	}
	switch req.URL.Scheme {
	case "http":
	case "https":
		// not with a TLS dialer of the transport's own: its TLS may not be
		// crypto/tls, whose Write hook strips the header
		if !e.tls || t == nil || tlsDialer(t) || mayHTTP2(t) && (e.cfg.Mode != Record || e.h2Broken.Load()) {
			return req, false
		}
	default:
		return req, false
	}
	if t != nil && t.Protocols != nil && t.Protocols.UnencryptedHTTP2() && e.cfg.Mode == Record && e.h2Broken.Load() {
		// h2c whose rewriter may not run (one failed): the field could
		// reach the real server.
		return req, false
	}
	tid := trace.CurrentID()
	if tid == "" || !trace.ValidID(tid) {
		if e.cfg.Mode != Replay {
			return req, false
		}
		// In replay mode an untraced request (start-up, background,
		// health checks) says so in-band, with an empty id: net/http
		// writes it on the pooled connection's writeLoop goroutine,
		// whose trace is whichever it inherited, never this request's.
		// (Record mode leaves it as it is: most of its requests are
		// unsampled, and the copy would cost each of them.)
		tid = ""
	} else if _, set := req.Header[TraceHeader]; set {
		return req, true
	}
	r2 := new(http.Request)
	*r2 = *req
	h := make(http.Header, len(req.Header)+1)
	for k, v := range req.Header {
		h[k] = v
	}
	h[TraceHeader] = []string{tid}
	r2.Header = h
	counters.carried.Add(1)
	return r2, true
}

// mayHTTP2 reports whether t may speak HTTP/2 over TLS (net/http's
// Transport.protocols, read without racing with its first request: the
// case that reads TLSNextProto is one in which net/http never writes it).
func mayHTTP2(t *http.Transport) bool {
	if t.Protocols != nil {
		return t.Protocols.HTTP2()
	}
	if t.ForceAttemptHTTP2 || (t.TLSClientConfig == nil && !customDial(t)) {
		return true
	}
	_, h2 := t.TLSNextProto["h2"]
	return h2
}

// tlsDialer reports whether t dials TLS connections itself.
func tlsDialer(t *http.Transport) bool {
	//lint:ignore SA1019 net/http still honours the deprecated dialer
	return t.DialTLSContext != nil || t.DialTLS != nil
}

// customDial reports whether t has a dialer of its own, which (like a
// TLS config) keeps net/http from enabling HTTP/2 by itself. Dial and
// DialTLS are deprecated and still honoured.
func customDial(t *http.Transport) bool {
	//lint:ignore SA1019 net/http still honours the deprecated dialers
	return t.Dial != nil || t.DialContext != nil || t.DialTLS != nil || t.DialTLSContext != nil
}
