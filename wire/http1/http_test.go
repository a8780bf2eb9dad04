package http1_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/wire/http1"
)

func TestRequestLen(t *testing.T) {
	cases := []struct {
		name      string
		in        string
		n         int
		headDone  bool
		expect100 bool
		err       bool
	}{
		{"no body", "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /next", 27, true, false, false},
		{"content length", "POST /o HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcX", 42, true, false, false},
		{"body incomplete", "POST /o HTTP/1.1\r\nContent-Length: 3\r\n\r\nab", 0, true, false, false},
		{"expect", "PUT /u HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n", 0, true, true, false},
		{"chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 60, true, false, false},
		{"chunked with trailer", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;x=y\r\na\r\n0\r\nT: v\r\n\r\n", 68, true, false, false},
		{"chunked incomplete", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", 0, true, false, false},
		{"head incomplete", "GET / HTTP/1.1\r\nHost:", 0, false, false, false},
		{"bad request line", "HELLO\r\n\r\n", 0, false, false, true},
		{"bad content length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 0, false, false, true},
		{"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, true, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, n, err := http1.RequestLen([]byte(tc.in))
			if (err != nil) != tc.err || n != tc.n || (h.HeadLen > 0) != tc.headDone || h.Expect100 != tc.expect100 {
				t.Fatalf("RequestLen(%q) = %+v %d %v", tc.in, h, n, err)
			}
		})
	}
}

func TestResponseLen(t *testing.T) {
	cases := []struct {
		name, method, in string
		n                int
	}{
		{"content length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 40},
		{"head has no body", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", 38},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", 27},
		{"until EOF", "GET", "HTTP/1.1 200 OK\r\n\r\nstream", -1},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 59},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, n, err := http1.ResponseLen([]byte(tc.in), tc.method); n != tc.n || err != nil {
				t.Fatalf("ResponseLen = %d, %v; want %d", n, err, tc.n)
			}
		})
	}
}

func TestBodyDecodesChunkedGzip(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"a":1}`))
	zw.Close()
	z := gz.Bytes()
	msg := "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", 5, z[:5], len(z[5:]), z[5:])
	h, n, err := http1.RequestLen([]byte(msg))
	if err != nil || n != len(msg) {
		t.Fatalf("RequestLen: %d of %d, %v", n, len(msg), err)
	}
	if b := http1.Body([]byte(msg), h, 1<<20); string(b) != `{"a":1}` {
		t.Fatalf("Body = %q", b)
	}
}

func TestErrorResponseIsValidHTTP(t *testing.T) {
	b := http1.ErrorResponse(502, "retrace: no mock for\r\nGET /x")
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(resp.Header.Get("X-Retrace-Missing"), "GET /x") {
		t.Fatalf("%s %v", resp.Status, resp.Header)
	}
}

func TestStripContinueAndNormalizePath(t *testing.T) {
	if got := http1.StripContinue([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n")); string(got) != "HTTP/1.1 200 OK\r\n\r\n" {
		t.Fatalf("StripContinue = %q", got)
	}
	for in, want := range map[string]string{
		"/users/42?x=1": "/users/*",
		"/v1/orders":    "/v1/orders",
		"/o/0f8fad5b-d9cb-469f-a165-70867728950e/items/7": "/o/*/items/*",
	} {
		if got := http1.NormalizePath(in); got != want {
			t.Errorf("NormalizePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzRequestLen(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 99999999999\r\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := http1.RequestLen(b)
		if err != nil {
			return
		}
		if n > len(b) || h.HeadLen > len(b) {
			t.Fatalf("n %d head %d for %d bytes", n, h.HeadLen, len(b))
		}
		if n > 0 {
			if body := http1.Body(b[:n], h, 1<<16); len(body) > max(n, 1<<16) {
				t.Fatalf("body of %d bytes from %d", len(body), n)
			}
		}
		http1.NormalizePath(h.Target)
	})
}

func FuzzResponseLen(f *testing.F) {
	for _, s := range []string{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 X\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"} {
		f.Add([]byte(s), "GET")
	}
	f.Fuzz(func(t *testing.T, b []byte, method string) {
		if _, n, err := http1.ResponseLen(b, method); err == nil && n > len(b) {
			t.Fatalf("n %d for %d bytes", n, len(b))
		}
		if s := http1.StripContinue(b); len(s) > len(b) {
			t.Fatal("StripContinue grew")
		}
	})
}
