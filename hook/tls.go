package hook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/retrace-dev/retrace/trace"
)

// TLS (DESIGN.md section 11).
//
// A TLS connection over a TCP connection the agent follows gets a
// connState of its own, the underlying connection's tlsSt, made when its
// handshake starts. From then on the underlying connection is broken (its
// bytes, the TLS records, pass unreported and unframed) and the TLS
// connection's state does what a plain connection's does — strip and bind
// Retrace-* headers, charge bytes to traces, report them — on the
// plaintext, with the TLS steps of tlslayout.go for its I/O. Its ConnInfo
// starts with the underlying connection's Recorder data, so a protocol
// that upgrades mid-stream (MySQL's SSL request) goes on where it was.
//
// In replay mode a TLS client connection over a redirected connection
// does no TLS at all: its handshake succeeds at once with the state the
// recordings give the destination, which the mock server tells
// (fakeHandshake, tlsfacts.go), and its Read and Write are those of the
// underlying connection, whose hooks frame the plaintext for the mock.

// TLSInfo describes the TLS of a connection to a Recorder: what its
// handshake negotiated. Set before any of its plaintext is reported.
type TLSInfo struct {
	ServerName  string // SNI: sent by the client, received by the server
	ALPN        string // the negotiated application protocol, "" for none
	Version     uint16 // tls.VersionTLS13 etc.
	CipherSuite uint16
	Curve       tls.CurveID // the key exchange group, 0 for none
	Resumed     bool        // the session was resumed
	PeerCerts   int         // certificates the peer presented (a server's client certificates: mTLS)
}

// tlsTargets returns the TLS patches with their doubles.
func tlsTargets() ([]target, error) {
	l, err := tlsLayoutOnce()
	if err != nil {
		return nil, err
	}
	tlsLayoutP.Store(l)
	r, w, h := l.read, l.write, l.handshake
	r.double, w.double, h.double = tlsConnRead, tlsConnWrite, tlsHandshakeContext
	return []target{h, r, w}, nil
}

// underlayFD returns the netFD under nc when nc is a connection whose
// Read and Write the net hooks patch.
func underlayFD(nc net.Conn) unsafe.Pointer {
	switch c := nc.(type) {
	case *net.TCPConn:
		if c != nil {
			return (*netConn)(unsafe.Pointer(c)).fd
		}
	case *net.UnixConn:
		if c != nil {
			return (*netConn)(unsafe.Pointer(c)).fd
		}
	}
	return nil
}

// tlsConnState returns the state of the TLS connection c, made on first
// sight; bypass, when not nil, is the redirected connection under a client
// connection (replay mode: no TLS, see fakeHandshake). nil, nil: c is
// left alone (a connection over a net.Conn the agent does not follow, or
// a panic).
func (e *engine) tlsConnState(c *tls.Conn) (st, bypass *connState) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("tls-state", r)
			st, bypass = nil, nil
		}
	}()
	if tlsStatePanic.Load() {
		panic("forced by a test")
	}
	fd := underlayFD(c.NetConn())
	if fd == nil {
		return e.otherTLSState(c), nil
	}
	ent, _ := e.conns.entry(fd)
	ust := e.state(fd, ent)
	if ust == nil {
		return nil, nil
	}
	if ust.redirect {
		if tlsLayoutP.Load().client(unsafe.Pointer(c)) {
			return nil, ust
		}
		return nil, nil
	}
	if t := ust.tlsSt.Load(); t != nil && t.tc == unsafe.Pointer(c) {
		return t, nil
	}
	return e.newTLSState(ust, c), nil
}

// newTLSState makes the state of the TLS connection c over the connection
// of ust.
func (e *engine) newTLSState(ust *connState, c *tls.Conn) *connState {
	e.conns.create.Lock()
	defer e.conns.create.Unlock()
	if t := ust.tlsSt.Load(); t != nil && t.tc == unsafe.Pointer(c) {
		return t
	}
	st := &connState{key: uintptr(unsafe.Pointer(c)), inbound: ust.inbound, tls: true, tc: unsafe.Pointer(c)}
	st.gen = e.nextID.Add(1)
	st.info.ID, st.info.Inbound = st.gen, st.inbound
	st.info.Local, st.info.Remote = ust.info.Local, ust.info.Remote
	if d := ust.info.Data.Load(); d != nil {
		st.info.Data.Store(d)
	}
	e.initStreams(st)
	if old := ust.tlsSt.Swap(st); old != nil {
		e.forget(old) // a new TLS session over the same connection
	}
	// the TCP bytes are TLS records from now on: their plaintext is st's
	ust.broken.Store(true)
	counters.tlsConns.Add(1)
	return st
}

// otherTLSState returns the state of a TLS connection over a net.Conn
// that is not one the net hooks patch (a wrapped or in-memory
// connection), made on first sight and dropped when c is collected: its
// plaintext is followed as any TLS connection's (so an in-band trace
// header is stripped), but the bytes under it, if they reach a TCP
// connection through the wrapper, are that connection's own.
func (e *engine) otherTLSState(c *tls.Conn) *connState {
	key := uintptr(unsafe.Pointer(c))
	if v, ok := e.tlsOther.Load(key); ok {
		return v.(*connState)
	}
	st := &connState{key: key, inbound: !tlsLayoutP.Load().client(unsafe.Pointer(c)), tls: true, tc: unsafe.Pointer(c)}
	st.gen = e.nextID.Add(1)
	st.info.ID, st.info.Inbound = st.gen, st.inbound
	if a := c.LocalAddr(); a != nil {
		st.info.Local = a.String()
	}
	if a := c.RemoteAddr(); a != nil {
		st.info.Remote = a.String()
	}
	e.initStreams(st)
	if v, loaded := e.tlsOther.LoadOrStore(key, st); loaded {
		return v.(*connState)
	}
	counters.tlsConns.Add(1)
	runtime.AddCleanup(c, e.otherTLSCollected, cleanupKey{key, st.gen})
	e.debugOnce("tls-other-conn", "a TLS connection over a net.Conn that is not a TCP or Unix connection: its plaintext is followed, the bytes under it are its net.Conn's")
	return st
}

// otherTLSCollected forgets the state of a TLS connection of otherTLSState
// whose tls.Conn was collected.
func (e *engine) otherTLSCollected(k cleanupKey) {
	if v, ok := e.tlsOther.Load(k.key); ok && v.(*connState).gen == k.gen {
		e.tlsOther.Delete(k.key)
		e.forget(v.(*connState))
	}
}

// initStreams gives a new state the stream of its direction.
func (e *engine) initStreams(st *connState) {
	if st.inbound {
		st.rd = newStream(false, e.cfg.noPath, func(h trace.RequestHead) string { return e.startRequest(st, &h) })
	} else {
		st.wr = newStream(true, true, inBandTrace)
	}
}

// tlsStatePanic makes tlsConnState panic, tlsFactsPanic replayTLSState
// (tests of failing open).
var tlsStatePanic, tlsFactsPanic atomic.Bool

// The doubles of (*tls.Conn).Read, Write and handshakeContext. With no
// engine active they do what the originals do (tlslayout.go).

func tlsConnRead(c *tls.Conn, b []byte) (int, error) {
	if e := active.Load(); e != nil && c != nil {
		st, bypass := e.tlsConnState(c)
		if bypass != nil {
			if err := e.bypassHandshake(c, bypass); err != nil {
				return 0, err
			}
			return c.NetConn().Read(b)
		}
		if st != nil && !st.broken.Load() {
			return e.tlsRead(st, c, b)
		}
	}
	return tlsLayoutP.Load().plainRead(c, b)
}

func tlsConnWrite(c *tls.Conn, b []byte) (int, error) {
	if e := active.Load(); e != nil && c != nil {
		st, bypass := e.tlsConnState(c)
		if bypass != nil {
			if err := e.bypassHandshake(c, bypass); err != nil {
				return 0, err
			}
			return c.NetConn().Write(b)
		}
		if st != nil && !st.broken.Load() {
			return e.tlsWrite(st, c, b)
		}
	}
	return tlsLayoutP.Load().plainWrite(c, b)
}

func tlsHandshakeContext(c *tls.Conn, ctx context.Context) error {
	l := tlsLayoutP.Load()
	if c != nil && l.complete(unsafe.Pointer(c)).Load() {
		return nil // as handshakeContext, without plainHandshake's deferreturn
	}
	if e := active.Load(); e != nil && c != nil {
		st, bypass := e.tlsConnState(c)
		if bypass != nil {
			return e.fakeHandshake(l, c, bypass)
		}
		if st != nil {
			return l.plainHandshake(c, ctx, runHandshake, func() { e.handshaken(l, st, c) })
		}
	}
	return l.plainHandshake(c, ctx, runHandshake, nil)
}

func runHandshake(fn func(context.Context) error, ctx context.Context) error { return fn(ctx) }

// bypassHandshake completes the handshake of a bypassed connection (see
// fakeHandshake) on its first Read or Write, as crypto/tls's Read and
// Write do, for a client that never calls Handshake itself.
func (e *engine) bypassHandshake(c *tls.Conn, ust *connState) error {
	l := tlsLayoutP.Load()
	if l.complete(unsafe.Pointer(c)).Load() {
		return nil
	}
	return e.fakeHandshake(l, c, ust)
}

// handshaken records what the handshake of st's connection negotiated.
// Called with the connection's handshake lock held.
func (e *engine) handshaken(l *tlsLayout, st *connState, tc *tls.Conn) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("tls-handshaken", r)
		}
	}()
	c := unsafe.Pointer(tc)
	ti := &TLSInfo{
		ServerName:  *(*string)(unsafe.Add(c, l.serverName)),
		ALPN:        *(*string)(unsafe.Add(c, l.clientProtocol)),
		Version:     *(*uint16)(unsafe.Add(c, l.vers)),
		CipherSuite: *(*uint16)(unsafe.Add(c, l.cipherSuite)),
		Curve:       *(*tls.CurveID)(unsafe.Add(c, l.curveID)),
		Resumed:     *(*bool)(unsafe.Add(c, l.didResume)),
		PeerCerts:   len(*(*[]unsafe.Pointer)(unsafe.Add(c, l.peerCerts))),
	}
	if ti.ServerName == "" && l.client(c) {
		// a client names the server in its config; crypto/tls keeps
		// serverName for a client only with some TLS 1.3 handshakes
		if cfg := l.cfg(c); cfg != nil {
			ti.ServerName = cfg.ServerName
		}
	}
	st.info.TLS.Store(ti)
}

// fakeHandshake completes the handshake of a client connection that replay
// mode redirected to the mock server (over ust), without a byte on the
// wire: the connection then reads and writes plaintext (see tlsConnRead).
// Its ConnectionState is the recorded one when the mock server knows it
// (tlsfacts.go): version, cipher suite, key exchange group and ALPN as a
// recorded handshake with the destination negotiated them, the server name
// crypto/tls sends for the client's config; else plausibleState's. No
// certificate is presented (PeerCertificates is empty), none is
// verified, the config's verification callbacks (VerifyPeerCertificate,
// VerifyConnection) are not called, DidResume is false, and
// ExportKeyingMaterial fails. Close sends no close_notify.
func (e *engine) fakeHandshake(l *tlsLayout, tc *tls.Conn, ust *connState) (err error) {
	c := unsafe.Pointer(tc)
	hsMu := (*sync.Mutex)(unsafe.Add(c, l.hsMutex))
	hsMu.Lock()
	defer hsMu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			// the handshake fails, the service goes on
			e.recovered("tls-fake-handshake", r)
			err = errors.New("retrace: the replayed TLS handshake failed inside the agent")
		}
	}()
	if l.complete(c).Load() {
		return nil
	}
	if err := *(*error)(unsafe.Add(c, l.hsErr)); err != nil {
		return err
	}
	cfg := l.cfg(c)
	st := e.replayTLSState(cfg, ust.dst)
	name := ""
	if cfg != nil {
		name = sniName(cfg.ServerName)
	}
	*(*uint16)(unsafe.Add(c, l.vers)) = st.vers
	*(*bool)(unsafe.Add(c, l.haveVers)) = true
	*(*uint16)(unsafe.Add(c, l.cipherSuite)) = st.suite
	*(*tls.CurveID)(unsafe.Add(c, l.curveID)) = st.curve
	*(*string)(unsafe.Add(c, l.serverName)) = name
	*(*string)(unsafe.Add(c, l.clientProtocol)) = st.alpn
	*(*func(string, []byte, int) ([]byte, error))(unsafe.Add(c, l.ekm)) = noReplayEKM
	*(*bool)(unsafe.Add(c, l.closeNotifySent)) = true
	*(*int)(unsafe.Add(c, l.handshakes))++
	l.complete(c).Store(true)
	counters.tlsFaked.Add(1)
	if st.recorded {
		counters.tlsRecorded.Add(1)
	}
	return nil
}

// replayTLSState is the state a redirected client of cfg to dst gets:
// the recorded one, else (logged once per destination) the plausible one.
func (e *engine) replayTLSState(cfg *tls.Config, dst string) (st replayState) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("tls-facts", r)
			st = plausibleState(cfg)
		}
	}()
	if tlsFactsPanic.Load() {
		panic("forced by a test")
	}
	q := trace.TLSQuery{Dst: dst}
	if cfg != nil {
		q.ServerName, q.ALPN = cfg.ServerName, cfg.NextProtos
	}
	a, err := e.tlsFacts.facts(e.now(), trace.CurrentID(), &q)
	if err == nil {
		if st, other, ok := recordedState(&a, cfg); ok {
			if other != "" {
				e.reportOnce("tls-alpn:"+dst, "a replayed TLS client offers none of the protocols recorded for its destination: its ALPN is chosen from its offer",
					"dst", dst, "recorded", other, "offered", q.ALPN, "chosen", st.alpn)
			}
			return st
		}
	}
	why := a.Reason
	switch {
	case err != nil:
		why = fmt.Sprintf("the mock server could not be asked: %v", err)
	case why == "":
		why = fmt.Sprintf("no recorded handshake with %s has a version the client allows (or one this Go release knows)", a.Recorded)
	}
	e.reportOnce("tls-facts:"+dst, "a replayed TLS handshake gets a made-up ConnectionState, not the recorded one",
		"dst", dst, "reason", why)
	return plausibleState(cfg)
}

// noReplayEKM is the keying-material exporter of a replayed connection,
// which has no keys.
func noReplayEKM(string, []byte, int) ([]byte, error) {
	return nil, errors.New("retrace: a replayed TLS connection has no keying material to export")
}

// tlsRead reads plaintext from the TLS connection of st.
func (e *engine) tlsRead(st *connState, c *tls.Conn, b []byte) (int, error) {
	if st.inbound {
		return e.inboundRead(st, nil, b)
	}
	n, err := tlsLayoutP.Load().plainRead(c, b)
	if h := st.h2OutOf(); h != nil && n > 0 {
		e.h2OutRead(h, b[:n])
	}
	if e.cfg.Mode == Record && n > 0 && !st.skipRead() {
		e.recordOutboundRead(st, b[:n])
	}
	return n, err
}

// tlsWrite writes plaintext on the TLS connection of st.
func (e *engine) tlsWrite(st *connState, c *tls.Conn, b []byte) (int, error) {
	if st.inbound {
		return e.inboundWrite(st, nil, b)
	}
	if l := tlsLayoutP.Load(); !l.complete(unsafe.Pointer(c)).Load() {
		// the handshake crypto/tls's Write would start (a client that does
		// not call Handshake, pgx): done before the write is reported, so
		// that its call is marked with what the handshake negotiated
		if err := c.Handshake(); err != nil {
			return 0, err
		}
	}
	if !e.plainOutboundWrite(st, b) {
		return e.outboundWriteSplit(st, nil, b)
	}
	return tlsLayoutP.Load().plainWrite(c, b)
}

// rawRead and rawWrite read and write a connection's own bytes: the
// plaintext of a TLS connection's state (st.tls), else c's.
func (e *engine) rawRead(st *connState, c *netConn, b []byte) (int, error) {
	if st.tls {
		return tlsLayoutP.Load().plainRead((*tls.Conn)(st.tc), b)
	}
	return e.l.plainRead(c, b)
}

func (e *engine) rawWrite(st *connState, c *netConn, b []byte) (int, error) {
	if st.tls {
		return tlsLayoutP.Load().plainWrite((*tls.Conn)(st.tc), b)
	}
	return e.l.plainWrite(c, b)
}
