package trace

import (
	"context"
	"runtime/pprof"
	"strings"
	"testing"
)

func BenchmarkCurrent(b *testing.B) {
	b.Run("unbound", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if Current() != nil {
				b.Fatal("bound")
			}
		}
	})
	b.Run("unbound-app-labels", func(b *testing.B) {
		pprof.Do(context.Background(), pprof.Labels("a", "1", "z", "2"), func(context.Context) {
			b.ReportAllocs()
			for b.Loop() {
				if Current() != nil {
					b.Fatal("bound")
				}
			}
		})
	})
	b.Run("bound", func(b *testing.B) {
		release := Bind(&Trace{ID: "bench"})
		defer release()
		b.ReportAllocs()
		for b.Loop() {
			if Current() == nil {
				b.Fatal("unbound")
			}
		}
	})
	b.Run("inherited", func(b *testing.B) {
		release := Bind(&Trace{ID: "bench"})
		defer release()
		inGoroutine(func() {
			b.ReportAllocs()
			for b.Loop() {
				if Current() == nil {
					b.Fatal("unbound")
				}
			}
		})
	})
	b.Run("bound-1000-others", func(b *testing.B) {
		// Other requests in flight: 1000 bindings on other goroutines.
		stop := make(chan struct{})
		ready := make(chan struct{}, 1000)
		done := make(chan struct{}, 1000)
		for range 1000 {
			go func() {
				release := Bind(&Trace{ID: "other"})
				ready <- struct{}{}
				<-stop
				release()
				done <- struct{}{}
			}()
		}
		for range 1000 {
			<-ready
		}
		release := Bind(&Trace{ID: "bench"})
		b.ReportAllocs()
		for b.Loop() {
			if Current() == nil {
				b.Fatal("unbound")
			}
		}
		b.StopTimer()
		release()
		close(stop)
		for range 1000 {
			<-done
		}
	})
}

func BenchmarkBindRelease(b *testing.B) {
	tr := &Trace{ID: "0123456789abcdef0123456789abcdef"}
	b.ReportAllocs()
	for b.Loop() {
		Bind(tr)()
	}
}

func BenchmarkBindReleaseParallel(b *testing.B) {
	tr := &Trace{ID: "0123456789abcdef0123456789abcdef"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			Bind(tr)()
		}
	})
}

// typicalRequest is a 600-byte request as a replayer sends it.
var typicalRequest = func() []byte {
	head := "POST /api/v1/orders?customer=1234&source=web HTTP/1.1\r\n" +
		"Host: orders.internal:8080\r\n" +
		"Retrace-Trace-Id: 7f3a9c2e1b4d4e8f9a0b1c2d3e4f5a6b\r\n" +
		"Retrace-Replay-Time: 1764411323123456789\r\n" +
		"User-Agent: Go-http-client/1.1\r\n" +
		"Accept: application/json\r\n" +
		"Accept-Encoding: gzip\r\n" +
		"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl\r\n" +
		"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n" +
		"Content-Type: application/json\r\n" +
		"Content-Length: 125\r\n\r\n"
	body := `{"customer":1234,"items":[{"sku":"A-100","qty":2},{"sku":"B-200","qty":1}],"note":"`
	body += strings.Repeat("x", 125-len(body)-2) + `"}`
	return []byte(head + body)
}()

// curlRequest is a request as curl sends it, with no header the parser
// keeps: the common case of a service's traffic.
var curlRequest = []byte("GET /orders?id=p1-1-12345 HTTP/1.1\r\nHost: 127.0.0.1:37417\r\n" +
	"User-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n")

func BenchmarkFeed(b *testing.B) {
	for _, bc := range []struct {
		name   string
		req    []byte
		noPath bool // as the agent parses the requests it writes
	}{{"replayer", typicalRequest, false}, {"curl", curlRequest, false}, {"curl-nopath", curlRequest, true}} {
		b.Run(bc.name, func(b *testing.B) {
			p := InboundParser{NoPath: bc.noPath}
			out := make([]byte, 0, 1024)
			var n int
			on := func(h RequestHead, _ int) { n += len(h.Method) }
			b.SetBytes(int64(len(bc.req)))
			b.ReportAllocs()
			for b.Loop() {
				out = p.Feed(out[:0], bc.req, on)
			}
			if !p.Idle() || n == 0 {
				b.Fatalf("parser not idle after a whole request (len %d)", len(bc.req))
			}
		})
	}
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if len(NewID()) != 32 {
			b.Fatal("bad id")
		}
	}
}
