package hook_test

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/trace"
)

// benchServer accepts connections and either discards what they send
// (sink) or sends zeros until they close (source).
func benchServer(tb testing.TB, source bool) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				if source {
					buf := make([]byte, 64<<10)
					for {
						if _, err := c.Write(buf); err != nil {
							return
						}
					}
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

type discardRecorder struct{}

func (discardRecorder) StartRequest(*hook.ConnInfo, trace.RequestHead) string { return "" }
func (discardRecorder) InboundRead(*hook.ConnInfo, string, []byte)            {}
func (discardRecorder) InboundWrite(*hook.ConnInfo, string, []byte)           {}
func (discardRecorder) OutboundWrite(*hook.ConnInfo, string, []byte)          {}
func (discardRecorder) OutboundRead(*hook.ConnInfo, []byte)                   {}
func (discardRecorder) Closed(*hook.ConnInfo)                                 {}

type benchCase struct {
	name   string
	mode   hook.Mode
	traced bool
	framed bool // replay: the connection is redirected (every write framed)
}

var benchCases = []benchCase{
	{name: "unhooked"},
	{name: "replay/untraced", mode: hook.Replay},
	{name: "replay/traced", mode: hook.Replay, traced: true},
	{name: "replay/framed-traced", mode: hook.Replay, traced: true, framed: true},
	{name: "record/untraced", mode: hook.Record},
	{name: "record/traced", mode: hook.Record, traced: true},
}

// setup installs the case's hooks and dials a connection to addr (to the
// mock, which is addr, through a redirect when framed).
func (c benchCase) setup(b *testing.B, addr string) net.Conn {
	if c.mode != hook.Off {
		cfg := hook.Config{Mode: c.mode, MockAddr: addr, Passthrough: []string{addr}, Recorder: discardRecorder{}, Logger: discardLogger()}
		undo, err := hook.Install(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(undo)
	}
	dial := addr
	if c.framed {
		other := benchServer(b, false) // not pass-through: redirected to addr
		dial = other
	}
	conn, err := net.Dial("tcp", dial)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	if c.traced {
		release := trace.Bind(&trace.Trace{ID: "rt0123456789abcdef"})
		b.Cleanup(release)
	}
	return conn
}

// BenchmarkWrite: one 64-byte Write on an outbound TCP connection, unhooked
// and through the hooks, untraced and with a trace bound.
func BenchmarkWrite(b *testing.B) {
	for _, c := range benchCases {
		b.Run(c.name, func(b *testing.B) {
			sink := benchServer(b, false)
			conn := c.setup(b, sink)
			p := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := conn.Write(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRead: one 64-byte Read from an outbound TCP connection whose
// peer keeps sending.
func BenchmarkRead(b *testing.B) {
	for _, c := range benchCases {
		if c.framed {
			continue // a redirected read is a plain read after the preamble
		}
		b.Run(c.name, func(b *testing.B) {
			source := benchServer(b, true)
			conn := c.setup(b, source)
			p := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := io.ReadFull(conn, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
