package trace

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// event is what a test records of one onRequest call.
type event struct {
	head RequestHead
	// start is the request's first byte as an offset in the whole output
	// stream (Feed's offset plus what earlier calls returned).
	start int
}

// feedAll feeds the chunks to a fresh parser in order, as a connection's
// reads would, and returns the concatenated output and the events. A second
// parser is fed the same chunks in place (a copy of each, as its own
// output buffer) whenever it holds nothing back, and must return the same
// bytes and report the same requests.
func feedAll(t testing.TB, chunks ...[]byte) ([]byte, []event, *InboundParser) {
	t.Helper()
	var p, q InboundParser
	var all []byte
	var evs, qevs []event
	var heads []pendingHead
	for _, c := range chunks {
		before := len(all)
		out := p.Feed(nil, c, func(h RequestHead, off int) {
			evs = append(evs, event{h, before + off})
		})
		qon := func(h RequestHead, off int) { qevs = append(qevs, event{h, before + off}) }
		var qout []byte
		if q.Held() == 0 {
			buf := bytes.Clone(c)
			qout = q.Feed(buf[:0], buf, qon)
			if len(qout) > 0 && &qout[0] != &buf[0] {
				t.Fatalf("Feed in place of %q returned another array", c)
			}
		} else {
			qout = q.Feed(nil, c, qon)
		}
		if !bytes.Equal(out, qout) {
			t.Fatalf("Feed(%q): %q, in place %q", c, out, qout)
		}
		if !reflect.DeepEqual(evs, qevs) {
			t.Fatalf("Feed(%q): requests %+v, in place %+v", c, evs, qevs)
		}
		if len(out) > len(c)+MaxHeld {
			t.Fatalf("Feed(%q) returned %d bytes, more than input+MaxHeld", c, len(out))
		}
		if p.Held() > MaxHeld {
			t.Fatalf("Held() = %d > MaxHeld", p.Held())
		}
		if s, ok := p.HeadStart(); ok {
			heads = append(heads, pendingHead{before + s, len(evs)})
		}
		all = append(all, out...)
	}
	// A head in progress at the end of a read is the head of the next
	// request reported, and starts where that request does.
	for _, h := range heads {
		if h.next < len(evs) && evs[h.next].start != h.start {
			t.Fatalf("HeadStart() said request %d starts at %d, onRequest says %d", h.next, h.start, evs[h.next].start)
		}
	}
	return all, evs, &p
}

type pendingHead struct{ start, next int }

const (
	reqA = "GET /orders/1?x=y HTTP/1.1\r\n" +
		"Host: svc\r\n" +
		"Retrace-Trace-Id: rec-1.a_b\r\n" +
		"User-Agent: t\r\n" +
		"retrace-replay-time: 1764411323123456789\r\n" +
		"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n" +
		"RETRACE-OTHER: whatever: it is\r\n" +
		"\r\n"
	reqAClean = "GET /orders/1?x=y HTTP/1.1\r\n" +
		"Host: svc\r\n" +
		"User-Agent: t\r\n" +
		"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n" +
		"\r\n"
	reqB = "POST /pay HTTP/1.1\r\n" +
		"Retrace-Trace-Id: rec-2\r\n" +
		"Content-Length: 32\r\n" +
		"Retrace-Replay-Time: 5\r\n" +
		"\r\n" +
		"Retrace-Trace-Id: in-body\r\n\r\nabc"
	reqBClean = "POST /pay HTTP/1.1\r\n" +
		"Content-Length: 32\r\n" +
		"\r\n" +
		"Retrace-Trace-Id: in-body\r\n\r\nabc"
	reqC = "PUT /c HTTP/1.1\r\n" +
		"Transfer-Encoding: chunked\r\n" +
		"Retrace-Trace-Id: rec-3\r\n" +
		"\r\n" +
		"1b;ext=1\r\nRetrace-Trace-Id: chunk\r\n\r\n\r\n" +
		"0\r\n" +
		"Retrace-Trace-Id: trailer\r\n" +
		"\r\n"
	reqCClean = "PUT /c HTTP/1.1\r\n" +
		"Transfer-Encoding: chunked\r\n" +
		"\r\n" +
		"1b;ext=1\r\nRetrace-Trace-Id: chunk\r\n\r\n\r\n" +
		"0\r\n" +
		"Retrace-Trace-Id: trailer\r\n" +
		"\r\n"
)

func TestInboundParserStreams(t *testing.T) {
	replayA := time.Unix(0, 1764411323123456789)
	tests := []struct {
		name  string
		in    string
		want  string
		heads []RequestHead
		pass  bool
	}{
		{
			name: "several retrace headers",
			in:   reqA, want: reqAClean,
			heads: []RequestHead{{TraceID: "rec-1.a_b", ReplayTime: replayA,
				TraceParent: "4bf92f3577b34da6a3ce929d0e0e4736", Method: "GET", Path: "/orders/1?x=y", Stripped: 3}},
		},
		{
			name: "keep-alive: each request its own trace, bodies untouched",
			in:   reqA + reqB + reqC, want: reqAClean + reqBClean + reqCClean,
			heads: []RequestHead{
				{TraceID: "rec-1.a_b", ReplayTime: replayA, TraceParent: "4bf92f3577b34da6a3ce929d0e0e4736", Method: "GET", Path: "/orders/1?x=y", Stripped: 3},
				{TraceID: "rec-2", ReplayTime: time.Unix(0, 5), Method: "POST", Path: "/pay", Stripped: 2},
				{TraceID: "rec-3", Method: "PUT", Path: "/c", Stripped: 1},
			},
		},
		{
			name: "request without retrace header",
			in:   "GET / HTTP/1.0\r\nHost: a\r\n\r\n", want: "GET / HTTP/1.0\r\nHost: a\r\n\r\n",
			heads: []RequestHead{{Method: "GET", Path: "/"}},
		},
		{
			name: "invalid id is stripped and flagged",
			in:   "GET / HTTP/1.1\r\nRetrace-Trace-Id: bad id!\r\n\r\n", want: "GET / HTTP/1.1\r\n\r\n",
			heads: []RequestHead{{BadTraceID: true, BadValue: "bad id!", Method: "GET", Path: "/", Stripped: 1}},
		},
		{
			name: "too long id",
			in:   "GET / HTTP/1.1\r\nRetrace-Trace-Id: " + strings.Repeat("a", 65) + "\r\n\r\n", want: "GET / HTTP/1.1\r\n\r\n",
			heads: []RequestHead{{BadTraceID: true, BadValue: strings.Repeat("a", 65), Method: "GET", Path: "/", Stripped: 1}},
		},
		{
			name: "two different ids: neither is used",
			in:   "GET / HTTP/1.1\r\nRetrace-Trace-Id: a\r\nRetrace-Trace-Id: b\r\n\r\n", want: "GET / HTTP/1.1\r\n\r\n",
			heads: []RequestHead{{BadTraceID: true, BadValue: "b", Method: "GET", Path: "/", Stripped: 2}},
		},
		{
			name: "bad replay time",
			in:   "GET / HTTP/1.1\r\nRetrace-Replay-Time: soon\r\nRetrace-Trace-Id: x\r\n\r\n", want: "GET / HTTP/1.1\r\n\r\n",
			heads: []RequestHead{{TraceID: "x", BadReplayTime: true, BadValue: "soon", Method: "GET", Path: "/", Stripped: 2}},
		},
		{
			name: "value white space is trimmed, bare LF line ends",
			in:   "GET / HTTP/1.1\nRetrace-Trace-Id: \t x \t\nA: b\n\n", want: "GET / HTTP/1.1\nA: b\n\n",
			heads: []RequestHead{{TraceID: "x", Method: "GET", Path: "/", Stripped: 1}},
		},
		{
			name: "folded retrace header is stripped whole",
			in:   "GET / HTTP/1.1\r\nRetrace-Trace-Id: x\r\n y\r\nA: b\r\n c\r\n\r\n", want: "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
			heads: []RequestHead{{BadTraceID: true, Method: "GET", Path: "/", Stripped: 1}},
		},
		{
			name:  "names that only start like retrace are kept",
			in:    "GET / HTTP/1.1\r\nRetrace: 1\r\nRetraceX-Id: 2\r\nRetrac: 3\r\nX-Retrace-Trace-Id: 4\r\n\r\n",
			want:  "GET / HTTP/1.1\r\nRetrace: 1\r\nRetraceX-Id: 2\r\nRetrac: 3\r\nX-Retrace-Trace-Id: 4\r\n\r\n",
			heads: []RequestHead{{Method: "GET", Path: "/"}},
		},
		{
			name:  "odd header names do not stop stripping",
			in:    "GET / HTTP/1.1\r\nX Foo: 1\r\n: empty\r\nRetrace-Trace-Id : x\r\nRetrace-Trace-Id: y\r\n\r\n",
			want:  "GET / HTTP/1.1\r\nX Foo: 1\r\n: empty\r\n\r\n",
			heads: []RequestHead{{TraceID: "y", Method: "GET", Path: "/", Stripped: 2}},
		},
		{
			name:  "invalid traceparent ignored",
			in:    "GET / HTTP/1.1\r\ntraceparent: 00-00000000000000000000000000000000-00f067aa0ba902b7-01\r\n\r\n",
			want:  "GET / HTTP/1.1\r\ntraceparent: 00-00000000000000000000000000000000-00f067aa0ba902b7-01\r\n\r\n",
			heads: []RequestHead{{Method: "GET", Path: "/"}},
		},
		{
			name: "TLS client hello passes through",
			in:   "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03Retrace-Trace-Id: x\r\n",
			want: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03Retrace-Trace-Id: x\r\n",
			pass: true,
		},
		{
			name: "HTTP/2 preface passes through",
			in:   "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nRetrace-Trace-Id: x\r\n",
			want: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nRetrace-Trace-Id: x\r\n",
			pass: true,
		},
		{
			name:  "unsupported transfer coding: pass-through after the head",
			in:    "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nRetrace-Trace-Id: x\r\n\r\nGET / HTTP/1.1\r\nRetrace-Trace-Id: y\r\n\r\n",
			want:  "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nGET / HTTP/1.1\r\nRetrace-Trace-Id: y\r\n\r\n",
			heads: []RequestHead{{TraceID: "x", Method: "POST", Path: "/", Stripped: 1}},
			pass:  true,
		},
		{
			name: "conflicting content lengths: pass-through",
			in:   "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\nRetrace-Trace-Id: x\r\n\r\n",
			want: "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\nRetrace-Trace-Id: x\r\n\r\n",
			pass: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, evs, p := feedAll(t, []byte(tt.in))
			if string(out) != tt.want {
				t.Errorf("output\n got %q\nwant %q", out, tt.want)
			}
			if len(evs) != len(tt.heads) {
				t.Fatalf("got %d requests %+v, want %d", len(evs), evs, len(tt.heads))
			}
			for i, e := range evs {
				assertHead(t, i, e.head, tt.heads[i])
			}
			if p.PassThrough() != tt.pass {
				t.Errorf("PassThrough() = %v, want %v", p.PassThrough(), tt.pass)
			}
		})
	}
}

func assertHead(t *testing.T, i int, got, want RequestHead) {
	t.Helper()
	if !got.ReplayTime.Equal(want.ReplayTime) {
		t.Errorf("request %d: ReplayTime %v, want %v", i, got.ReplayTime, want.ReplayTime)
	}
	got.ReplayTime, want.ReplayTime = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got.Random, want.Random) {
		t.Errorf("request %d: Random %+v, want %+v", i, got.Random, want.Random)
	}
	got.Random, want.Random = nil, nil
	if got != want {
		t.Errorf("request %d:\n got %+v\nwant %+v", i, got, want)
	}
}

// TestInboundParserEverySplit feeds a keep-alive stream of four requests
// (several Retrace headers, a Content-Length body and a chunked body that
// contain header-like text, odd and folded header lines) cut in two, then in three, at every position,
// and in one-byte reads: output and events must not depend on the cuts.
func TestInboundParserEverySplit(t *testing.T) {
	// reqD: odd header names, a folded Retrace header, bare LF.
	const reqD = "GET /d HTTP/1.1\nX Foo: 1\nretrace-trace-id: rec-4\n folded\nA: b\n c\nRETRACE-x:\n\n"
	const reqDClean = "GET /d HTTP/1.1\nX Foo: 1\nA: b\n c\n\n"
	in := []byte(reqA + reqB + reqC + reqD)
	wantOut, wantEvs, _ := feedAll(t, in)
	if string(wantOut) != reqAClean+reqBClean+reqCClean+reqDClean || len(wantEvs) != 4 || !wantEvs[3].head.BadTraceID {
		t.Fatalf("whole stream: got %q with %d requests", wantOut, len(wantEvs))
	}
	check := func(name string, chunks ...[]byte) {
		t.Helper()
		out, evs, p := feedAll(t, chunks...)
		if !bytes.Equal(out, wantOut) {
			t.Fatalf("%s: output\n got %q\nwant %q", name, out, wantOut)
		}
		if len(evs) != len(wantEvs) {
			t.Fatalf("%s: %d requests, want %d", name, len(evs), len(wantEvs))
		}
		for i := range evs {
			if evs[i].start != wantEvs[i].start {
				t.Fatalf("%s: request %d starts at %d, want %d", name, i, evs[i].start, wantEvs[i].start)
			}
			assertHead(t, i, evs[i].head, wantEvs[i].head)
		}
		if !p.Idle() || p.Held() != 0 {
			t.Fatalf("%s: parser not idle at the end (held %d)", name, p.Held())
		}
	}
	for i := 0; i <= len(in); i++ {
		check(fmt.Sprintf("split at %d", i), in[:i], in[i:])
	}
	for i := 0; i <= len(in); i += 3 {
		for j := i; j <= len(in); j += 5 {
			check(fmt.Sprintf("split at %d and %d", i, j), in[:i], in[i:j], in[j:])
		}
	}
	var bytewise [][]byte
	for i := range in {
		bytewise = append(bytewise, in[i:i+1])
	}
	check("one byte per read", bytewise...)
}

func TestInboundParserEventOffsets(t *testing.T) {
	var p InboundParser
	var offs []int
	on := func(_ RequestHead, off int) { offs = append(offs, off) }
	// Two pipelined requests in one read, after 3 bytes left in out.
	out := p.Feed([]byte("xyz"), []byte(reqA+reqB), on)
	if want := []int{3, 3 + len(reqAClean)}; fmt.Sprint(offs) != fmt.Sprint(want) {
		t.Fatalf("offsets %v, want %v", offs, want)
	}
	if string(out) != "xyz"+reqAClean+reqBClean {
		t.Fatalf("output %q", out)
	}
	// A request whose line arrived in an earlier read starts before out.
	offs = nil
	out = p.Feed(nil, []byte("GET / HTTP/1.1\r\n"), on)
	out2 := p.Feed([]byte("ab"), []byte("\r\n"), on)
	if len(offs) != 1 || offs[0] != 2-len(out) {
		t.Fatalf("offsets %v, want [%d]", offs, 2-len(out))
	}
	if string(out2) != "ab\r\n" {
		t.Fatalf("output %q", out2)
	}
}

func TestInboundParserHoldsOnlyAPrefix(t *testing.T) {
	var p InboundParser
	out := p.Feed(nil, []byte("GET / HTTP/1.1\r\nRetrace"), nil)
	if string(out) != "GET / HTTP/1.1\r\n" || p.Held() != len("Retrace") {
		t.Fatalf("output %q, held %d", out, p.Held())
	}
	out = p.Feed(nil, []byte("X: 1\r\n"), nil)
	if string(out) != "RetraceX: 1\r\n" || p.Held() != 0 {
		t.Fatalf("output %q, held %d", out, p.Held())
	}
}

func TestLikelyHTTP(t *testing.T) {
	for in, want := range map[string]bool{
		"GET":                        false, // a word: the method is not over
		"GET ":                       true,
		"M-SEARCH /x":                true,
		"get /":                      false,
		"Ping ":                      false,
		"0 * HTTP/1.0\r\n":           false,
		"hello":                      false,
		"HELLO":                      false,
		"HELLO WORLD":                false,
		"HELLO WORLD HTTP/1.1\r\n":   false,
		"GET http://x/ HTTP/1.1\r\n": true,
		"GET HTTPS://x/":             true,
		"GET ht":                     true,
		"CONNECT x:443 HTTP/1.1\r\n": true,
		"OPTIONS * HTTP/1.1\r\n":     true,
		"GET / HTTP/1.1\r\nHost":     true,
		"GET / HTTP/1.1\r\n\r\n":     false, // no head in progress
		"GET / HTTP/1.1\r\n\r\nput ": false, // the method of the head in progress
		"get / HTTP/1.1\r\n\r\nPUT ": true,
	} {
		var p InboundParser
		p.Feed(nil, []byte(in), nil)
		if got := p.LikelyHTTP(); got != want {
			t.Errorf("after %q: LikelyHTTP() = %v, want %v", in, got, want)
		}
	}
}

func TestTargetEndMatchesBytes(t *testing.T) {
	naive := func(b []byte) int {
		for i, c := range b {
			if c <= ' ' || c == 0x7f {
				return i
			}
		}
		return len(b)
	}
	for c := range 256 {
		for n := range 20 {
			for pos := range n {
				for _, fill := range []byte{'a', 0x80, 0xff, '!'} {
					b := bytes.Repeat([]byte{fill}, n)
					b[pos] = byte(c)
					if got, want := targetEnd(b), naive(b); got != want {
						t.Fatalf("targetEnd(%q) = %d, want %d", b, got, want)
					}
				}
			}
		}
	}
}

// NoPath changes nothing but RequestHead.Path, which it leaves empty; the
// target still counts for LikelyHTTP.
func TestInboundParserNoPath(t *testing.T) {
	stream := []byte(reqA + reqB + "GET /x?y=1 HTTP/1.1\r\nRetrace-Trace-Id: ab\r\nHost: h\r\n\r\n")
	run := func(noPath bool) ([]byte, []RequestHead) {
		p := InboundParser{NoPath: noPath}
		var heads []RequestHead
		out := p.Feed(nil, stream, func(h RequestHead, _ int) { heads = append(heads, h) })
		return out, heads
	}
	want, wantHeads := run(false)
	got, gotHeads := run(true)
	assert.Equal(t, string(want), string(got))
	require.Len(t, gotHeads, len(wantHeads))
	for i := range wantHeads {
		assert.NotEmpty(t, wantHeads[i].Path)
		assert.Empty(t, gotHeads[i].Path)
		wantHeads[i].Path = ""
		assert.Equal(t, wantHeads[i], gotHeads[i])
	}
	p := InboundParser{NoPath: true}
	p.Feed(nil, []byte("HELLO world"), nil)
	assert.False(t, p.LikelyHTTP(), "a target not like one")
}

// TestInboundParserReplayRandom: Retrace-Replay-Seed and
// Retrace-Replay-Random are stripped and kept as sent, however the stream
// is cut, also a value far longer than the other headers' bound, on lines
// read whole and byte by byte; a Random value over MaxReplayRandom is
// stripped and flagged.
func TestInboundParserReplayRandom(t *testing.T) {
	long := strings.Repeat("QUJD,", 300) + "QUJD"
	in := []byte("GET /a HTTP/1.1\r\nRetrace-Trace-Id: r1\r\nretrace-replay-seed: 12345/3/0\r\nRETRACE-REPLAY-RANDOM: " + long +
		"\r\nHost: x\r\n\r\n" + "GET /b HTTP/1.1\r\nRetrace-Replay-Random:  AQID \r\n\r\n" + "GET /c HTTP/1.1\r\n\r\n")
	const clean = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n\r\n"
	want := []*ReplayHeaders{{Seed: "12345/3/0", Random: long}, {Random: "AQID"}, nil}
	check := func(name string, chunks ...[]byte) {
		t.Helper()
		out, evs, _ := feedAll(t, chunks...)
		require.Equal(t, clean, string(out), name)
		require.Len(t, evs, 3, name)
		for i, ev := range evs {
			require.Equal(t, want[i], ev.head.Random, "%s: request %d", name, i)
		}
	}
	check("whole", in)
	for i := 0; i <= len(in); i += 7 {
		check(fmt.Sprintf("split at %d", i), in[:i], in[i:])
	}
	var bytewise [][]byte
	for i := range in {
		bytewise = append(bytewise, in[i:i+1])
	}
	check("one byte per read", bytewise...)

	over := []byte("GET / HTTP/1.1\r\nRetrace-Replay-Random: " + strings.Repeat("A", MaxReplayRandom+1) + "\r\n\r\n")
	for _, chunks := range [][][]byte{{over}, {over[:30], over[30:]}} {
		out, evs, _ := feedAll(t, chunks...)
		require.Equal(t, "GET / HTTP/1.1\r\n\r\n", string(out))
		require.Equal(t, &ReplayHeaders{BadRandom: true}, evs[0].head.Random)
	}
}
