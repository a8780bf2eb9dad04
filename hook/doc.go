// Package hook installs and removes the runtime patches of the retrace
// agent (DESIGN.md section 4) and runs the logic behind them.
//
// Install patches, with gomonkey, the functions every TCP connection of a
// Go program goes through:
//
//   - net.(*conn).Read, Write and Close — the unexported type behind
//     *net.TCPConn, reached through reflect. The (*net.TCPConn) wrappers are
//     not patched: they are shorter than an arm64 jump. The original work is
//     done by calling the net conn's netFD Read/Write/Close through code
//     pointers taken from reflect, which are never patched, so calling "the
//     original" never unpatches anything and is safe under any concurrency.
//   - syscall.Connect (replay mode, Linux): every outbound TCP connect is
//     sent to the mock server instead, except pass-through destinations and
//     the mock itself. Hooking the connect system call, below name
//     resolution, catches every dialer (net.Dialer, net.DialTCP, any
//     driver) with the real dial machinery intact; the destination the
//     agent reports is the resolved "ip:port", the same address a recording
//     made in record mode sees as the connection's remote address.
//   - (*net/http.Transport).RoundTrip: on the caller's goroutine, a request
//     made while a trace is bound is sent as a copy carrying a
//     Retrace-Trace-Id header; the connection's Write hook strips it and
//     uses it as the trace of those bytes, so a pooled keep-alive
//     connection written by the transport's own goroutine is still charged
//     to the right request, and real downstreams never see the header.
//   - time.Now (replay mode): on the goroutines of a request replayed with
//     Retrace-Replay-Time it returns the recorded time plus the time elapsed
//     since the request arrived; every other goroutine sees the real clock.
//   - the global sources of math/rand and math/rand/v2, and crypto/rand.Read
//     and the Read of crypto/rand.Reader (Config.Random, RETRACE_RANDOM): on
//     a traced request's goroutines the application's draws come from a
//     seed of the request's own and, for crypto/rand, are recorded and
//     handed back in order on replay; draws the standard library makes for
//     itself (TLS, key generation) and untraced goroutines get real
//     randomness.
//
// Before patching a function Install checks, with the runtime's function
// table, that the function's body is at least as long as the jump written
// over it; a function that is too short, or whose patch fails, is reported
// once and left alone. Every hook recovers its own panics, counts them, and
// lets the application's I/O proceed unchanged (fail open).
//
// Connections are told apart without hooking accept or dial: a connection
// whose socket was connected by this process (netFD.isConnected) is
// outbound, any other TCP connection (accepted by a listener) is inbound.
// Per-connection state lives in a map keyed by the netFD's address and is
// dropped on Close (or when the netFD is garbage collected unclosed), so
// memory does not grow with the number of connections or requests served.
//
// In record mode the agent reports traffic to a Recorder (see Recorder);
// in replay mode it frames every outbound write as DESIGN.md 3.3 with the
// trace of the request that caused it.
package hook
