package http2_test

import (
	"bytes"
	"testing"

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
