package hook

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/retrace-dev/retrace/trace"
)

// Mode is what the agent does (DESIGN.md 3.1, RETRACE_MODE).
type Mode int

const (
	// Off patches nothing.
	Off Mode = iota
	// Record reports a service's inbound requests and the traffic they
	// cause to a Recorder.
	Record
	// Replay redirects every outbound connection to the mock server and
	// frames every write on it with the trace that caused it.
	Replay
)

func (m Mode) String() string {
	switch m {
	case Off:
		return "off"
	case Record:
		return "record"
	case Replay:
		return "replay"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses a RETRACE_MODE value; "" is Off.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off":
		return Off, nil
	case "record":
		return Record, nil
	case "replay":
		return Replay, nil
	}
	return Off, fmt.Errorf("retrace: mode %q is not one of off, record, replay", s)
}

// DefaultMockAddr is where replay mode sends outbound connections when
// Config.MockAddr is empty.
const DefaultMockAddr = "127.0.0.1:3515"

// Config says what Install patches and how the hooks behave.
type Config struct {
	// Mode selects the hooks. Off (the zero value) installs nothing.
	Mode Mode
	// MockAddr is the "ip:port" (or "host:port", resolved once by Install)
	// of the mock server that replay mode sends every outbound TCP
	// connection to. Empty means DefaultMockAddr. Ignored in record mode.
	MockAddr string
	// Passthrough lists "host:port" destinations that replay mode never
	// redirects (a shadow database, the service's own clients in tests).
	// Host names are resolved once by Install. Nil means none.
	Passthrough []string
	// Recorder receives the traffic in record mode; required there.
	Recorder Recorder
	// Logger receives the agent's reports: errors (a function left
	// unpatched, a recovered panic; each kind once), info (what was
	// patched) and debug. Nil means errors only, to standard error.
	Logger *slog.Logger
	// NoClock leaves time.Now alone in replay mode (Retrace-Replay-Time is
	// then ignored). The zero value patches it.
	NoClock bool
	// Random selects the randomness a traced request records and gets
	// back on replay (RETRACE_RANDOM, DESIGN.md 14). The zero value,
	// RandomMath, patches the global sources of math/rand and
	// math/rand/v2; RandomAll crypto/rand too.
	Random RandomMode
	// NoHTTP leaves net/http's Transport alone: outbound HTTP requests are
	// then charged to the trace of the goroutine that writes them, which is
	// wrong on pooled connections. The zero value patches it.
	NoHTTP bool
	// NoGRPC leaves grpc-go alone (when the program links it): its reads
	// then bypass the agent (grpc-go reads through syscall.RawConn), and in
	// replay mode its calls carry no trace in-band. The zero value patches
	// it (hook/grpc.go).
	NoGRPC bool
	// NoTLS leaves crypto/tls alone: TLS connections are then followed as
	// the TCP connections under them (their bytes are ciphertext). The zero
	// value hooks TLS (DESIGN.md section 11).
	NoTLS bool
}

// Recorder receives a service's traffic in record mode. Methods are called
// on the application's I/O goroutines: they must be fast and must never
// block. A slice passed to a method is only valid during the call (the
// recorder copies what it keeps). A panic in a method is recovered and
// counted; the application's I/O proceeds.
//
// Writes are reported just before the bytes go out, reads just after they
// came in, so an answer (read on whatever goroutine) is never reported
// before the bytes it answers. A write that then fails was still reported.
type Recorder interface {
	// StartRequest is called when the head of a new HTTP request on an
	// accepted connection has been read, before the application sees it. It
	// returns the trace id to bind for this request, or "" when the request
	// is not sampled (then nothing of it is reported). A client may
	// pipeline requests: a request read before the final response to the
	// one before it has begun waits its turn, and both are in progress
	// until their responses, which come in request order.
	StartRequest(c *ConnInfo, head trace.RequestHead) (tid string)
	// InboundRead reports bytes the application read on an accepted
	// connection (Retrace-* headers stripped), with the tid StartRequest
	// returned for the request they belong to. Bytes of unsampled requests
	// are not reported.
	InboundRead(c *ConnInfo, tid string, p []byte)
	// InboundWrite reports bytes of the response the application wrote on
	// an accepted connection, with the tid of the request they answer (the
	// one being served; with pipelined requests, a write that ends one
	// response and begins the next is reported in two pieces). Bytes of
	// unsampled requests are not reported.
	InboundWrite(c *ConnInfo, tid string, p []byte)
	// OutboundWrite reports bytes written on a dialled connection (the
	// in-band Retrace-Trace-Id stripped), with the tid of the request that
	// caused them (from the writing goroutine or the in-band header), ""
	// if none. Writes with no trace are reported on connections that carry
	// no HTTP for the connection's first 16 of them (its set-up, when a
	// pool opened it on a goroutine of its own); later ones are not, and
	// neither are HTTP requests with no trace.
	OutboundWrite(c *ConnInfo, tid string, p []byte)
	// OutboundRead reports bytes read on a dialled connection, on whatever
	// goroutine read them; reads with no trace stop being reported with
	// the untraced writes they answer (on HTTP connections, the responses
	// to requests with no trace).
	OutboundRead(c *ConnInfo, p []byte)
	// Closed reports that the application closed the connection (or that
	// it was garbage collected unclosed).
	Closed(c *ConnInfo)
}

// PathUser is implemented by a Recorder that says whether its StartRequest
// reads RequestHead.Path. When UsesPath reports false, Path is left empty,
// which spares every inbound request the allocation of its path, sampled
// or not (a recorder that keeps the request has its bytes from InboundRead).
// A Recorder that does not implement it gets the path.
type PathUser interface {
	UsesPath() bool
}

// ConnInfo identifies one TCP connection to a Recorder.
type ConnInfo struct {
	// ID is unique among the connections the agent saw in this process.
	ID uint64
	// Inbound is true for connections accepted by a listener of this
	// process, false for connections it dialled.
	Inbound bool
	// Local and Remote are the connection's addresses ("ip:port"). Remote
	// of an outbound connection is its destination.
	Local, Remote string
	// Data is the Recorder's own, for its state of the connection; the
	// agent never touches it. Every report of a connection comes with the
	// same *ConnInfo, so a Recorder that keeps its state here finds it with
	// one load instead of a lookup by ID in a table shared by all
	// connections. Reports of one connection may come from several
	// goroutines at once (net/http reads and writes a connection on two).
	Data atomic.Value
	// TLS is set on the connection of a TLS session's plaintext, before any
	// of it is reported: what its handshake negotiated. Nil for plain TCP.
	TLS atomic.Pointer[TLSInfo]
}

// Errors of Install.
var (
	// ErrInstalled reports an Install while another one is still in place:
	// the patches are process-wide, one configuration at a time.
	ErrInstalled = errors.New("retrace: hooks already installed")
	// ErrUnsupported reports a platform or Go runtime whose layout the
	// agent does not know; nothing was patched.
	ErrUnsupported = errors.New("retrace: platform not supported by the agent")
	// ErrPatch reports that a function the mode cannot work without could
	// not be patched; nothing stays patched.
	ErrPatch = errors.New("retrace: patching failed")
)

// resolvedConfig is a Config checked and with its addresses resolved.
type resolvedConfig struct {
	Config
	mock        netip.AddrPort
	passthrough map[netip.AddrPort]bool
	// noPath: nothing reads the Path of inbound request heads, which the
	// parser then leaves empty; only a Recorder can, unless it says it
	// does not (PathUser)
	noPath bool
}

// resolve validates c and resolves its addresses. Errors name the value
// that was wrong.
func (c Config) resolve() (*resolvedConfig, error) {
	rc := &resolvedConfig{Config: c, passthrough: map[netip.AddrPort]bool{}, noPath: true}
	switch c.Mode {
	case Off:
		return rc, nil
	case Record:
		if c.Recorder == nil {
			return nil, errors.New("retrace: record mode needs a Recorder")
		}
		pu, ok := c.Recorder.(PathUser)
		rc.noPath = ok && !pu.UsesPath()
		return rc, nil
	case Replay:
	default:
		return nil, fmt.Errorf("retrace: unknown mode %v", c.Mode)
	}
	if rc.MockAddr == "" {
		rc.MockAddr = DefaultMockAddr
	}
	aps, err := resolveAddr(rc.MockAddr)
	if err != nil {
		return nil, fmt.Errorf("retrace: mock address: %w", err)
	}
	rc.mock = aps[0]
	for _, p := range c.Passthrough {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		aps, err := resolveAddr(p)
		if err != nil {
			return nil, fmt.Errorf("retrace: pass-through destination: %w", err)
		}
		for _, ap := range aps {
			rc.passthrough[ap] = true
		}
	}
	return rc, nil
}

// resolveAddr turns "host:port" into addresses, v4-mapped ones unmapped.
func resolveAddr(s string) ([]netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not host:port: %w", s, err)
	}
	pn, err := net.LookupPort("tcp", port)
	if err != nil || pn == 0 {
		return nil, fmt.Errorf("%q: bad port %q", s, port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.AddrPort{netip.AddrPortFrom(ip.Unmap().WithZone(""), uint16(pn))}, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return nil, fmt.Errorf("%q: cannot resolve host %q: %v", s, host, err)
	}
	var out []netip.AddrPort
	for _, ip := range ips {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(pn)))
		}
	}
	return out, nil
}
