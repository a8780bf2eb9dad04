package http1

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestResponse(t *testing.T) {
	tests := []struct {
		name   string
		resp   string
		head   bool // answer to HEAD
		done   bool
		extraN int // bytes at the end that are not part of the response
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, true, 0},
		{"content-length short", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhell", false, false, 0},
		{"zero length", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, true, 0},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n", false, true, 0},
		{"chunked trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n\r\n", false, true, 0},
		{"chunked unfinished", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", false, false, 0},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", true, true, 0},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", false, true, 0},
		{"304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", false, true, 0},
		{"interim then final", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", false, true, 0},
		{"only interim", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", false, false, 0},
		{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\n\r\n", false, true, 0},
		{"until close", "HTTP/1.0 200 OK\r\n\r\nbody", false, false, 0},
		{"next response follows", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n", false, true, len("HTTP/1.1 200 OK\r\n")},
		{"HEAD then the next", "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nHTTP/1.1 404 Not Found\r\n", true, true, len("HTTP/1.1 404 Not Found\r\n")},
		{"chunked then the next", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", false, true, len("HTTP/1.1 200 OK\r\n\r\n")},
		{"not http", "+OK\r\n\r\n", false, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			whole := Response{NoBody: tc.head}
			assert.Equal(t, tc.done, whole.Feed([]byte(tc.resp)))
			bytewise := Response{NoBody: tc.head}
			done := false
			for i := range len(tc.resp) {
				done = bytewise.Feed([]byte{tc.resp[i]}) || done
			}
			assert.Equal(t, tc.done, done, "fed a byte at a time")

			// Take says where the response ends, however it is cut
			want := len(tc.resp) - tc.extraN
			took := Response{NoBody: tc.head}
			assert.Equal(t, want, took.Take([]byte(tc.resp)))
			taken, bytewise := 0, Response{NoBody: tc.head}
			for i := range len(tc.resp) {
				taken += bytewise.Take([]byte{tc.resp[i]})
			}
			assert.Equal(t, want, taken, "taken a byte at a time")
		})
	}
}

func FuzzResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"), 7, false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), 40, false)
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 OK\r\n\r\n"), 3, true)
	f.Fuzz(func(t *testing.T, b []byte, cut int, head bool) {
		whole := Response{NoBody: head}
		w := whole.Feed(b)
		split := Response{NoBody: head}
		if cut < 0 {
			cut = -cut
		}
		cut %= len(b) + 1
		s := split.Feed(b[:cut])
		s = split.Feed(b[cut:]) || s
		if w != s {
			t.Fatalf("whole says done=%v, split at %d says %v", w, cut, s)
		}
		// the bytes Take consumes do not depend on the cut either, and
		// end exactly where the response does
		tw := Response{NoBody: head}
		n := tw.Take(b)
		ts := Response{NoBody: head}
		m := ts.Take(b[:cut])
		if m == cut {
			m += ts.Take(b[cut:])
		}
		if n != m || tw.Done() != ts.Done() {
			t.Fatalf("whole took %d (done %v), split at %d took %d (done %v)", n, tw.Done(), cut, m, ts.Done())
		}
		if tw.Done() {
			if again := (Response{NoBody: head}); !again.Feed(b[:n]) {
				t.Fatalf("the response ends at %d but its first %d bytes are not complete", n, n)
			}
			if n > 0 {
				if short := (Response{NoBody: head}); short.Feed(b[:n-1]) {
					t.Fatalf("the response ends at %d but is complete at %d", n, n-1)
				}
			}
		} else if n != len(b) {
			t.Fatalf("not done, yet took %d of %d bytes", n, len(b))
		}
	})
}

// FuzzMayFrame: every line whose name endHead reads as Content-Length or
// Transfer-Encoding passes mayFrame's look at its first byte.
func FuzzMayFrame(f *testing.F) {
	for _, s := range []string{"Content-Length: 5", " \tcontent-length : 5", "TRANSFER-ENCODING:chunked",
		"\u00a0Content-Length: 5", "\u0085transfer-encoding: chunked", "\v\fContent-Length:1", "Date: x", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		name, _, ok := bytes.Cut(line, []byte(":"))
		name = bytes.TrimSpace(name)
		if ok && (bytes.EqualFold(name, []byte("content-length")) || bytes.EqualFold(name, []byte("transfer-encoding"))) &&
			!mayFrame(line) {
			t.Fatalf("mayFrame(%q) = false", line)
		}
	})
}
