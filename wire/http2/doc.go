// Package http2 is retrace's knowledge of HTTP/2 (RFC 9113) on the wire:
// detection of a connection that speaks it, framing of either direction
// from bytes fed in any split, HPACK state kept per connection and
// direction, reassembly of each stream into one exchange (request
// headers, data and trailers; response headers, data and trailers; a
// reset), the mock's server side of a connection (a state machine that
// answers each stream from a recorded exchange, with SETTINGS, PING,
// WINDOW_UPDATE and flow control, RST_STREAM and GOAWAY), and the
// rewriting of a connection's header blocks that removes the in-band
// trace header before the bytes reach a real peer.
//
// Frames are parsed by golang.org/x/net/http2's Framer and header blocks
// by its hpack package; this package adds the incremental feeding, the
// per-stream view and the state a recorder and a mock need.
//
// Nothing here does I/O: every type is fed bytes and hands bytes back, so
// capture, the mock server and tests drive it over whatever they read.
package http2
