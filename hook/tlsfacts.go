package hook

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/retrace-dev/retrace/trace"
)

// The recorded TLS state of a redirected client's handshake (replay mode,
// DESIGN.md 3.3): fakeHandshake asks the mock server, on a connection of
// the agent's own named trace.TLSDst, what the recordings say the
// destination's handshakes negotiated, and gives the application that
// ConnectionState. Answers are kept a while per destination, server name
// and ALPN offer, so a pool's connections cost one question.

const (
	tlsFactsTimeout = 2 * time.Second  // bounds one question to the mock server
	tlsFactsTTL     = 10 * time.Second // how long an answer is kept
	// tlsFactsPause is how long the agent asks no more after the mock
	// server could not be asked (down, or of a release that does not
	// know trace.TLSDst): handshakes then get the plausible state at once.
	tlsFactsPause   = 5 * time.Second
	maxTLSFactsKept = 1024
)

// tlsFactsClient asks the mock server for recorded TLS facts.
type tlsFactsClient struct {
	addr string // the mock server

	mu  sync.Mutex // one question at a time on c
	c   net.Conn
	br  *bufio.Reader
	buf []byte

	cmu     sync.Mutex
	kept    map[string]keptFacts
	pauseTo time.Time // no question before this (after a failure)
	lastErr error     // that failure
}

type keptFacts struct {
	a  trace.TLSAnswer
	at time.Time
}

// facts returns the mock server's answer to q, asked for trace tid, from
// what was kept when it is fresh. Handshakes that miss at once (a pool
// dialling its connections together) ask in turn, and those after the
// first find its answer.
func (r *tlsFactsClient) facts(now time.Time, tid string, q *trace.TLSQuery) (trace.TLSAnswer, error) {
	key := q.Dst + "\x00" + q.ServerName + "\x00" + strings.Join(q.ALPN, ",")
	if a, ok, err := r.kept1(now, key); ok {
		return a, err
	}
	body, err := json.Marshal(q)
	if err != nil {
		return trace.TLSAnswer{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok, err := r.kept1(now, key); ok {
		return a, err // asked while this one waited its turn
	}
	var a trace.TLSAnswer
	for attempt := 0; ; attempt++ {
		a, err = r.askLocked(tid, body)
		if err == nil || attempt == 1 {
			break
		}
		// the mock may have closed an idle connection: once more on a new one
	}
	r.cmu.Lock()
	defer r.cmu.Unlock()
	if err != nil {
		r.pauseTo, r.lastErr = now.Add(tlsFactsPause), err
		return a, err
	}
	if r.kept == nil || len(r.kept) >= maxTLSFactsKept {
		r.kept = map[string]keptFacts{}
	}
	r.kept[key] = keptFacts{a, now}
	return a, nil
}

// kept1 is the answer kept for key, or the error of a recent failure;
// ok is false when the mock server is to be asked.
func (r *tlsFactsClient) kept1(now time.Time, key string) (trace.TLSAnswer, bool, error) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	if k, ok := r.kept[key]; ok && now.Sub(k.at) < tlsFactsTTL {
		return k.a, true, nil
	}
	if now.Before(r.pauseTo) {
		return trace.TLSAnswer{}, true, fmt.Errorf("not asked again for %s after: %w", tlsFactsPause, r.lastErr)
	}
	return trace.TLSAnswer{}, false, nil
}

func (r *tlsFactsClient) askLocked(tid string, body []byte) (trace.TLSAnswer, error) {
	fresh := r.c == nil
	if fresh {
		c, err := net.DialTimeout("tcp", r.addr, tlsFactsTimeout)
		if err != nil {
			return trace.TLSAnswer{}, err
		}
		r.c, r.br = c, bufio.NewReader(c)
		r.buf = trace.AppendFrameHeader(r.buf[:0], "", trace.TLSDst, 0)
	} else {
		r.buf = r.buf[:0]
	}
	r.buf = trace.AppendFrame(r.buf, validOrEmpty(tid), trace.TLSDst, body)
	r.c.SetDeadline(time.Now().Add(tlsFactsTimeout))
	var a trace.TLSAnswer
	_, err := r.c.Write(r.buf)
	var line []byte
	if err == nil {
		line, err = r.br.ReadSlice('\n')
	}
	if err == nil {
		if err = json.Unmarshal(line, &a); err != nil {
			err = fmt.Errorf("mock server answered %q: %w", clipBytes(line), err)
		}
	}
	if err != nil {
		if fresh && isEOF(err) {
			err = fmt.Errorf("the mock server closed the connection: it does not answer %s (an older release?)", trace.TLSDst)
		}
		r.c.Close()
		r.c, r.br = nil, nil
	}
	return a, err
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func clipBytes(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

func (r *tlsFactsClient) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		r.c.Close()
		r.c, r.br = nil, nil
	}
}

// replayState is what a redirected client's handshake gives its
// ConnectionState.
type replayState struct {
	vers, suite uint16
	curve       tls.CurveID
	alpn        string
	recorded    bool // from the recording, not the plausible default
}

// recordedState chooses, among the answer's facts (best fit first), the
// first a client of cfg could have negotiated: an ALPN it offers (or
// none), a version in its range, names this release knows. When the
// client offers none of the recorded protocols (its build changed its
// offer), the first otherwise fitting is taken with plausibleState's ALPN
// for the offer, and otherALPN is the one recorded.
func recordedState(a *trace.TLSAnswer, cfg *tls.Config) (st replayState, otherALPN string, ok bool) {
	var offers []string
	minV, maxV := uint16(tls.VersionTLS12), uint16(tls.VersionTLS13)
	if cfg != nil {
		offers = cfg.NextProtos
		if cfg.MinVersion != 0 {
			minV = cfg.MinVersion
		}
		if cfg.MaxVersion != 0 {
			maxV = cfg.MaxVersion
		}
	}
	var fallback *replayState
	for _, f := range a.Facts {
		v, ok := versionByName(f.Version)
		if !ok || v < minV || v > maxV {
			continue
		}
		s, ok := suiteByName(f.CipherSuite)
		if !ok {
			continue
		}
		var curve tls.CurveID
		if f.Curve != "" {
			if curve, ok = curveByName(f.Curve); !ok {
				continue
			}
		}
		st := replayState{vers: v, suite: s, curve: curve, alpn: f.ALPN, recorded: true}
		if f.ALPN == "" || slices.Contains(offers, f.ALPN) {
			return st, "", true
		}
		if fallback == nil {
			fallback = &st
		}
	}
	if fallback == nil {
		return replayState{}, "", false
	}
	other := fallback.alpn
	fallback.alpn = plausibleState(cfg).alpn
	return *fallback, other, true
}

// plausibleState is the state of a handshake no recording tells: TLS 1.3
// with TLS_AES_128_GCM_SHA256, the client's first preferred group (Go's
// default, X25519MLKEM768, when it names none), and http/1.1 as ALPN when
// the client offers it (the mock server answers HTTP/1), else h2 when it
// offers that (a gRPC client: the mock answers HTTP/2 by its preface),
// else none.
func plausibleState(cfg *tls.Config) replayState {
	st := replayState{vers: tls.VersionTLS13, suite: tls.TLS_AES_128_GCM_SHA256, curve: tls.X25519MLKEM768}
	if cfg == nil {
		return st
	}
	if len(cfg.CurvePreferences) > 0 {
		st.curve = cfg.CurvePreferences[0]
	}
	if slices.Contains(cfg.NextProtos, "http/1.1") {
		st.alpn = "http/1.1"
	} else if slices.Contains(cfg.NextProtos, "h2") {
		st.alpn = "h2"
	}
	return st
}

// sniName is the server name a crypto/tls client sends for its
// configured ServerName (crypto/tls's hostnameInSNI): none for an IP
// address, no trailing dot.
func sniName(name string) string {
	host := name
	if len(host) > 0 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if i := strings.LastIndex(host, "%"); i > 0 {
		host = host[:i]
	}
	if net.ParseIP(host) != nil {
		return ""
	}
	return strings.TrimRight(name, ".")
}

func versionByName(s string) (uint16, bool) {
	// (0x0300 is SSL 3.0, whose constant is deprecated)
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12, tls.VersionTLS11, tls.VersionTLS10, 0x0300} {
		if tls.VersionName(v) == s {
			return v, true
		}
	}
	return parseHex16(s)
}

func suiteByName(s string) (uint16, bool) {
	for _, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
		for _, c := range list {
			if c.Name == s {
				return c.ID, true
			}
		}
	}
	return parseHex16(s)
}

func curveByName(s string) (tls.CurveID, bool) {
	for _, c := range []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521,
		tls.SecP256r1MLKEM768, tls.SecP384r1MLKEM1024} {
		if c.String() == s {
			return c, true
		}
	}
	if n, ok := strings.CutPrefix(s, "CurveID("); ok {
		if v, err := strconv.ParseUint(strings.TrimSuffix(n, ")"), 10, 16); err == nil && strings.HasSuffix(n, ")") {
			return tls.CurveID(v), true
		}
	}
	return 0, false
}

// parseHex16 reads crypto/tls's name of an unknown version or suite,
// "0x%04X".
func parseHex16(s string) (uint16, bool) {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok || len(h) != 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(h, 16, 16)
	return uint16(v), err == nil
}
