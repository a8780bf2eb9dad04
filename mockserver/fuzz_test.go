package mockserver_test

import (
	"net"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/mockserver/mysql"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
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
