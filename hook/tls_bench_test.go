package hook_test

import (
	"crypto/tls"
	"io"
	"syscall"
	"testing"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/certtest"
	"github.com/retrace-dev/retrace/trace"
)

// tlsBenchCases are the modes a TLS client's Read and Write are measured
// in: record mode follows the plaintext (the TLS hooks' work), replay mode
// on a connection that is not redirected only looks it up.
var tlsBenchCases = []benchCase{
	{name: "unhooked"},
	{name: "record/untraced", mode: hook.Record},
	{name: "record/traced", mode: hook.Record, traced: true},
	{name: "replay/traced", mode: hook.Replay, traced: true},
}

// tlsBenchConn is a TLS client connection, handshake done, to a server
// that discards what it gets (source false) or sends zeros (source true).
func tlsBenchConn(b *testing.B, c benchCase, source bool) *tls.Conn {
	ca := certtest.New(b)
	scfg := ca.ServerConfig(b)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	b.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		sc, err := ln.Accept()
		if err != nil {
			return
		}
		defer sc.Close()
		if source {
			buf := make([]byte, 16<<10)
			for {
				if _, err := sc.Write(buf); err != nil {
					return
				}
			}
		}
		_, _ = io.Copy(io.Discard, sc)
	}()
	addr := ln.Addr().String()
	if c.mode != hook.Off {
		undo, err := hook.Install(hook.Config{Mode: c.mode, MockAddr: addr, Passthrough: []string{addr},
			Recorder: discardRecorder{}, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(undo)
	}
	if c.traced {
		b.Cleanup(trace.Bind(&trace.Trace{ID: "rt0123456789abcdef"}))
	}
	cfg := ca.ClientConfig()
	cfg.NextProtos = []string{"http/1.1"}
	tc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tc.Close() })
	return tc
}

// processCPU is the CPU time the process has used, user and system, in
// nanoseconds: on a machine shared with other work it varies less than the
// wall time per operation, which includes waiting for the peer goroutine.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkTLSWrite: one 64-byte Write on an outbound TLS connection,
// unhooked and through the hooks.
func BenchmarkTLSWrite(b *testing.B) {
	for _, c := range tlsBenchCases {
		b.Run(c.name, func(b *testing.B) {
			tc := tlsBenchConn(b, c, false)
			p := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for range b.N {
				if _, err := tc.Write(p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkTLSRead: one 64-byte Read from an outbound TLS connection
// whose peer keeps sending (most Reads are served from the record already
// decrypted).
func BenchmarkTLSRead(b *testing.B) {
	for _, c := range tlsBenchCases {
		b.Run(c.name, func(b *testing.B) {
			tc := tlsBenchConn(b, c, true)
			p := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for range b.N {
				if _, err := io.ReadFull(tc, p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
