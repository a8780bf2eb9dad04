package hook

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"

	"github.com/retrace-dev/retrace/trace"
)

// feedAll runs data through a stream in chunks cut at the given sizes and
// returns what the parser output and what attribute handed on, with the
// traces of the pieces.
func feedAll(data []byte, cuts []byte) (outs, emitted []byte, tids []string, s *stream) {
	s = newStream(false, false, inBandTrace)
	for len(data) > 0 {
		n := len(data)
		if len(cuts) > 0 {
			n = min(int(cuts[0])%64+1, len(data))
			cuts = cuts[1:]
		}
		out := s.feed(data[:n])
		data = data[n:]
		outs = append(outs, out...)
		s.attribute(out, func() string { return "fallback" }, func(tid string, b []byte) {
			emitted = append(emitted, b...)
			tids = append(tids, tid)
		})
	}
	return outs, emitted, tids, s
}

// feedChunks feeds the chunks in order and returns the parser's output and
// the pieces attribute handed on, with their traces and lengths.
// The stream follows reads (cut anywhere by TCP); see
// TestStreamWrites for writes.
func feedChunks(chunks [][]byte) (outs, emitted []byte, tids []string, lens []int) {
	return feedChunksTo(newStream(false, false, inBandTrace), chunks)
}

func feedChunksTo(s *stream, chunks [][]byte) (outs, emitted []byte, tids []string, lens []int) {
	for _, chunk := range chunks {
		out := s.feed(chunk)
		outs = append(outs, out...)
		s.attribute(out, func() string { return "fallback" }, func(tid string, b []byte) {
			emitted = append(emitted, b...)
			tids = append(tids, tid)
			lens = append(lens, len(b))
		})
	}
	return outs, emitted, tids, lens
}

// TestStreamChargesWholeRequests: on a keep-alive stream of requests, each
// written in small chunks (as a client writes one request at a time),
// every piece handed on belongs to one request and is charged to that
// request's trace, including heads split across chunks.
func TestStreamChargesWholeRequests(t *testing.T) {
	reqs := []struct{ tid, text string }{
		{"rtaaaaaaaaaaaaaaaa", "GET /rtaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: x\r\nRetrace-Trace-Id: rtaaaaaaaaaaaaaaaa\r\nX-Long: " + string(bytes.Repeat([]byte("rtaaaaaaaaaaaaaaaa "), 20)) + "\r\n\r\n"},
		{"rtbbbbbbbbbbbbbbbb", "POST /rtbbbbbbbbbbbbbbbb HTTP/1.1\r\nRetrace-Trace-Id: rtbbbbbbbbbbbbbbbb\r\nContent-Length: 38\r\n\r\nrtbbbbbbbbbbbbbbbb rtbbbbbbbbbbbbbbbb\n"},
		{"rtcccccccccccccccc", "GET /rtcccccccccccccccc HTTP/1.1\r\nHost: y\r\nretrace-trace-id: rtcccccccccccccccc\r\nTransfer-Encoding: chunked\r\n\r\n13\r\nrtcccccccccccccccc\n\r\n0\r\n\r\n"},
	}
	for size := 1; size < 400; size += 7 {
		var chunks [][]byte
		for _, r := range reqs {
			for text := []byte(r.text); len(text) > 0; {
				n := min(size, len(text))
				chunks = append(chunks, text[:n])
				text = text[n:]
			}
		}
		outs, emitted, tids, lens := feedChunks(chunks)
		if !bytes.Equal(outs, emitted) {
			t.Fatalf("chunks of %d: emitted %q, parser output %q", size, emitted, outs)
		}
		if bytes.Contains(bytes.ToLower(outs), []byte("retrace-")) {
			t.Fatalf("chunks of %d: header not stripped: %q", size, outs)
		}
		requireOwnTraces(t, fmt.Sprintf("chunks of %d", size), emitted, tids, lens)
	}
}

var idRE = regexp.MustCompile(`rt[a-z]{16}`)

// requireOwnTraces fails the test when a piece handed on (emitted cut at
// lens) names a trace id other than the one it was charged to.
func requireOwnTraces(t *testing.T, what string, emitted []byte, tids []string, lens []int) {
	t.Helper()
	pos := 0
	for i, tid := range tids {
		piece := emitted[pos : pos+lens[i]]
		pos += lens[i]
		for _, id := range idRE.FindAll(piece, -1) {
			if string(id) != tid {
				t.Fatalf("%s: piece %q charged to %s", what, piece, tid)
			}
		}
	}
}

// TestStreamChargesPipelinedRequests: requests sent back to back (a
// pipelining client, or reads that coalesce a keep-alive client's
// requests) and cut at every size, so that one feed ends a request and
// starts the next one's head: every piece handed on is charged to the
// request its bytes belong to — the start of an unfinished head waits for
// the head to end instead of going to the previous request.
func TestStreamChargesPipelinedRequests(t *testing.T) {
	reqs := []struct{ tid, text string }{
		{"rtaaaaaaaaaaaaaaaa", "GET /rtaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: x\r\nRetrace-Trace-Id: rtaaaaaaaaaaaaaaaa\r\n\r\n"},
		{"rtbbbbbbbbbbbbbbbb", "POST /rtbbbbbbbbbbbbbbbb HTTP/1.1\r\nRetrace-Trace-Id: rtbbbbbbbbbbbbbbbb\r\nContent-Length: 38\r\n\r\nrtbbbbbbbbbbbbbbbb rtbbbbbbbbbbbbbbbb\n"},
		{"rtcccccccccccccccc", "GET /rtcccccccccccccccc HTTP/1.1\r\nHost: y\r\nretrace-trace-id: rtcccccccccccccccc\r\nTransfer-Encoding: chunked\r\n\r\n13\r\nrtcccccccccccccccc\n\r\n0\r\n\r\n"},
		{"rtdddddddddddddddd", "GET /rtdddddddddddddddd HTTP/1.1\r\nRetrace-Trace-Id: rtdddddddddddddddd\r\n\r\n"},
	}
	var all []byte
	for _, r := range reqs {
		all = append(all, r.text...)
	}
	for size := 1; size <= len(all); size++ {
		var chunks [][]byte
		for text := all; len(text) > 0; {
			n := min(size, len(text))
			chunks = append(chunks, text[:n])
			text = text[n:]
		}
		outs, emitted, tids, lens := feedChunks(chunks)
		if !bytes.Equal(outs, emitted) {
			t.Fatalf("chunks of %d: emitted %q, parser output %q", size, emitted, outs)
		}
		requireOwnTraces(t, fmt.Sprintf("chunks of %d", size), emitted, tids, lens)
		for i, tid := range tids {
			if tid == "fallback" {
				t.Fatalf("chunks of %d: piece %d charged to no request", size, i)
			}
		}
	}
}

// FuzzStream: however a stream is cut, attribute hands on exactly the
// parser's output, in order, nothing lost or doubled, and holds back at
// most holdLimit bytes.
func FuzzStream(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nRetrace-Trace-Id: rt0123456789abcdef\r\nHost: x\r\n\r\n"), []byte{3, 1, 4, 1, 5})
	f.Add([]byte("POST /a HTTP/1.1\r\nContent-Length: 5\r\nRetrace-Trace-Id: a\r\n\r\nhelloGET /b HTTP/1.1\r\nretrace-x: 1\r\n\r\n"), []byte{0, 0, 0, 9, 63})
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), []byte{1})
	f.Add([]byte("GET /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), []byte{2, 7})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		outs, emitted, _, s := feedAll(data, cuts)
		held := s.held
		if !s.holding {
			held = nil
		}
		if len(held) > holdLimit {
			t.Fatalf("holding %d bytes", len(held))
		}
		if got := append(append([]byte(nil), emitted...), held...); !bytes.Equal(got, outs) {
			t.Fatalf("emitted+held %q != parser output %q", got, outs)
		}
		var whole trace.InboundParser
		if ref := whole.Feed(nil, data, nil); !bytes.Equal(ref, outs) {
			t.Fatalf("chunked output %q != whole output %q", outs, ref)
		}
	})
}

// TestStreamWrites: a stream of written bytes charges each request's head
// whole once its method and the space after it are in (HTTP clients write
// that much in one piece, and more), and hands on at once the bytes of
// anything that does not look like HTTP, which would otherwise wait for
// bytes that never come.
func TestStreamWrites(t *testing.T) {
	reqs := []struct{ tid, text string }{
		{"rtaaaaaaaaaaaaaaaa", "GET /rtaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: x\r\nRetrace-Trace-Id: rtaaaaaaaaaaaaaaaa\r\n\r\n"},
		{"rtbbbbbbbbbbbbbbbb", "POST /rtbbbbbbbbbbbbbbbb HTTP/1.1\r\nRetrace-Trace-Id: rtbbbbbbbbbbbbbbbb\r\nContent-Length: 38\r\n\r\nrtbbbbbbbbbbbbbbbb rtbbbbbbbbbbbbbbbb\n"},
		{"rtcccccccccccccccc", "GET /rtcccccccccccccccc HTTP/1.1\r\nretrace-trace-id: rtcccccccccccccccc\r\nTransfer-Encoding: chunked\r\n\r\n13\r\nrtcccccccccccccccc\n\r\n0\r\n\r\n"},
	}
	for r := range reqs {
		text := reqs[r].text
		method := bytes.IndexByte([]byte(text), ' ') + 1
		for cut := method; cut < len(text); cut++ {
			var chunks [][]byte
			for _, before := range reqs[:r] {
				chunks = append(chunks, []byte(before.text))
			}
			chunks = append(chunks, []byte(text[:cut]), []byte(text[cut:]))
			outs, emitted, tids, lens := feedChunksTo(newStream(true, true, inBandTrace), chunks)
			if !bytes.Equal(outs, emitted) {
				t.Fatalf("request %d cut at %d: emitted %q, parser output %q", r, cut, emitted, outs)
			}
			requireOwnTraces(t, fmt.Sprintf("request %d cut at %d", r, cut), emitted, tids, lens)
		}
	}
	for _, msg := range []string{"x", "hello", "HELLO", "GET", "get / HTTP/1.1\r\n", "0000"} {
		s := newStream(true, true, inBandTrace)
		out := s.feed([]byte(msg))
		var emitted []byte
		s.attribute(out, func() string { return "" }, func(_ string, b []byte) { emitted = append(emitted, b...) })
		if string(emitted) != msg {
			t.Errorf("%q: handed on %q at once", msg, emitted)
		}
	}
}
