package mockserver

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// memConn is a net.Conn that reads one frame over and over, n times, and
// discards what is written to it.
type memConn struct {
	frame []byte
	off   int
	n     int
}

func (m *memConn) Read(b []byte) (int, error) {
	if m.n == 0 {
		return 0, io.EOF
	}
	k := copy(b, m.frame[m.off:])
	if m.off += k; m.off == len(m.frame) {
		m.off = 0
		m.n--
	}
	return k, nil
}

func (m *memConn) Write(b []byte) (int, error)      { return len(b), nil }
func (m *memConn) Close() error                     { return nil }
func (m *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (m *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (m *memConn) SetDeadline(time.Time) error      { return nil }
func (m *memConn) SetReadDeadline(time.Time) error  { return nil }
func (m *memConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkAnswer is the server's own work per matched Redis GET on one
// connection, without the network: reading the frame, parsing the command,
// matching, building and "writing" the answer, the metrics and the
// admin report's record of the call.
func BenchmarkAnswer(b *testing.B) {
	req := []byte("*2\r\n$3\r\nGET\r\n$11\r\nuser:000042\r\n")
	resp := []byte("$36\r\n{\"id\":42,\"name\":\"user 42\",\"bal\":294}\r\n")
	s, err := New(Config{Admin: "-", Strategies: []Strategy{"first"}, MaxObserved: 1000})
	if err != nil {
		b.Fatal(err)
	}
	s.AddSession(&recording.Session{V: 1, ID: "bench", Calls: []recording.Call{
		{Seq: 0, Proto: "redis", Dst: "10.0.0.7:6379", Request: req, Response: resp}}})
	frame := trace.AppendFrame(nil, "bench", "10.0.0.7:6379", req)
	nc := &memConn{frame: frame, n: b.N}
	c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, 32<<10), ctx: context.Background()}
	b.ReportAllocs()
	b.ResetTimer()
	if err := c.run(); err != io.EOF {
		b.Fatal(err)
	}
}
