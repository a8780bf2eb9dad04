package http2

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire"
)

// NewMux returns the mock server's side of one HTTP/2 connection: a
// ServerConn whose streams are reported as they open, grow and end, each
// answered from its recorded response at the recording's pace.
func (protocol) NewMux(env wire.Env) wire.Mux {
	return &mux{sc: NewServerConn(ServerConfig{MaxData: env.MaxMessage}), streams: map[uint32]*muxStream{}}
}

// ConnProto: gRPC calls and HTTP/2 requests share HTTP/2 connections.
func (protocol) ConnProto() string { return Name }

type mux struct {
	sc      *ServerConn
	streams map[uint32]*muxStream
	events  []wire.MuxEvent
}

// muxStream is a stream the mux follows until both halves are over.
type muxStream struct {
	req    *Request // the ServerConn's, growing
	grpc   bool
	x      *Exchange // the recorded answer (Response and Pace), once given
	sent   int       // bytes of x.Response.Data sent
	header bool      // the answer's header block is sent
	ended  bool      // the answer's end is sent
}

func (m *mux) Feed(p []byte) ([]wire.MuxEvent, error) {
	reqs, err := m.sc.Feed(p)
	m.events = m.events[:0]
	for _, r := range reqs {
		st := m.streams[r.StreamID]
		if st == nil {
			if r.Gone || r.Header == nil {
				continue // a stream the mux is done with, reset late
			}
			ct, _ := Get(r.Header, "content-type")
			st = &muxStream{req: r, grpc: strings.HasPrefix(ct, "application/grpc")}
			m.streams[r.StreamID] = st
		}
		if st.x != nil && !r.Gone {
			m.release(st)
		}
		m.events = append(m.events, m.event(st))
		if r.Gone {
			delete(m.streams, r.StreamID)
		} else {
			m.forget(st)
		}
	}
	if errors.Is(err, errPeerGoAway) {
		err = fmt.Errorf("%w: %w", io.EOF, err) // the client's goodbye
	}
	return m.events, err
}

// event reports a stream's request as it stands.
func (m *mux) event(st *muxStream) wire.MuxEvent {
	r := st.req
	e := wire.MuxEvent{ID: r.StreamID, Proto: Name, Req: features(nil, r.Message), Ended: r.Ended, Gone: r.Gone}
	if st.grpc {
		e.Proto = GRPCName
	}
	e.Req.Owner, _ = Get(r.Header, TraceField)
	if r.Ended || r.Gone || st.x == nil && !st.ended {
		e.Req.Raw = AppendMessage(nil, Message{Header: withoutRetrace(r.Header), Data: r.Data, Trailer: withoutRetrace(r.Trailer)}, nil)
	}
	return e
}

// forget drops a stream whose request and answer have both ended. A
// stream that is over otherwise (Gone) is dropped once Feed reported it.
func (m *mux) forget(st *muxStream) {
	if st.req.Ended && st.ended {
		delete(m.streams, st.req.StreamID)
	}
}

// withoutRetrace is a header block without the agent's in-band fields,
// which are never part of a recording.
func withoutRetrace(fields []hpack.HeaderField) []hpack.HeaderField {
	if fields == nil {
		return nil
	}
	out := make([]hpack.HeaderField, 0, len(fields))
	for _, f := range fields {
		if !strings.HasPrefix(f.Name, "retrace-") {
			out = append(out, f)
		}
	}
	return out
}

func (m *mux) Answer(id uint32, resp []byte) error {
	st := m.streams[id]
	if st == nil {
		return nil // reset by the client meanwhile
	}
	msg, pace, err := ParseMessage(resp)
	if err != nil {
		return err
	}
	if msg.Header == nil {
		return fmt.Errorf("%w: no header block", ErrRecorded)
	}
	st.x = &Exchange{Response: msg, Pace: pace}
	m.release(st)
	m.forget(st)
	return nil
}

// release sends what the recording's pace allows of a stream's answer,
// given how much of the request has arrived: the header block with the
// first data (or at the end), the rest as the request grows, the
// trailer once the request has ended.
func (m *mux) release(st *muxStream) {
	if st.ended {
		return
	}
	r, x := st.req, st.x
	due := max(x.Due(len(r.Data), r.Ended), st.sent)
	if due == st.sent && !r.Ended {
		return
	}
	out := Message{Data: x.Response.Data[st.sent:due]}
	if !st.header {
		out.Interim, out.Header = x.Response.Interim, x.Response.Header
	}
	if r.Ended {
		out.End, out.Trailer = true, x.Response.Trailer
	}
	if err := m.sc.Respond(r.StreamID, out); err != nil {
		m.sc.Reset(r.StreamID, 0x2) // INTERNAL_ERROR
		return
	}
	st.sent, st.header, st.ended = due, true, out.End
}

func (m *mux) Missing(id uint32, reason string) {
	st := m.streams[id]
	if st == nil || st.ended {
		return
	}
	if st.header {
		m.sc.Reset(id, 0x2) // an answer begun cannot turn into an error
		return
	}
	msg := "retrace: " + reason
	out := Message{Header: []hpack.HeaderField{{Name: ":status", Value: "502"}, {Name: "content-type", Value: "text/plain; charset=utf-8"}},
		Data: []byte(msg), End: true}
	if st.grpc {
		out = Message{Header: []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"},
			{Name: "grpc-status", Value: "14"}, {Name: "grpc-message", Value: grpcEscape(msg)}}, End: true}
	}
	if err := m.sc.Respond(id, out); err != nil {
		m.sc.Reset(id, 0x2)
	}
	st.header, st.ended = true, true
	m.forget(st)
}

func (m *mux) Output() []byte { return m.sc.Output() }
