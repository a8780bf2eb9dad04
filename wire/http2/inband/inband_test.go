package inband_test

import (
	"bytes"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire/http2/inband"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// headers is one HEADERS frame of stream id with fields, END_HEADERS set.
func headers(enc *hpack.Encoder, hb *bytes.Buffer, id byte, kv ...string) []byte {
	hb.Reset()
	for i := 0; i < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	n := hb.Len()
	f := []byte{byte(n >> 16), byte(n >> 8), byte(n), 0x1, 0x4 | 0x1, 0, 0, 0, id}
	return append(f, hb.Bytes()...)
}

func TestBlocks(t *testing.T) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	in := []byte(inband.ClientPreface)
	in = append(in, headers(enc, &hb, 1, ":path", "/a", inband.TraceField, "t1")...)
	in = append(in, headers(enc, &hb, 3, ":path", "/b")...)
	in = append(in, headers(enc, &hb, 5, ":path", "/a", inband.TraceField, "t2", "retrace-replay-time", "1")...)
	w := inband.NewRewriter(true)
	out, blocks, err := w.Write(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 || blocks[0].Trace() != "t1" || blocks[1].Trace() != "" || blocks[2].Trace() != "t2" ||
		len(blocks[2].Removed) != 2 || !blocks[1].Opens || blocks[2].End != len(out) {
		t.Fatalf("blocks %+v", blocks)
	}
	if bytes.Contains(out, []byte("t1")) || bytes.Contains(out, []byte("t2")) {
		t.Fatal("a trace reached the output")
	}
	if _, _, err := inband.NewRewriter(true).Write([]byte("GET / HTTP/1.1\r\n")); err == nil {
		t.Fatal("HTTP/1 taken for HTTP/2")
	}
}

// FuzzSplit checks that the output does not depend on how the input is
// cut.
func FuzzSplit(f *testing.F) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	seed := append([]byte(inband.ClientPreface), headers(enc, &hb, 1, ":path", "/a", inband.TraceField, "t1")...)
	seed = append(seed, 0, 0, 1, 0, 1, 0, 0, 0, 1, 'x')
	f.Add(seed, 30)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		whole, _, werr := inband.NewRewriter(true).Write(b)
		whole = bytes.Clone(whole)
		w := inband.NewRewriter(true)
		cut = min(max(cut, 0), len(b))
		var split []byte
		var serr error
		for _, p := range [][]byte{b[:cut], b[cut:]} {
			o, _, err := w.Write(p)
			if err != nil {
				serr = err
				break
			}
			split = append(split, o...)
		}
		if (werr == nil) != (serr == nil) || (werr == nil && !bytes.Equal(whole, split)) {
			t.Fatalf("whole %q (%v), split at %d %q (%v)", whole, werr, cut, split, serr)
		}
	})
}
