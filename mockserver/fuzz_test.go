package mockserver_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/mysql"
)

// fuzzSession gives every adapter something to match against.
func fuzzSession() *recording.Session {
	okPacket := mysql.OK(1)
	return &recording.Session{V: 1, ID: "fz", Calls: []recording.Call{
		{Seq: 0, Proto: "redis", Dst: "10.0.0.1:6379", Request: []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), Response: []byte("$1\r\nv\r\n")},
		{Seq: 1, Proto: "http", Dst: "10.0.0.2:80", Request: []byte("POST /o HTTP/1.1\r\nContent-Length: 7\r\n\r\n{\"a\":1}"), Response: []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")},
		{Seq: 2, Proto: "mysql", Dst: "10.0.0.3:3306", Setup: true, Response: mysql.DefaultGreeting(1)},
		{Seq: 3, Proto: "mysql", Dst: "10.0.0.3:3306", Request: []byte("\x09\x00\x00\x00\x03SELECT 1"), Response: okPacket},
		{Seq: 4, Proto: "raw", Dst: "10.0.0.4:9000", Request: []byte("hi"), Response: []byte("hello")},
	}}
}

// FuzzConnStream feeds arbitrary bytes to a connection of a running server:
// whatever they are, the server answers or closes that connection, never
// panics, and keeps serving.
func FuzzConnStream(f *testing.F) {
	seeds := [][]byte{
		trace.AppendFrame(trace.AppendFrameHeader(nil, "fz", "10.0.0.1:6379", 0), "fz", "10.0.0.1:6379", []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n")),
		trace.AppendFrame(nil, "fz", "10.0.0.2:80", []byte("POST /o HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 7\r\n\r\n{\"a\":1}")),
		trace.AppendFrame(trace.AppendFrame(trace.AppendFrameHeader(nil, "", "10.0.0.3:3306", 0), "fz", "10.0.0.3:3306",
			[]byte("\x20\x00\x00\x01\x8d\xa2\x0b\x00\x00\x00\x00\x01\x21\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")),
			"fz", "10.0.0.3:3306", []byte("\x09\x00\x00\x00\x03SELECT 1")),
		trace.AppendFrame(nil, "fz", "10.0.0.4:9000", []byte("hi")),
		trace.AppendFrame(nil, "", "10.0.0.9:1", []byte("\x17\x01\x00\x00\x00")),
		[]byte(`/*retrace{"tid":"fz","dst":"10.0.0.1:6379","len":99999999999}*/`),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	srv := mocktest.NewServer(f, mockserver.Config{ReadTimeout: 50 * time.Millisecond, MaxFrame: 1 << 16, Admin: "-"}, fuzzSession())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(b)
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("server neither answered nor closed for input %q", b)
				}
				return
			}
		}
	})
}

// TestRepeatedHeadersShortcut sends frames whose headers repeat but for the
// length, one byte per write so headers arrive in pieces: each must decode
// as the full decoder would.
func TestRepeatedHeadersShortcut(t *testing.T) {
	const dst = "10.0.0.4:9000"
	sess := &recording.Session{V: 1, ID: "rep", Calls: []recording.Call{
		{Seq: 0, Proto: "raw", Dst: dst, Request: []byte("hi"), Response: []byte("hello")},
		{Seq: 1, Proto: "raw", Dst: dst, Request: []byte("hi"), Response: []byte("howdy")},
		{Seq: 2, Proto: "raw", Dst: dst, Request: make([]byte, 10), Response: []byte("zeros")},
	}}
	srv := mocktest.NewServer(t, mockserver.Config{Admin: "-", Strategies: []mockserver.Strategy{"hamming"}}, sess)
	stream := trace.AppendFrameHeader(nil, "rep", dst, 0)
	stream = trace.AppendFrame(stream, "rep", dst, []byte("hi"))
	stream = trace.AppendFrame(stream, "rep", dst, []byte("hi"))     // the same header
	stream = trace.AppendFrame(stream, "rep", dst, make([]byte, 10)) // a longer length
	stream = trace.AppendFrame(stream, "other", dst, []byte("hi"))   // another trace: no recording
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range stream {
		if _, err := c.Write(stream[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c) // the last frame's missing mock closes the connection
	if string(got) != "hellohowdyzeros" {
		t.Fatalf("answers %q, want %q", got, "hellohowdyzeros")
	}
	// A trace that names no recording is a missing mock, and kept nowhere.
	var missing []mockserver.MissingMock
	getJSONHandler(t, srv, "/missing", &missing)
	if len(missing) != 1 || missing[0].Trace != "other" || string(missing[0].Request) != "hi" {
		t.Fatalf("missing mocks: %+v", missing)
	}
	if n := srv.Traces(); n != 1 {
		t.Fatalf("%d traces with state, want 1 (rep)", n)
	}
}

func getJSONHandler(t *testing.T, srv *mockserver.Server, path string, v any) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, rec.Body.Bytes())
	}
}
