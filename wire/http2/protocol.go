package http2

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire"
)

// Name is the protocol's name in recordings; a stream whose request is
// gRPC is recorded as GRPCName.
const (
	Name     = "http2"
	GRPCName = "grpc"
)

// TraceField is the header field that carries a stream's trace in-band:
// added by the agent on the caller's goroutine (grpc-go metadata, or
// net/http's request header), read by the mock to answer the stream from
// its trace's recording, and removed before a real peer sees it.
const TraceField = "retrace-trace-id"

// Protocol is HTTP/2 (and gRPC over it) as a wire.Protocol. A connection
// is many streams of many traces: each recorded call is one stream, its
// halves in the recorded form of AppendMessage.
var Protocol wire.Protocol = protocol{}

type protocol struct{}

func (protocol) Name() string { return Name }

// GRPC is Protocol under the name gRPC calls are recorded with
// (GRPCName): the same wire format, looked up by that name
// (wire.Registry.For) for a recorded call or destination of gRPC. It is
// never detected: a connection is HTTP/2, its streams gRPC or not.
var GRPC wire.Protocol = grpcProtocol{}

type grpcProtocol struct{ protocol }

func (grpcProtocol) Name() string { return GRPCName }

func (grpcProtocol) Detect(_, _ []byte) wire.Verdict { return wire.No }

// Detect is sure of a client that starts with the client preface (h2c
// with prior knowledge, or h2 after ALPN once TLS is peeled off).
func (protocol) Detect(client, _ []byte) wire.Verdict {
	switch Detect(client) {
	case Sure:
		return wire.Sure
	case NotYet:
		return wire.NotYet
	}
	return wire.No
}

// NewFramer frames a direction into frames (the client's preface is a
// message of its own).
func (protocol) NewFramer(side wire.Side, limit int) wire.Framer {
	return &framer{preface: side == wire.Client, limit: limit}
}

type framer struct {
	preface bool
	limit   int
}

func (f *framer) Next(buf []byte) (int, error) {
	if f.preface {
		switch Detect(buf) {
		case NotYet:
			return 0, nil
		case No:
			return 0, ErrPreface
		}
		f.preface = false
		return len(ClientPreface), nil
	}
	if len(buf) < frameHeaderLen {
		return 0, nil
	}
	n := frameHeaderLen + (int(buf[0])<<16 | int(buf[1])<<8 | int(buf[2]))
	if f.limit > 0 && n > f.limit {
		return 0, fmt.Errorf("%w: %s frame of %d bytes", wire.ErrTooLong, http2.FrameType(buf[3]), n)
	}
	if len(buf) < n {
		return 0, nil
	}
	return n, nil
}

func (*framer) Request([]byte) {}

// NewTap: capture follows one call at a time per connection, which a
// multiplexed connection is not; until capture files bytes per stream
// (Conn does the reassembly), an HTTP/2 connection is skipped whole rather
// than recorded wrong.
func (protocol) NewTap() wire.Tap { return skipTap{} }

type skipTap struct{}

func (skipTap) Write([]byte, string, bool) wire.Filing { return wire.Filing{Skip: true} }
func (skipTap) Read([]byte) bool                       { return true }
func (skipTap) ReadsOnWriter() bool                    { return false }

func (protocol) NewBook() wire.Book { return wire.NoBook{} }

func (protocol) NewSession(wire.Book) wire.Session { return session{} }

type session struct{}

// Units: one unit per recorded stream.
func (session) Units(c wire.Call) []wire.Unit {
	m, _, err := ParseMessage(c.Request)
	if err != nil {
		return []wire.Unit{{Req: wire.Request{Raw: c.Request, Op: "?"}, Resp: c.Response}}
	}
	return []wire.Unit{{Req: features(c.Request, m), Resp: c.Response}}
}

// features are what matching compares: the method and path, the data.
func features(raw []byte, m Message) wire.Request {
	method, _ := Get(m.Header, ":method")
	path, _ := Get(m.Header, ":path")
	return wire.Request{Raw: raw, Op: method + " " + path, Key: path, Canon: m.Data, Body: m.Data, Method: method}
}

// ---- mock ----

func (protocol) NewAnswerer(env wire.Env) wire.Answerer {
	return &answerer{env: env, sc: NewServerConn(ServerConfig{MaxData: env.MaxMessage})}
}

// answerer is a connection's side through the serial Answerer interface
// (the mock server answers HTTP/2 through NewMux instead, which can answer
// several streams at once and a bidirectional call message by message): Next consumes one frame at a time; a frame that ends
// a stream's request is a Request (Owner: the stream's in-band trace),
// answered by Reply on that stream; any other frame is consumed as a Local,
// NoReply request whose protocol output (SETTINGS and PING
// acknowledgements, WINDOW_UPDATE) goes out as interim bytes.
type answerer struct {
	env    wire.Env
	sc     *ServerConn
	fr     framer
	greet  bool
	stream uint32 // of the request last returned
	grpc   bool
}

func (a *answerer) Greeting() []byte { return nil }

func (a *answerer) Next(buf []byte) (wire.Request, int, []byte, error) {
	if !a.greet {
		a.greet, a.fr.preface = true, true
	}
	n, err := a.fr.Next(buf)
	if err != nil || n == 0 {
		return wire.Request{}, 0, nil, err
	}
	reqs, err := a.sc.Feed(buf[:n])
	out := a.sc.Output()
	if err != nil {
		if errors.Is(err, ErrGoAway) {
			return wire.Request{}, 0, out, err
		}
		return wire.Request{}, 0, out, err
	}
	for _, r := range reqs {
		if !r.Ended {
			continue
		}
		raw := AppendMessage(nil, r.Message, nil)
		wr := features(raw, r.Message)
		wr.Owner, _ = Get(r.Header, TraceField)
		a.stream = r.StreamID
		ct, _ := Get(r.Header, "content-type")
		a.grpc = strings.HasPrefix(ct, "application/grpc")
		return wr, n, out, nil
	}
	return wire.Request{Raw: buf[:n], Local: true, NoReply: true}, n, out, nil
}

// Reply answers the stream of r from a recorded response half.
func (a *answerer) Reply(_ *wire.Request, resp []byte) []byte {
	m, _, err := ParseMessage(resp)
	if err != nil {
		return a.fail(fmt.Sprintf("recorded answer unreadable: %v", err))
	}
	if err := a.sc.Respond(a.stream, m); err != nil {
		return a.fail(err.Error())
	}
	return a.sc.Output()
}

func (a *answerer) Synth(r *wire.Request) []byte {
	if r.Local {
		return nil
	}
	return a.fail("no recorded answer")
}

func (a *answerer) Missing(_ *wire.Request, reason string) []byte { return a.fail(reason) }

// fail answers the current stream with the protocol's error: for gRPC a
// trailers-only UNAVAILABLE with the reason, else a 502.
func (a *answerer) fail(reason string) []byte {
	msg := "retrace: " + reason
	h := []hpack.HeaderField{{Name: ":status", Value: "502"}, {Name: "content-type", Value: "text/plain"}}
	body := []byte(msg)
	if a.grpc {
		h = []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"},
			{Name: "grpc-status", Value: "14"}, {Name: "grpc-message", Value: grpcEscape(msg)}}
		body = nil
	}
	_ = a.sc.Respond(a.stream, Message{Header: h, Data: body, End: true})
	return a.sc.Output()
}

// grpcEscape percent-encodes a grpc-message.
func grpcEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// AnswerLen: an HTTP/2 connection cannot be proxied one request at a time.
func (a *answerer) AnswerLen(*wire.Request, []byte) (int, error) {
	return 0, errors.New("http2: a multiplexed connection is not proxied request by request")
}
