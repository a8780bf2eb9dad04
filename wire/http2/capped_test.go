package http2_test

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire/http2"
)

// FuzzAppendCapped: a half cut to any limit stays in the recorded form,
// within the limit whenever its blocks fit, its data a prefix of the
// original and its pace within the data kept.
func FuzzAppendCapped(f *testing.F) {
	f.Add("/a", []byte("0123456789"), "grpc-status", 4, 40)
	f.Add("", []byte{}, "", 0, -1)
	f.Fuzz(func(t *testing.T, path string, data []byte, trailer string, mark, limit int) {
		if bytes.ContainsAny([]byte(path+trailer), "\r\n") {
			return // field values never hold CR or LF
		}
		m := http2.Message{Header: []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "x-path", Value: path}}, Data: data}
		if trailer != "" {
			m.Trailer = []hpack.HeaderField{{Name: "x-t", Value: trailer}}
		}
		mark = min(max(mark, 0), len(data))
		pace := []http2.Mark{{Request: 0, Response: mark}, {Request: 5, Response: len(data)}}
		full := http2.AppendMessage(nil, m, pace)
		out, cut := http2.AppendCapped(nil, m, pace, limit)
		if limit < 0 || len(full) <= limit {
			if cut || !bytes.Equal(out, full) {
				t.Fatalf("cut a half that fits: %q", out)
			}
			return
		}
		got, gotPace, err := http2.ParseMessage(out)
		if err != nil {
			t.Fatalf("a cut half does not parse: %v: %q", err, out)
		}
		if !cut || !bytes.HasPrefix(data, got.Data) {
			t.Fatalf("cut %v, data %q of %q", cut, got.Data, data)
		}
		if len(got.Data) > 0 && len(out) > limit {
			t.Fatalf("%d bytes for a limit of %d with data kept", len(out), limit)
		}
		for _, p := range gotPace {
			if p.Response > len(got.Data) {
				t.Fatalf("pace %v beyond the %d bytes kept", p, len(got.Data))
			}
		}
	})
}

// TestWithoutRetrace: every retrace-* field goes, the trace is named.
func TestWithoutRetrace(t *testing.T) {
	in := []hpack.HeaderField{{Name: ":path", Value: "/a"}, {Name: http2.TraceField, Value: "t1"},
		{Name: "retrace-replay-time", Value: "5"}, {Name: "x-retrace", Value: "kept"}}
	kept, tid := http2.WithoutRetrace(in)
	if tid != "t1" || len(kept) != 2 || kept[0].Name != ":path" || kept[1].Name != "x-retrace" {
		t.Fatalf("%q, %v", tid, kept)
	}
}
