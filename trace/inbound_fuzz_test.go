package trace

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// FuzzInboundParser runs checkStream on any bytes and cut points.
func FuzzInboundParser(f *testing.F) {
	for _, s := range []string{
		reqA, reqB, reqC, reqA + reqB + reqC, reqAClean,
		"GET / HTTP/1.1\r\nRetrace-Trace-Id: a\r\n\r\nGET / HTTP/1.1\r\nRetrace-Trace-Id: b\r\n\r\n",
		"GET / HTTP/1.1\r\nRetrace-Trace-Id: x\r\n y\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\nRetrace-Trace-Id: x\r\n\r\nabc",
		"\x16\x03\x01\x00\x05hello",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET / HTTP/1.1\r\nRetrace-Replay-Seed: 7/1/0\r\nRetrace-Replay-Random: AQID,/w==," + strings.Repeat("QUJD", 40) + "\r\n\r\n",
		"GET / HTTP/1.1\r\nRetrace-Replay-Random: AQID\r\n folded\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(len(s)/3), uint16(len(s)/3))
	}
	f.Fuzz(checkStream)
}

// FuzzInboundParserRequests builds well-formed request streams out of the
// fuzzer's bytes — Retrace-* headers among others under varied spellings,
// Content-Length and chunked bodies and trailers holding header-like text,
// pipelined — so that every input reaches the http.ReadRequest oracle of
// checkStream.
func FuzzInboundParserRequests(f *testing.F) {
	f.Add([]byte("\x03\x00\x01\x02\x03\x04\x05\x06\x07\x08abcdefghij"), uint16(10), uint16(20))
	f.Add([]byte("\x02\x11\x22\x33\x44\x55\x66\x77\x88\x99Retrace-Trace-Id: x\r\n"), uint16(3), uint16(50))
	f.Fuzz(func(t *testing.T, gen []byte, cut1, cut2 uint16) {
		checkStream(t, buildRequests(gen), cut1, cut2)
	})
}

// buildRequests turns gen into one or more well-formed HTTP/1.1 requests.
func buildRequests(gen []byte) []byte {
	next := func() byte {
		if len(gen) == 0 {
			return 0
		}
		c := gen[0]
		gen = gen[1:]
		return c
	}
	text := func(max int) string { // printable, no CR/LF, may be empty
		n := int(next()) % (max + 1)
		var b strings.Builder
		for range n {
			c := next()%95 + ' '
			b.WriteByte(c)
		}
		return b.String()
	}
	names := []string{"Retrace-Trace-Id", "retrace-trace-id", "RETRACE-REPLAY-TIME", "Retrace-Replay-Time",
		"Retrace-X", "Retrace", "Retracex", "X-Retrace-Trace-Id", "traceparent", "Accept", "Content-Type"}
	values := []string{"abc-1", "req.2_x", "bad id", "1764411323123456789", "-5",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "Retrace-Trace-Id: x", ""}
	var out strings.Builder
	for n := int(next())%3 + 1; n > 0; n-- {
		method := []string{"GET", "POST", "PUT", "DELETE", "PATCH"}[next()%5]
		out.WriteString(method + " /" + strings.ReplaceAll(strings.ReplaceAll(text(12), " ", "-"), "\x7f", "") + " HTTP/1.1\r\n")
		out.WriteString("Host: svc\r\n")
		for h := int(next()) % 6; h > 0; h-- {
			name := names[int(next())%len(names)]
			v := values[int(next())%len(values)]
			if next()%4 == 0 {
				v = strings.TrimSpace(text(20))
			}
			out.WriteString(name + ": " + v + "\r\n")
		}
		body := text(40)
		switch next() % 3 {
		case 0: // no body
			out.WriteString("\r\n")
		case 1:
			out.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
		case 2:
			out.WriteString("Transfer-Encoding: chunked\r\n\r\n")
			for body != "" {
				k := min(len(body), int(next())%9+1)
				out.WriteString(strconv.FormatInt(int64(k), 16) + "\r\n" + body[:k] + "\r\n")
				body = body[k:]
			}
			out.WriteString("0\r\n")
			if next()%2 == 0 {
				out.WriteString("Retrace-Trace-Id: trailer\r\n")
			}
			out.WriteString("\r\n")
		}
	}
	return []byte(out.String())
}

// checkStream checks, for the stream data cut into reads at two points:
//   - Feed never panics, and never delivers more than it was given;
//   - output and request events do not depend on how the stream was cut
//     into reads;
//   - when Go's own server-side parser (http.ReadRequest) reads the input as
//     a sequence of well-formed requests up to EOF, it reads the output as
//     the same requests — method, target, headers, body, trailers — minus
//     every Retrace-* header, and the parser reported each of them with
//     the trace id it carried.
func checkStream(t *testing.T, data []byte, cut1, cut2 uint16) {
	whole, wholeEvs, _ := feedAll(t, data)
	if len(whole) > len(data) {
		t.Fatalf("delivered %d bytes of %d", len(whole), len(data))
	}
	a := int(cut1) % (len(data) + 1)
	b := a + int(cut2)%(len(data)-a+1)
	cuts := [][][]byte{{data[:a], data[a:b], data[b:]}}
	if len(data) <= 1024 {
		// a byte per read: the byte-wise states alone, which every fast
		// path (whole request lines, whole header lines) must match
		var bytewise [][]byte
		for i := range data {
			bytewise = append(bytewise, data[i:i+1])
		}
		cuts = append(cuts, bytewise)
	}
	for _, reads := range cuts {
		parts, partEvs, _ := feedAll(t, reads...)
		if !bytes.Equal(whole, parts) {
			t.Fatalf("output depends on reads (%d reads, cut at %d, %d):\nwhole %q\nparts %q", len(reads), a, b, whole, parts)
		}
		if len(wholeEvs) != len(partEvs) {
			t.Fatalf("%d requests in one read, %d in %d reads", len(wholeEvs), len(partEvs), len(reads))
		}
		for i := range wholeEvs {
			if wholeEvs[i].start != partEvs[i].start {
				t.Fatalf("request %d starts at %d, %d in %d reads", i, wholeEvs[i].start, partEvs[i].start, len(reads))
			}
			assertHead(t, i, partEvs[i].head, wholeEvs[i].head)
		}
	}

	want, ok := readRequests(data)
	if !ok {
		return // not a well-formed request stream: no oracle
	}
	got, ok := readRequests(whole)
	if !ok {
		t.Fatalf("input reads as %d requests, output does not read:\n in %q\nout %q", len(want), data, whole)
	}
	if len(got) != len(want) || len(wholeEvs) != len(want) {
		t.Fatalf("input has %d requests, output %d, events %d", len(want), len(got), len(wholeEvs))
	}
	for i := range want {
		if len(got[i].retrace) > 0 {
			t.Fatalf("request %d: application would see %q", i, got[i].retrace)
		}
		if g, w := got[i].String(), want[i].String(); g != w {
			t.Fatalf("request %d differs:\n got %s\nwant %s", i, g, w)
		}
		if id := want[i].traceID; ValidID(id) && wholeEvs[i].head.TraceID != id {
			t.Fatalf("request %d: event trace id %q, header %q", i, wholeEvs[i].head.TraceID, id)
		}
	}
}

// parsedRequest is what Go's server sees of one request.
type parsedRequest struct {
	method, target, proto string
	header, trailer       http.Header // without Retrace-*
	body                  []byte
	retrace               []string // Retrace-* headers seen, as "Key=v1,v2"
	traceID               string   // the value of a lone Retrace-Trace-Id
}

func (r parsedRequest) String() string {
	var b strings.Builder
	b.WriteString(r.method + " " + r.target + " " + r.proto + "\n")
	_ = r.header.Write(&b)
	b.WriteString("body " + string(r.body) + "\n")
	_ = r.trailer.Write(&b)
	return b.String()
}

// readRequests reads data with http.ReadRequest until EOF. ok is false
// when any request is malformed or the data ends inside one.
func readRequests(data []byte) (reqs []parsedRequest, ok bool) {
	br := bufio.NewReader(bytes.NewReader(data))
	for {
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return reqs, len(reqs) > 0
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return nil, false
		}
		// What net/http's server rejects before any handler runs.
		if req.ProtoMajor != 1 || req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != "CONNECT" {
			return nil, false
		}
		for k, vv := range req.Header {
			if !validFieldName(k) {
				return nil, false
			}
			for _, v := range vv {
				if !validFieldValue(v) {
					return nil, false
				}
			}
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, false
		}
		pr := parsedRequest{method: req.Method, target: req.RequestURI, proto: req.Proto,
			body: body, trailer: req.Trailer}
		pr.header, pr.retrace, pr.traceID = strip(req.Header)
		reqs = append(reqs, pr)
		if req.Close {
			// Go's server stops reading after "Connection: close".
			_, err := br.Peek(1)
			return reqs, errors.Is(err, io.EOF)
		}
	}
}

// strip returns h without Retrace-* headers, and what it removed.
func strip(h http.Header) (out http.Header, retrace []string, traceID string) {
	out = http.Header{}
	for k, v := range h {
		if !strings.HasPrefix(strings.ToLower(k), retracePrefix) {
			out[k] = v
			continue
		}
		retrace = append(retrace, k+"="+strings.Join(v, ","))
		if k == "Retrace-Trace-Id" && len(v) == 1 {
			traceID = v[0]
		}
	}
	return out, retrace, traceID
}

// validFieldName and validFieldValue are the checks net/http's server
// makes on every header before serving a request (RFC 9110 token; field
// value without control bytes other than tab).
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !tchar(k[i]) {
			return false
		}
	}
	return true
}

func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
