package wire

// Multiplexed is implemented by a protocol whose connections carry many
// requests at once, each of its own trace, answered in any order and
// piece by piece as the request arrives (HTTP/2 streams: several in
// flight, a bidirectional call answered message by message). The mock
// server answers such a connection through a Mux instead of the serial
// Answerer.
type Multiplexed interface {
	Protocol
	// NewMux returns the mock server's state for one live connection.
	NewMux(env Env) Mux
	// ConnProto names the protocol the connection speaks ("http2" for
	// gRPC calls too): recorded destinations of protocols with the same
	// ConnProto answer each other's connections.
	ConnProto() string
}

// Mux is the mock server's side of one multiplexed connection, without
// I/O: the client's bytes are fed in, the bytes to send are taken out.
// It keeps the connection's protocol state (settings, flow control,
// header compression) and paces each answer given to it by the
// recording. It is not safe for concurrent use: the mock server
// serialises every call on a connection.
type Mux interface {
	// Feed reads bytes the client sent, in any split, and returns the
	// requests that changed: opened, got more of their body, ended, or
	// were abandoned by the client. Each request is reported at most once
	// per call, in the order it first changed. An error ends the
	// connection; Output then holds what to send before closing (an
	// HTTP/2 GOAWAY naming the error).
	Feed(p []byte) ([]MuxEvent, error)
	// Answer gives request id its recorded answer, which the Mux sends
	// as much of as the request so far allows (the recording's pace), and
	// the rest as more of the request arrives. It returns an error for an
	// answer not in the protocol's recorded form (the request is then
	// answered with Missing).
	Answer(id uint32, resp []byte) error
	// Missing answers request id with the protocol's error naming reason
	// (gRPC: UNAVAILABLE; HTTP/2: 502).
	Missing(id uint32, reason string)
	// Output returns the bytes to send and forgets them; nil for none.
	Output() []byte
}

// MuxEvent is a change of one request of a multiplexed connection.
type MuxEvent struct {
	ID uint32
	// Proto is the request's protocol name as recorded
	// (recording.Call.Proto): "grpc" or "http2" for HTTP/2 streams.
	Proto string
	// Req holds the request's features so far (Op, Key, Canon, Body);
	// Owner is the trace the request carries in-band ("" for none). Raw
	// is the request so far in its recorded form (what the mock server
	// reports as observed): set until the request has an answer, and once
	// it is Ended or Gone. The slices stay valid after later Feeds.
	Req Request
	// Ended: the client's request is whole.
	Ended bool
	// Gone: the client abandoned the request (an HTTP/2 RST_STREAM) or
	// nothing more can come of it; the request is over.
	Gone bool
}
