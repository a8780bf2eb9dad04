package hook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// How the TLS hooks call "the original" (see tlsLayout): the patched
// functions are (*tls.Conn).Read, Write and the unexported handshakeContext
// — the one function every handshake goes through, since Handshake and
// HandshakeContext are inlined into their callers (net/http, database
// drivers) and patching them would miss those calls. None of the three can
// be called while patched, and gomonkey's unpatch-call-repatch is not
// concurrency-safe. Each is instead done again here, step for step, from
// the unexported functions it calls (readRecordOrCCS,
// handlePostHandshakeMessage, writeRecordLocked, flush, setErrorLocked, the
// QUIC ones, and the connection's handshakeFn), which are never patched and
// are reached through their code pointers, and from the fields it reads,
// found by name and type through reflect — as net's conn methods are done
// again from netFD's (netfd.go). The steps are those of Go 1.26's
// crypto/tls: on another release (tlsGoVersion) or when a field or
// function is not what it was, the TLS hooks are refused and TLS runs as
// without the agent.

// tlsGoVersion is the Go release whose crypto/tls the steps here repeat.
const tlsGoVersion = "go1.26"

// TLS record types used by the steps (crypto/tls recordType values).
const (
	recordTypeAlert           = 21
	recordTypeApplicationData = 23
)

// tlsLayout is what the TLS hooks know about crypto/tls's unexported
// parts, found once and checked.
type tlsLayout struct {
	read, write, handshake target // without their doubles

	// Offsets into tls.Conn.
	conn, isClient, handshakeFn, quic, hsComplete, hsMutex, hsErr, vers, haveVers, config,
	handshakes, didResume, cipherSuite, curveID, peerCerts, serverName, closeNotifySent,
	clientProtocol, ekm, in, out, rawInput, input, hand, activeCall uintptr
	// Offsets into its halfConn (in, out) and quicState.
	hcErr, hcCipher, hcSecret    uintptr
	qCtx, qCancel, qSig, qBlock  uintptr
	readRecordOrCCS              func(c unsafe.Pointer, ccs bool) error
	handlePostHandshakeMessage   func(c unsafe.Pointer) error
	writeRecordLocked            func(c unsafe.Pointer, typ uint8, data []byte) (int, error)
	flush                        func(c unsafe.Pointer) (int, error)
	sendAlert                    func(c unsafe.Pointer, a uint8) error
	qEvents                      uintptr // quicState.events
	errShutdown, errInternal     error
	errNoResult                  error
	handshakeFnType, contextType reflect.Type
}

var tlsLayoutOnce = sync.OnceValues(findTLSLayout)

// tlsLayoutP is the layout, stored before the TLS patches (always the
// same value); the doubles load it atomically, as netLayoutP.
var tlsLayoutP atomic.Pointer[tlsLayout]

func findTLSLayout() (*tlsLayout, error) {
	if v := runtime.Version(); !strings.HasPrefix(v, tlsGoVersion+".") && v != tlsGoVersion {
		return nil, fmt.Errorf("%w: the TLS hooks repeat the steps of %s's crypto/tls, not %s's",
			ErrUnsupported, tlsGoVersion, v)
	}
	l := &tlsLayout{
		errShutdown: errors.New("tls: protocol is shutdown"),
		errInternal: tls.AlertError(80), // alertInternalError: same text
		errNoResult: errors.New("tls: internal error: handshake should have had a result"),
	}
	ct := reflect.TypeFor[tls.Conn]()
	var errs []error
	field := func(t reflect.Type, off *uintptr, name string, want func(reflect.Type) bool) reflect.Type {
		f, ok := t.FieldByName(name)
		if !ok || len(f.Index) != 1 || !want(f.Type) {
			errs = append(errs, fmt.Errorf("%v has no field %s of the expected type", t, name))
			return nil
		}
		*off = f.Offset
		return f.Type
	}
	is := func(want reflect.Type) func(reflect.Type) bool {
		return func(t reflect.Type) bool { return t == want }
	}
	kind := func(k reflect.Kind) func(reflect.Type) bool {
		return func(t reflect.Type) bool { return t.Kind() == k }
	}
	l.contextType = reflect.TypeFor[context.Context]()
	l.handshakeFnType = reflect.TypeFor[func(context.Context) error]()
	field(ct, &l.conn, "conn", kind(reflect.Interface))
	field(ct, &l.isClient, "isClient", kind(reflect.Bool))
	field(ct, &l.handshakeFn, "handshakeFn", is(l.handshakeFnType))
	qt := field(ct, &l.quic, "quic", kind(reflect.Pointer))
	field(ct, &l.hsComplete, "isHandshakeComplete", is(reflect.TypeFor[atomic.Bool]()))
	field(ct, &l.hsMutex, "handshakeMutex", is(reflect.TypeFor[sync.Mutex]()))
	field(ct, &l.hsErr, "handshakeErr", is(reflect.TypeFor[error]()))
	field(ct, &l.vers, "vers", kind(reflect.Uint16))
	field(ct, &l.haveVers, "haveVers", kind(reflect.Bool))
	field(ct, &l.config, "config", is(reflect.TypeFor[*tls.Config]()))
	field(ct, &l.handshakes, "handshakes", kind(reflect.Int))
	field(ct, &l.didResume, "didResume", kind(reflect.Bool))
	field(ct, &l.cipherSuite, "cipherSuite", kind(reflect.Uint16))
	field(ct, &l.curveID, "curveID", is(reflect.TypeFor[tls.CurveID]()))
	field(ct, &l.peerCerts, "peerCertificates", kind(reflect.Slice))
	field(ct, &l.serverName, "serverName", kind(reflect.String))
	field(ct, &l.closeNotifySent, "closeNotifySent", kind(reflect.Bool))
	field(ct, &l.clientProtocol, "clientProtocol", kind(reflect.String))
	field(ct, &l.ekm, "ekm", is(reflect.TypeFor[func(string, []byte, int) ([]byte, error)]()))
	field(ct, &l.rawInput, "rawInput", is(reflect.TypeFor[bytes.Buffer]()))
	field(ct, &l.input, "input", is(reflect.TypeFor[bytes.Reader]()))
	field(ct, &l.hand, "hand", is(reflect.TypeFor[bytes.Buffer]()))
	field(ct, &l.activeCall, "activeCall", is(reflect.TypeFor[atomic.Int32]()))
	field(ct, &l.out, "out", kind(reflect.Struct))
	hc := field(ct, &l.in, "in", kind(reflect.Struct))
	if hc != nil {
		if hc.NumField() == 0 || !hc.Field(0).Anonymous || hc.Field(0).Type != reflect.TypeFor[sync.Mutex]() {
			errs = append(errs, errors.New("tls.halfConn does not start with a sync.Mutex"))
		}
		field(hc, &l.hcErr, "err", is(reflect.TypeFor[error]()))
		field(hc, &l.hcCipher, "cipher", kind(reflect.Interface))
		field(hc, &l.hcSecret, "trafficSecret", is(reflect.TypeFor[[]byte]()))
	}
	if qt != nil {
		q := qt.Elem()
		field(q, &l.qCtx, "ctx", is(l.contextType))
		field(q, &l.qCancel, "cancel", is(reflect.TypeFor[context.CancelFunc]()))
		field(q, &l.qSig, "signalc", is(reflect.TypeFor[chan struct{}]()))
		field(q, &l.qBlock, "blockedc", is(reflect.TypeFor[chan struct{}]()))
		field(q, &l.qEvents, "events", is(reflect.TypeFor[[]tls.QUICEvent]()))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	// (methods are found in the type's method table by methodWord, not
	// reflect's MethodByName: see there)
	pt := reflect.PointerTo(ct)
	method := func(t reflect.Type, tn, name string) (unsafe.Pointer, error) {
		word := methodWord(t, name)
		if word == nil {
			return nil, fmt.Errorf("%w: %s.%s not found in its method table", ErrUnsupported, tn, name)
		}
		if err := checkName(target{name: tn + "." + name, word: word}); err != nil {
			return nil, err
		}
		return word, nil
	}
	const conn = "crypto/tls.(*Conn)"
	words := map[string]unsafe.Pointer{}
	for _, name := range []string{"Read", "Write", "handshakeContext", "readRecordOrCCS",
		"handlePostHandshakeMessage", "writeRecordLocked", "flush", "sendAlert"} {
		w, err := method(pt, conn, name)
		if err != nil {
			return nil, err
		}
		words[name] = w
	}
	l.read = target{name: conn + ".Read", word: words["Read"], typ: reflect.TypeOf((*tls.Conn).Read)}
	l.write = target{name: conn + ".Write", word: words["Write"], typ: reflect.TypeOf((*tls.Conn).Write)}
	l.handshake = target{name: conn + ".handshakeContext", word: words["handshakeContext"]}
	l.readRecordOrCCS = funcOf[func(unsafe.Pointer, bool) error](words["readRecordOrCCS"])
	l.handlePostHandshakeMessage = funcOf[func(unsafe.Pointer) error](words["handlePostHandshakeMessage"])
	l.writeRecordLocked = funcOf[func(unsafe.Pointer, uint8, []byte) (int, error)](words["writeRecordLocked"])
	l.flush = funcOf[func(unsafe.Pointer) (int, error)](words["flush"])
	l.sendAlert = funcOf[func(unsafe.Pointer, uint8) error](words["sendAlert"])
	return l, nil
}

// Accessors of a *tls.Conn's fields.
func (l *tlsLayout) complete(c unsafe.Pointer) *atomic.Bool {
	return (*atomic.Bool)(unsafe.Add(c, l.hsComplete))
}
func (l *tlsLayout) inMu(c unsafe.Pointer) *sync.Mutex     { return (*sync.Mutex)(unsafe.Add(c, l.in)) }
func (l *tlsLayout) outHC(c unsafe.Pointer) unsafe.Pointer { return unsafe.Add(c, l.out) }
func (l *tlsLayout) client(c unsafe.Pointer) bool          { return *(*bool)(unsafe.Add(c, l.isClient)) }
func (l *tlsLayout) cfg(c unsafe.Pointer) *tls.Config {
	return *(**tls.Config)(unsafe.Add(c, l.config))
}

// alertOf is errors.AsType[alert](err) of crypto/tls, the alert type
// recognised by its name.
func alertOf(err error) (uint8, bool) {
	for err != nil {
		t := reflect.TypeOf(err)
		if t.PkgPath() == "crypto/tls" && t.Name() == "alert" && t.Kind() == reflect.Uint8 {
			return uint8(reflect.ValueOf(err).Uint()), true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if a, ok := alertOf(e); ok {
					return a, true
				}
			}
			return 0, false
		default:
			return 0, false
		}
	}
	return 0, false
}

// setErrorLocked is (*halfConn).setErrorLocked, which the compiler
// inlines: a net.Error is kept as a permanent one (never temporary).
func (l *tlsLayout) setErrorLocked(hc unsafe.Pointer, err error) error {
	p := (*error)(unsafe.Add(hc, l.hcErr))
	if ne, ok := err.(net.Error); ok {
		*p = &permanentError{err: ne}
	} else {
		*p = err
	}
	return *p
}

// permanentError is crypto/tls's permanentError.
type permanentError struct{ err net.Error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() error   { return e.err }
func (e *permanentError) Timeout() bool   { return e.err.Timeout() }
func (e *permanentError) Temporary() bool { return false }

// plainRead is (*tls.Conn).Read. (Its Handshake call, and Write's, is
// made only while the handshake is not complete: Handshake returns at once
// then, but through handshakeContext's double and plainHandshake, whose
// defers cost a deferreturn even on that early return.)
func (l *tlsLayout) plainRead(tc *tls.Conn, b []byte) (int, error) {
	c := unsafe.Pointer(tc)
	if !l.complete(c).Load() {
		if err := tc.Handshake(); err != nil {
			return 0, err
		}
	}
	if len(b) == 0 {
		return 0, nil
	}
	in := l.inMu(c)
	in.Lock()
	defer in.Unlock()
	input := (*bytes.Reader)(unsafe.Add(c, l.input))
	hand := (*bytes.Buffer)(unsafe.Add(c, l.hand))
	for input.Len() == 0 {
		if err := l.readRecordOrCCS(c, false); err != nil {
			return 0, err
		}
		for hand.Len() > 0 {
			if err := l.handlePostHandshakeMessage(c); err != nil {
				return 0, err
			}
		}
	}
	n, _ := input.Read(b)
	// a close-notify alert waiting behind the data is read now, so that
	// the caller gets (n, EOF), as crypto/tls does
	raw := (*bytes.Buffer)(unsafe.Add(c, l.rawInput))
	if n != 0 && input.Len() == 0 && raw.Len() > 0 && raw.Bytes()[0] == recordTypeAlert {
		if err := l.readRecordOrCCS(c, false); err != nil {
			return n, err
		}
	}
	return n, nil
}

// plainWrite is (*tls.Conn).Write.
func (l *tlsLayout) plainWrite(tc *tls.Conn, b []byte) (int, error) {
	c := unsafe.Pointer(tc)
	active := (*atomic.Int32)(unsafe.Add(c, l.activeCall))
	for { // interlock with Close
		x := active.Load()
		if x&1 != 0 {
			return 0, net.ErrClosed
		}
		if active.CompareAndSwap(x, x+2) {
			break
		}
	}
	defer active.Add(-2)
	if !l.complete(c).Load() {
		if err := tc.Handshake(); err != nil {
			return 0, err
		}
	}
	out := l.outHC(c)
	mu := (*sync.Mutex)(out)
	mu.Lock()
	defer mu.Unlock()
	if err := *(*error)(unsafe.Add(out, l.hcErr)); err != nil {
		return 0, err
	}
	if !l.complete(c).Load() {
		return 0, l.errInternal
	}
	if *(*bool)(unsafe.Add(c, l.closeNotifySent)) {
		return 0, l.errShutdown
	}
	var m int
	if len(b) > 1 && *(*uint16)(unsafe.Add(c, l.vers)) == tls.VersionTLS10 {
		// TLS 1.0 with a block cipher: the 1/n-1 record split
		if _, ok := (*(*any)(unsafe.Add(out, l.hcCipher))).(interface{ CryptBlocks(dst, src []byte) }); ok {
			n, err := l.writeRecordLocked(c, recordTypeApplicationData, b[:1])
			if err != nil {
				return n, l.setErrorLocked(out, err)
			}
			m, b = 1, b[1:]
		}
	}
	n, err := l.writeRecordLocked(c, recordTypeApplicationData, b)
	return n + m, l.setErrorLocked(out, err)
}

// plainHandshake is (*tls.Conn).handshakeContext, with run in place of the
// call of the connection's handshakeFn (run gets it, and may call it or
// not). done, when not nil, is called after a successful handshake, with
// the connection's locks still held.
func (l *tlsLayout) plainHandshake(tc *tls.Conn, ctx context.Context,
	run func(fn func(context.Context) error, ctx context.Context) error, done func()) (ret error) {
	c := unsafe.Pointer(tc)
	if l.complete(c).Load() {
		return nil
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q := *(*unsafe.Pointer)(unsafe.Add(c, l.quic))
	if q != nil {
		*(*context.Context)(unsafe.Add(q, l.qCtx)) = hctx
		*(*context.CancelFunc)(unsafe.Add(q, l.qCancel)) = cancel
	} else if ctx.Done() != nil {
		nc := tc.NetConn()
		stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
		defer func() {
			if !stop() {
				ret = ctx.Err()
			}
		}()
	}
	hsMu := (*sync.Mutex)(unsafe.Add(c, l.hsMutex))
	hsMu.Lock()
	defer hsMu.Unlock()
	hsErr := (*error)(unsafe.Add(c, l.hsErr))
	if err := *hsErr; err != nil {
		return err
	}
	if l.complete(c).Load() {
		return nil
	}
	in := l.inMu(c)
	in.Lock()
	defer in.Unlock()
	fn := *(*func(context.Context) error)(unsafe.Add(c, l.handshakeFn))
	*hsErr = run(fn, hctx)
	if *hsErr == nil {
		*(*int)(unsafe.Add(c, l.handshakes))++
	} else {
		_, _ = l.flush(c)
	}
	if *hsErr == nil && !l.complete(c).Load() {
		*hsErr = l.errNoResult
	}
	if *hsErr != nil && l.complete(c).Load() {
		panic("tls: internal error: handshake returned an error but is marked successful")
	}
	if *hsErr == nil && done != nil {
		done()
	}
	if q != nil {
		if *hsErr == nil {
			// quicHandshakeComplete and quicSetReadSecret, which the
			// compiler inlines into handshakeContext
			events := (*[]tls.QUICEvent)(unsafe.Add(q, l.qEvents))
			*events = append(*events, tls.QUICEvent{Kind: tls.QUICHandshakeDone})
			if (*bytes.Buffer)(unsafe.Add(c, l.hand)).Len() != 0 {
				_ = l.sendAlert(c, 10) // alertUnexpectedMessage
				return errors.New("tls: handshake buffer not empty before setting read traffic secret")
			}
			*events = append(*events, tls.QUICEvent{Kind: tls.QUICSetReadSecret,
				Level: tls.QUICEncryptionLevelApplication, Suite: *(*uint16)(unsafe.Add(c, l.cipherSuite)),
				Data: *(*[]byte)(unsafe.Add(c, l.in+l.hcSecret))})
		} else {
			out := l.outHC(c)
			mu := (*sync.Mutex)(out)
			mu.Lock()
			a, ok := alertOf(*(*error)(unsafe.Add(out, l.hcErr)))
			if !ok {
				a = 80 // alertInternalError
			}
			mu.Unlock()
			*hsErr = fmt.Errorf("%w%.0w", *hsErr, tls.AlertError(a))
		}
		close(*(*chan struct{})(unsafe.Add(q, l.qBlock)))
		close(*(*chan struct{})(unsafe.Add(q, l.qSig)))
	}
	return *hsErr
}
