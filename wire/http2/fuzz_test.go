package http2_test

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	xhttp2 "golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/http2/inband"
)

// handFrames is one of every frame type, a header block over
// CONTINUATIONs, padding and a dynamic-table size update, as one side.
func handFrames(side http2.Side) []byte {
	var b, hb bytes.Buffer
	if side == http2.Client {
		b.WriteString(http2.ClientPreface)
	}
	fw := xhttp2.NewFramer(&b, nil)
	enc := hpack.NewEncoder(&hb)
	enc.SetMaxDynamicTableSizeLimit(8192)
	enc.SetMaxDynamicTableSize(2048)
	block := func(fields ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	_ = fw.WriteSettings(xhttp2.Setting{ID: xhttp2.SettingHeaderTableSize, Val: 8192}, xhttp2.Setting{ID: xhttp2.SettingInitialWindowSize, Val: 1 << 20})
	_ = fw.WriteSettingsAck()
	_ = fw.WriteWindowUpdate(0, 1000)
	_ = fw.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	var h []byte
	if side == http2.Client {
		h = block(":method", "POST", ":path", "/a.B/C", ":scheme", "http", ":authority", "x", "content-type", "application/grpc", "x-trace", "t1")
	} else {
		h = block(":status", "200", "content-type", "application/grpc", "x-trace", "t1")
	}
	_ = fw.WriteHeaders(xhttp2.HeadersFrameParam{StreamID: 1, BlockFragment: h[:3], EndHeaders: false, Priority: xhttp2.PriorityParam{StreamDep: 0, Weight: 15}})
	_ = fw.WriteContinuation(1, false, h[3:5])
	_ = fw.WriteContinuation(1, true, h[5:])
	_ = fw.WriteDataPadded(1, false, []byte{0, 0, 0, 0, 2, 8, 1}, []byte{0, 0, 0})
	_ = fw.WriteData(1, side == http2.Client, nil)
	if side == http2.Server {
		_ = fw.WriteHeaders(xhttp2.HeadersFrameParam{StreamID: 1, BlockFragment: block("grpc-status", "0"), EndHeaders: true, EndStream: true})
		_ = fw.WritePushPromise(xhttp2.PushPromiseParam{StreamID: 3, PromiseID: 2, BlockFragment: block(":method", "GET", ":path", "/p"), EndHeaders: true})
	}
	_ = fw.WriteHeaders(xhttp2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":method", "GET", ":path", "/r"), EndHeaders: true})
	_ = fw.WriteRSTStream(3, xhttp2.ErrCodeCancel)
	_ = fw.WritePriority(5, xhttp2.PriorityParam{StreamDep: 3, Weight: 1})
	_ = fw.WriteGoAway(3, xhttp2.ErrCodeNo, []byte("bye"))
	return b.Bytes()
}

// frames reads all of b as side, fed in pieces cut at the given points.
func frames(side http2.Side, b []byte, cuts ...int) ([]string, error) {
	r := http2.NewReader(side, http2.Limits{MaxFrame: 1 << 16, MaxHeaderBlock: 1 << 16})
	var out []string
	prev := 0
	cuts = append(cuts, len(b))
	for _, c := range cuts {
		c = min(max(c, prev), len(b))
		r.Feed(b[prev:c])
		prev = c
		for {
			f, err := r.Next()
			if err != nil {
				return out, err
			}
			if f == nil {
				break
			}
			checkFieldsRoundTrip(f)
			out = append(out, fmt.Sprintf("%v %d %x %v %v %v %d %d %d", f.FrameHeader, f.Data, f.Ping, f.Fields, f.Settings, f.EndStream, f.Code, f.Increment, f.PromiseID))
		}
	}
	return out, nil
}

// checkFieldsRoundTrip panics when a header block's fields do not survive
// encoding and decoding again.
func checkFieldsRoundTrip(f *http2.Frame) {
	if f.Fields == nil {
		return
	}
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, hf := range f.Fields {
		if err := enc.WriteField(hf); err != nil {
			panic(err)
		}
	}
	got, err := hpack.NewDecoder(4096, nil).DecodeFull(b.Bytes())
	if err != nil {
		panic(err)
	}
	for i := range got {
		got[i].Sensitive = f.Fields[i].Sensitive
	}
	if !reflect.DeepEqual(got, f.Fields) {
		panic(fmt.Sprintf("fields %v re-encoded as %v", f.Fields, got))
	}
}

func seedReal(f *testing.F) {
	tap := recordGRPC(f, []string{"fuzz-seed"})
	client, server := tap.bytes()
	f.Add(uint8(http2.Client), client, 7, 1000)
	f.Add(uint8(http2.Server), server, 9, 5000)
}

// FuzzReader checks that a direction frames the same whatever the split,
// and that decoded header fields round-trip.
func FuzzReader(f *testing.F) {
	f.Add(uint8(http2.Client), handFrames(http2.Client), 3, 40)
	f.Add(uint8(http2.Server), handFrames(http2.Server), 1, 9)
	seedReal(f)
	f.Fuzz(func(t *testing.T, side uint8, b []byte, cut1, cut2 int) {
		s := http2.Side(side % 2)
		whole, werr := frames(s, b)
		split, serr := frames(s, b, cut1, cut1+cut2)
		if (werr == nil) != (serr == nil) || !reflect.DeepEqual(whole, split) {
			t.Fatalf("whole: %v (%v)\nsplit at %d,%d: %v (%v)", whole, werr, cut1, cut2, split, serr)
		}
	})
}

// FuzzServerConn feeds a ServerConn arbitrary client bytes, answers every
// request, and checks that what it writes is a valid server direction.
func FuzzServerConn(f *testing.F) {
	f.Add(handFrames(http2.Client), 11)
	tap := recordGRPC(f, []string{"fuzz-seed"})
	client, _ := tap.bytes()
	f.Add(client, 100)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		sc := http2.NewServerConn(http2.ServerConfig{})
		out := http2.NewReader(http2.Server, http2.Limits{})
		cut = min(max(cut, 0), len(b))
		for _, piece := range [][]byte{b[:cut], b[cut:]} {
			reqs, err := sc.Feed(piece)
			for _, r := range reqs {
				if r.Ended {
					_ = sc.Respond(r.StreamID, http2.Message{
						Header:  []hpack.HeaderField{{Name: ":status", Value: "200"}},
						Data:    bytes.Repeat([]byte{'x'}, 70000),
						Trailer: []hpack.HeaderField{{Name: "grpc-status", Value: "0"}},
						End:     true,
					})
				}
			}
			out.Feed(sc.Output())
			for {
				fr, rerr := out.Next()
				if rerr != nil {
					t.Fatalf("the ServerConn wrote bad frames: %v", rerr)
				}
				if fr == nil {
					break
				}
			}
			if err != nil {
				return
			}
		}
	})
}

// summary reads all of b as side and describes each frame by what a
// Rewriter keeps: type, stream, fields without retrace-*, data, end.
func summary(side http2.Side, b []byte) ([]string, error) {
	r := http2.NewReader(side, http2.Limits{MaxTable: 64 << 10})
	r.Feed(b)
	var out []string
	for {
		f, err := r.Next()
		if err != nil || f == nil {
			return out, err
		}
		var kept []hpack.HeaderField
		for _, hf := range f.Fields {
			if !dropRetrace(hf.Name) {
				hf.Sensitive = false
				kept = append(kept, hf)
			}
		}
		out = append(out, fmt.Sprintf("%v %d %v %q %v", f.Type, f.StreamID, kept, f.Data, f.EndStream))
	}
}

// FuzzRewriter checks that a rewritten direction, fed in two pieces, reads
// as the original without the dropped fields.
func FuzzRewriter(f *testing.F) {
	f.Add(uint8(http2.Client), handFrames(http2.Client), 30)
	f.Add(uint8(http2.Server), handFrames(http2.Server), 2)
	tap := recordGRPC(f, []string{"fuzz-seed"})
	client, server := tap.bytes()
	f.Add(uint8(http2.Client), client, 500)
	f.Add(uint8(http2.Server), server, 77)
	f.Fuzz(func(t *testing.T, side uint8, b []byte, cut int) {
		s := http2.Side(side % 2)
		want, werr := summary(s, b)
		if werr != nil {
			return
		}
		rw := inband.NewRewriter(s == http2.Client)
		cut = min(max(cut, 0), len(b))
		var out []byte
		for _, piece := range [][]byte{b[:cut], b[cut:]} {
			o, _, err := rw.Write(piece)
			if err != nil {
				t.Fatalf("rewriting bytes that read: %v", err)
			}
			out = append(out, o...)
		}
		got, err := summary(s, out)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("rewritten (%v):\n%v\nwant\n%v", err, got, want)
		}
	})
}
