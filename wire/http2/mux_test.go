package http2_test

import (
	"bytes"
	"testing"

	xhttp2 "golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http2"
)

// FuzzMux feeds a Mux arbitrary client bytes in two pieces, answering
// every request as it opens (alternately from a paced recorded answer and
// as missing): it never panics, reports each request's end or abandonment
// at most once, and what it writes is HTTP/2 a client can frame.
func FuzzMux(f *testing.F) {
	f.Add(handFrames(http2.Client), 11)
	tap := recordGRPC(f, []string{"fuzz-seed"})
	client, _ := tap.bytes()
	f.Add(client, 100)
	resp := http2.AppendMessage(nil, http2.Message{
		Header:  []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}},
		Data:    bytes.Repeat([]byte{'x'}, 70000),
		Trailer: []hpack.HeaderField{{Name: "grpc-status", Value: "0"}},
	}, []http2.Mark{{Request: 0, Response: 5}, {Request: 10, Response: 40000}})
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		mp := http2.Protocol.(wire.Multiplexed)
		m := mp.NewMux(wire.Env{MaxMessage: 1 << 20})
		out := http2.NewReader(http2.Server, http2.Limits{})
		over := map[uint32]bool{}
		cut = min(max(cut, 0), len(b))
		for _, piece := range [][]byte{b[:cut], b[cut:]} {
			evs, _ := m.Feed(piece)
			for _, e := range evs {
				if over[e.ID] {
					t.Fatalf("stream %d reported after it was over", e.ID)
				}
				if e.Ended || e.Gone {
					over[e.ID] = true
				}
				if e.ID%4 == 1 {
					if err := m.Answer(e.ID, resp); err != nil {
						t.Fatal(err)
					}
				} else {
					m.Missing(e.ID, "fuzz")
				}
			}
			out.Feed(m.Output())
			for {
				fr, err := out.Next()
				if err != nil {
					t.Fatalf("the Mux wrote bad frames: %v", err)
				}
				if fr == nil {
					break
				}
			}
		}
	})
}

// TestMuxStreamEvents: a stream is reported as it opens (its features
// and trace, its recorded form without the in-band field), when the
// client resets it (Gone), and once an answer given while the client was
// still sending has closed it (Gone at the next Feed).
func TestMuxStreamEvents(t *testing.T) {
	var cb, hb bytes.Buffer
	fr := xhttp2.NewFramer(&cb, nil)
	he := hpack.NewEncoder(&hb)
	headers := func(id uint32, path string) {
		hb.Reset()
		for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: path},
			{Name: ":authority", Value: "x"}, {Name: "content-type", Value: "application/grpc"}, {Name: http2.TraceField, Value: "t1"}} {
			_ = he.WriteField(f)
		}
		_ = fr.WriteHeaders(xhttp2.HeadersFrameParam{StreamID: id, EndHeaders: true, BlockFragment: hb.Bytes()})
	}
	take := func() []byte { b := bytes.Clone(cb.Bytes()); cb.Reset(); return b }
	m := http2.Protocol.(wire.Multiplexed).NewMux(wire.Env{})
	cb.WriteString(http2.ClientPreface)
	_ = fr.WriteSettings()
	headers(1, "/s/A")
	headers(3, "/s/B")
	evs, err := m.Feed(take())
	if err != nil || len(evs) != 2 {
		t.Fatalf("opened: %+v %v", evs, err)
	}
	e := evs[0]
	if e.ID != 1 || e.Proto != http2.GRPCName || e.Req.Op != "POST /s/A" || e.Req.Owner != "t1" || e.Ended || e.Gone ||
		bytes.Contains(e.Req.Raw, []byte("retrace-")) || !bytes.Contains(e.Req.Raw, []byte(":path: /s/A\r\n")) {
		t.Errorf("stream 1 opened as %+v %q", e, e.Req.Raw)
	}
	_ = fr.WriteRSTStream(1, xhttp2.ErrCodeCancel)
	if evs, _ = m.Feed(take()); len(evs) != 1 || evs[0].ID != 1 || !evs[0].Gone {
		t.Errorf("reset: %+v", evs)
	}
	m.Missing(3, "no such call")
	_ = fr.WritePing(false, [8]byte{})
	if evs, _ = m.Feed(take()); len(evs) != 1 || evs[0].ID != 3 || !evs[0].Gone {
		t.Errorf("answered while sending: %+v", evs)
	}
	out := http2.NewReader(http2.Server, http2.Limits{})
	out.Feed(m.Output())
	var status string
	for {
		f, err := out.Next()
		if err != nil || f == nil {
			break
		}
		if f.StreamID == 3 && len(f.Fields) > 0 {
			status, _ = http2.Get(f.Fields, "grpc-status")
		}
	}
	if status != "14" {
		t.Errorf("missing answer's grpc-status %q", status)
	}
}
