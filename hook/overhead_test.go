package hook

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
	"unsafe"

	"github.com/retrace-dev/retrace/trace"
)

type nopRecorder struct{}

func (nopRecorder) StartRequest(*ConnInfo, trace.RequestHead) string { return "" }
func (nopRecorder) InboundRead(*ConnInfo, string, []byte)            {}
func (nopRecorder) InboundWrite(*ConnInfo, string, []byte)           {}
func (nopRecorder) OutboundWrite(*ConnInfo, string, []byte)          {}
func (nopRecorder) OutboundRead(*ConnInfo, []byte)                   {}
func (nopRecorder) Closed(*ConnInfo)                                 {}

// BenchmarkHookOverhead measures what the hooks add to one Read or Write,
// without the system call: the netFD Read/Write of the benchmark's
// connection are replaced by functions that return at once, so the figure
// is the double's own work (engine and state lookup, trace lookup, framing
// or recorder call) against the unhooked net.(*conn) path in the same run.
func BenchmarkHookOverhead(b *testing.B) {
	cases := []struct {
		name   string
		mode   Mode
		traced bool
		framed bool
	}{
		{name: "unhooked"},
		{name: "replay/untraced", mode: Replay},
		{name: "replay/traced", mode: Replay, traced: true},
		{name: "replay/framed-traced", mode: Replay, traced: true, framed: true},
		{name: "record/untraced", mode: Record},
		{name: "record/traced", mode: Record, traced: true},
	}
	for _, op := range []string{"write", "read"} {
		for _, c := range cases {
			b.Run(op+"/"+c.name, func(b *testing.B) {
				sink := listen(b)
				other := listen(b)
				if c.mode != Off {
					cfg := Config{Mode: c.mode, MockAddr: sink, Passthrough: []string{sink},
						Recorder: nopRecorder{}, Logger: slog.New(slog.DiscardHandler)}
					undo, err := Install(cfg)
					if err != nil {
						b.Fatal(err)
					}
					defer undo()
				}
				dst := sink
				if c.framed {
					dst = other
				}
				conn, err := net.Dial("tcp", dst)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				p := make([]byte, 64)
				if _, err := conn.Write(p); err != nil { // state, preamble
					b.Fatal(err)
				}
				nc := (*netConn)(unsafe.Pointer(conn.(*net.TCPConn)))
				l, _ := layout()
				fake := *l
				fake.fdWrite = func(fd unsafe.Pointer, p []byte) (int, error) {
					if fd == nc.fd {
						return len(p), nil
					}
					return l.fdWrite(fd, p)
				}
				fake.fdRead = func(fd unsafe.Pointer, p []byte) (int, error) {
					if fd == nc.fd {
						return len(p), nil
					}
					return l.fdRead(fd, p)
				}
				e := active.Load()
				if e != nil {
					e.l = &fake
					defer func() { e.l = l }()
				}
				if c.traced {
					defer trace.Bind(&trace.Trace{ID: "rt0123456789abcdef"})()
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					var err error
					switch {
					case op == "write" && e == nil:
						_, err = fake.plainWrite(nc, p)
					case op == "write":
						_, err = connWrite(nc, p)
					case e == nil:
						_, err = fake.plainRead(nc, p)
					default:
						_, err = connRead(nc, p)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func listen(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	b.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkTimeNow: time.Now unpatched, patched on a goroutine with no
// replayed time, and on a request's goroutine replaying a recorded time.
func BenchmarkTimeNow(b *testing.B) {
	for _, c := range []struct {
		name           string
		hooked, replay bool
	}{{"unhooked", false, false}, {"replay/untraced", true, false}, {"replay/replay-time", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			if c.hooked {
				undo, err := Install(Config{Mode: Replay, MockAddr: "127.0.0.1:9", Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer undo()
			}
			if c.replay {
				t := &trace.Trace{ID: "rt0123456789abcdef", ReplayTime: time.Unix(1700000000, 0), Arrived: time.Now()}
				defer withReplayClock(trace.Bind(t))()
			}
			b.ReportAllocs()
			for range b.N {
				_ = time.Now()
			}
		})
	}
}

// idRecorder samples every request under one trace id and keeps nothing.
type idRecorder struct{ nopRecorder }

func (idRecorder) StartRequest(*ConnInfo, trace.RequestHead) string { return "rt0123456789abcdef" }

// noPathRecorder samples nothing and does not read paths (PathUser), as
// capture.Recorder.
type noPathRecorder struct{ nopRecorder }

func (noPathRecorder) UsesPath() bool { return false }

// BenchmarkInboundRequest measures what the hooks add to serving one
// request on an accepted keep-alive connection, without the system calls:
// one Read that returns a whole request head, then the response written as
// a head and a body (two Writes), as net/http does for a response larger
// than its buffer. It is the common case on the inbound side: no request
// waits behind another.
func BenchmarkInboundRequest(b *testing.B) {
	const id = "rt0123456789abcdef"
	plain := "GET /orders/42?x=1 HTTP/1.1\r\nHost: svc:8080\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n"
	traced := "GET /orders/42?x=1 HTTP/1.1\r\nHost: svc:8080\r\nRetrace-Trace-Id: " + id + "\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n"
	respHead := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n")
	respBody := make([]byte, 64)
	cases := []struct {
		name string
		mode Mode
		req  string
		rec  Recorder
	}{
		{name: "unhooked", req: plain},
		{name: "replay/untraced", mode: Replay, req: plain},
		{name: "replay/traced", mode: Replay, req: traced},
		{name: "record/unsampled", mode: Record, req: plain, rec: noPathRecorder{}},
		{name: "record/unsampled+path", mode: Record, req: plain, rec: nopRecorder{}},
		{name: "record/sampled", mode: Record, req: plain, rec: idRecorder{}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			if c.mode != Off {
				cfg := Config{Mode: c.mode, MockAddr: "127.0.0.1:9", Passthrough: []string{ln.Addr().String()},
					Recorder: c.rec, Logger: slog.New(slog.DiscardHandler)}
				undo, err := Install(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer undo()
			}
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			conn, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			nc := (*netConn)(unsafe.Pointer(conn.(*net.TCPConn)))
			l, _ := layout()
			fake := *l
			req := []byte(c.req)
			fake.fdRead = func(fd unsafe.Pointer, p []byte) (int, error) {
				if fd == nc.fd {
					return copy(p, req), nil
				}
				return l.fdRead(fd, p)
			}
			fake.fdWrite = func(fd unsafe.Pointer, p []byte) (int, error) {
				if fd == nc.fd {
					return len(p), nil
				}
				return l.fdWrite(fd, p)
			}
			e := active.Load()
			if e != nil {
				e.l = &fake
				defer func() { e.l = l }()
			}
			buf := make([]byte, 4096)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var err error
				if e == nil {
					_, err = fake.plainRead(nc, buf)
					if err == nil {
						_, err = fake.plainWrite(nc, respHead)
					}
					if err == nil {
						_, err = fake.plainWrite(nc, respBody)
					}
				} else {
					_, err = connRead(nc, buf)
					if err == nil {
						_, err = connWrite(nc, respHead)
					}
					if err == nil {
						_, err = connWrite(nc, respBody)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
