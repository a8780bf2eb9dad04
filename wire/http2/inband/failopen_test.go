package inband_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire/http2/inband"
)

// TestUnwritten: when a frame cannot be rewritten, Write returns the
// frames rewritten before it and Unwritten every byte after them as it
// came, the header block in progress included: a caller failing open
// sends both and loses nothing.
func TestUnwritten(t *testing.T) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	first := append([]byte(inband.ClientPreface), headers(enc, &hb, 1, ":path", "/a", inband.TraceField, "t1")...)
	// a HEADERS without END_HEADERS, then a DATA frame inside its block
	open := headers(enc, &hb, 3, ":path", "/b")
	open[4] &^= 0x4
	bad := []byte{0, 0, 1, 0x0, 0, 0, 0, 0, 3, 'x'}
	w := inband.NewRewriter(true)
	out, _, err := w.Write(first)
	if err != nil || w.Unwritten() != nil {
		t.Fatalf("first write: %v, %q unwritten", err, w.Unwritten())
	}
	out1 := bytes.Clone(out)
	out, _, err = w.Write(open)
	if err != nil || len(out) != 0 || !bytes.Equal(w.Unwritten(), open) {
		t.Fatalf("an open block: %q out, %q held, %v", out, w.Unwritten(), err)
	}
	tail := []byte("more bytes after the bad frame")
	out, _, err = w.Write(append(bytes.Clone(bad), tail...))
	if err == nil {
		t.Fatal("a DATA frame inside a header block was rewritten")
	}
	if len(out) != 0 {
		t.Fatalf("%q written with the error", out)
	}
	want := append(append(bytes.Clone(open), bad...), tail...)
	if !bytes.Equal(w.Unwritten(), want) {
		t.Fatalf("unwritten %q, want %q", w.Unwritten(), want)
	}
	if bytes.Contains(out1, []byte("t1")) {
		t.Fatal("the trace of the block rewritten before reached the output")
	}
}

// FuzzUnwritten: whatever the input and however it is cut, the bytes a
// Rewriter did not write when it failed are the input's tail, as it came.
func FuzzUnwritten(f *testing.F) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	seed := append([]byte(inband.ClientPreface), headers(enc, &hb, 1, ":path", "/a", inband.TraceField, "t1")...)
	f.Add(append(bytes.Clone(seed), 0, 0, 1, 9, 0, 0, 0, 0, 1, 'x'), 40)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), 3)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		w := inband.NewRewriter(true)
		cut = min(max(cut, 0), len(b))
		var fed []byte
		for _, p := range [][]byte{b[:cut], b[cut:]} {
			fed = append(fed, p...)
			if _, _, err := w.Write(p); err != nil {
				if u := w.Unwritten(); !bytes.HasSuffix(fed, u) || len(u) == 0 {
					t.Fatalf("unwritten %q is not the tail of %q", u, fed)
				}
				return
			}
			if u := w.Unwritten(); !bytes.HasSuffix(fed, u) {
				t.Fatalf("held %q is not the tail of %q", u, fed)
			}
		}
	})
}

func settings(ack bool, kv ...uint32) []byte {
	var p []byte
	for i := 0; i+1 < len(kv); i += 2 {
		p = binary.BigEndian.AppendUint16(p, uint16(kv[i]))
		p = binary.BigEndian.AppendUint32(p, kv[i+1])
	}
	flags := byte(0)
	if ack {
		flags = 1
	}
	return append([]byte{byte(len(p) >> 16), byte(len(p) >> 8), byte(len(p)), 0x4, flags, 0, 0, 0, 0}, p...)
}

// TestPeerSettings finds SETTINGS_HEADER_TABLE_SIZE among a server's
// frames fed a byte at a time, the last one winning; ACKs and other frames
// are skipped.
func TestPeerSettings(t *testing.T) {
	in := settings(false, 0x3, 100, 0x1, 8192, 0x4, 65535)
	in = append(in, 0, 0, 4, 0x8, 0, 0, 0, 0, 0, 0, 0, 1, 0) // WINDOW_UPDATE
	in = append(in, settings(true)...)
	in = append(in, settings(false, 0x1, 0)...)
	var ps inband.PeerSettings
	var got []uint32
	for i := range in {
		if v, ok := ps.Feed(in[i : i+1]); ok {
			got = append(got, v)
		}
	}
	if len(got) != 2 || got[0] != 8192 || got[1] != 0 {
		t.Fatalf("table sizes %v", got)
	}
}

// FuzzPeerSettings: the size found does not depend on how the bytes are
// cut.
func FuzzPeerSettings(f *testing.F) {
	f.Add(append(settings(false, 0x1, 100), settings(false, 0x1, 200)...), 7)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		var whole, split inband.PeerSettings
		wv, wok := whole.Feed(b)
		cut = min(max(cut, 0), len(b))
		sv, sok := split.Feed(b[:cut])
		if v, ok := split.Feed(b[cut:]); ok {
			sv, sok = v, ok
		}
		if wok != sok || wv != sv {
			t.Fatalf("whole %d %v, split at %d %d %v", wv, wok, cut, sv, sok)
		}
	})
}
