package trace

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestFrameRoundTripAcrossSplits(t *testing.T) {
	var stream []byte
	frames := []struct {
		tid, dst string
		payload  []byte
	}{
		{"", "10.0.0.7:3306", nil},
		{"abc", "10.0.0.7:6379", []byte("*1\r\n$4\r\nPING\r\n")},
		{"t-2.x_y", "[::1]:80", []byte(`/*retrace{"tid":"fake"}*/ payload that looks like a frame`)},
		{"a", "h:1", bytes.Repeat([]byte{0, 1, 2, 0xff}, 1000)},
	}
	for _, f := range frames {
		stream = AppendFrame(stream, f.tid, f.dst, f.payload)
	}
	readers := map[string]func([]byte) io.Reader{
		"whole":    func(b []byte) io.Reader { return bytes.NewReader(b) },
		"one-byte": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"half":     func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
	}
	for name, mk := range readers {
		t.Run(name, func(t *testing.T) {
			fr := NewFrameReader(mk(stream), 0)
			for i, f := range frames {
				h, p, err := fr.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if h.TID != f.tid || h.Dst != f.dst || h.Len != len(f.payload) || !bytes.Equal(p, f.payload) {
					t.Fatalf("frame %d: got %+v %q", i, h, p)
				}
			}
			if _, _, err := fr.Next(); err != io.EOF {
				t.Fatalf("after last frame: %v, want EOF", err)
			}
		})
	}
}

func TestPreambleDoesNotWaitForMoreBytes(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() { _, _ = pw.Write(AppendFrameHeader(nil, "", "db:3306", 0)) }()
	h, p, err := NewFrameReader(pr, 0).Next()
	if err != nil || h.Len != 0 || len(p) != 0 || h.Dst != "db:3306" {
		t.Fatalf("got %+v %q %v", h, p, err)
	}
}

func TestFrameErrors(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want error
	}{
		{"not a frame", "GET / HTTP/1.1\r\n\r\n", ErrFrameSyntax},
		{"bad tid", `/*retrace{"tid":"a b","dst":"h:1","len":0}*/`, ErrFrameSyntax},
		{"empty dst", `/*retrace{"tid":"a","dst":"","len":0}*/`, ErrFrameSyntax},
		{"negative len", `/*retrace{"tid":"a","dst":"h:1","len":-1}*/`, ErrFrameSyntax},
		{"leading zero", `/*retrace{"tid":"a","dst":"h:1","len":01}*/x`, ErrFrameSyntax},
		{"too long", `/*retrace{"tid":"a","dst":"h:1","len":999999999}*/`, ErrFrameTooLong},
		{"truncated header", `/*retrace{"tid":"a","ds`, io.ErrUnexpectedEOF},
		{"truncated payload", `/*retrace{"tid":"a","dst":"h:1","len":5}*/ab`, io.ErrUnexpectedEOF},
		{"white space", `/*retrace{"tid": "a","dst":"h:1","len":0}*/`, ErrFrameSyntax},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := NewFrameReader(bytes.NewReader([]byte(c.in)), 1<<20).Next()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func FuzzFrameReader(f *testing.F) {
	f.Add(AppendFrame(nil, "abc", "h:1", []byte("hello")))
	f.Add(AppendFrame(AppendFrameHeader(nil, "", "db:3306", 0), "x", "db:3306", []byte{0, 1}))
	f.Add([]byte(`/*retrace{"tid":"a","dst":"h:1","len":3}*/ab`))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := NewFrameReader(bytes.NewReader(in), 1<<16)
		var out []byte
		for {
			h, p, err := fr.Next()
			if err != nil {
				break
			}
			if !ValidDst(h.Dst) || (h.TID != "" && !ValidID(h.TID)) {
				t.Fatalf("decoded invalid header %+v", h)
			}
			out = AppendFrame(out, h.TID, h.Dst, p)
		}
		// Whatever decoded re-encodes to a prefix of the input.
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("re-encoding %q is not a prefix of the input", out)
		}
	})
}
