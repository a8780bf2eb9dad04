package capture

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRespFramer(t *testing.T) {
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
		{"next response follows", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n", false, true, 0},
		{"not http", "+OK\r\n\r\n", false, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			whole := respFramer{noBody: tc.head}
			assert.Equal(t, tc.done, whole.feed([]byte(tc.resp)))
			bytewise := respFramer{noBody: tc.head}
			done := false
			for i := range len(tc.resp) {
				done = bytewise.feed([]byte{tc.resp[i]}) || done
			}
			assert.Equal(t, tc.done, done, "fed a byte at a time")
		})
	}
}

func FuzzRespFramer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"), 7, false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), 40, false)
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 OK\r\n\r\n"), 3, true)
	f.Fuzz(func(t *testing.T, b []byte, cut int, head bool) {
		whole := respFramer{noBody: head}
		w := whole.feed(b)
		split := respFramer{noBody: head}
		if cut < 0 {
			cut = -cut
		}
		cut %= len(b) + 1
		s := split.feed(b[:cut])
		s = split.feed(b[cut:]) || s
		if w != s {
			t.Fatalf("whole says done=%v, split at %d says %v", w, cut, s)
		}
	})
}
