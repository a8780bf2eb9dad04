package mockserver_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

const benchConns = 64

func benchCall(i int) ([]byte, []byte) {
	key := fmt.Sprintf("user:%06d", i)
	val := fmt.Sprintf(`{"id":%d,"name":"user %d","balance":%d}`, i, i, i*7)
	req := fmt.Sprintf("*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
	resp := fmt.Sprintf("$%d\r\n%s\r\n", len(val), val)
	return []byte(req), []byte(resp)
}

// drive runs n request/response exchanges spread over conns connections
// and returns the time they took and their latency histogram. Connections,
// buffers and histograms are made before the clock starts (and the garbage
// of earlier rounds collected), so neither dialling nor the harness's own
// allocations fall inside the measurement.
func drive(b *testing.B, conns, n int, dial func(i int) net.Conn, payload func(i int) []byte, respLen func(i int) int) (time.Duration, *hdrhistogram.Histogram) {
	var next atomic.Int64
	hists := make([]*hdrhistogram.Histogram, conns)
	ncs := make([]net.Conn, conns)
	for c := range conns {
		hists[c] = hdrhistogram.New(1, int64(time.Second), 3)
		ncs[c] = dial(c)
	}
	runtime.GC()
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for c, conn := range ncs {
		h := hists[c]
		out, buf := payload(c), make([]byte, respLen(c))
		br := bufio.NewReader(conn)
		wg.Go(func() {
			defer conn.Close()
			<-begin
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				if err := exchange(conn, br, out, buf); err != nil {
					b.Error(err)
					return
				}
				h.RecordValue(int64(time.Since(t0)))
			}
		})
	}
	start := time.Now()
	close(begin)
	wg.Wait()
	el := time.Since(start)
	all := hdrhistogram.New(1, int64(time.Second), 3)
	for _, h := range hists {
		all.Merge(h)
	}
	return el, all
}

// exchange writes one request and reads its whole answer.
func exchange(conn net.Conn, br *bufio.Reader, out, buf []byte) error {
	if _, err := conn.Write(out); err != nil {
		return err
	}
	_, err := io.ReadFull(br, buf)
	return err
}

// plainServer answers every request of reqLen bytes with resp: the
// fastest a Go server can answer the same bytes on loopback.
func plainServer(b *testing.B, reqs, resps [][]byte) (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			req, resp := reqs[i%len(reqs)], resps[i%len(resps)]
			wg.Go(func() {
				br := bufio.NewReader(c)
				buf := make([]byte, len(req))
				for {
					if _, err := io.ReadFull(br, buf); err != nil {
						return
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// servers is the mock server and a plain Go server answering the same
// Redis GETs, one recorded trace per connection, and how to talk to each.
type servers struct {
	dialPlain, dialMock func(i int) net.Conn
	plainReq, mockReq   func(i int) []byte // the i-th connection's request, framed for the mock
	respLen             func(i int) int
}

// benchServers starts both servers for benchConns connections; the traces
// are named prefix-0, prefix-1, …
func benchServers(b *testing.B, prefix string) *servers {
	var sessions []*recording.Session
	var reqs, resps [][]byte
	for i := range benchConns {
		req, resp := benchCall(i)
		reqs, resps = append(reqs, req), append(resps, resp)
		sessions = append(sessions, &recording.Session{V: 1, ID: fmt.Sprintf("%s-%d", prefix, i), Calls: []recording.Call{
			{Seq: 0, Proto: "redis", Dst: "10.0.0.7:6379", Request: req, Response: resp}}})
	}
	srv := mocktest.NewServer(b, mockserver.Config{Strategies: []mockserver.Strategy{"first"}, MaxObserved: 1000}, sessions...)
	paddr, stop := plainServer(b, reqs, resps)
	b.Cleanup(stop)
	return &servers{
		dialPlain: func(int) net.Conn {
			c, err := net.Dial("tcp", paddr)
			if err != nil {
				b.Fatal(err)
			}
			return c
		},
		dialMock: func(i int) net.Conn {
			d := &mocktest.Dialer{Mock: srv.Addr(), TID: fmt.Sprintf("%s-%d", prefix, i)}
			c, err := d.DialContext(context.Background(), "tcp", "10.0.0.7:6379")
			if err != nil {
				b.Fatal(err)
			}
			return c.(*mocktest.Conn).Conn // write pre-framed requests directly
		},
		plainReq: func(i int) []byte { return reqs[i] },
		mockReq: func(i int) []byte {
			return trace.AppendFrame(nil, fmt.Sprintf("%s-%d", prefix, i), "10.0.0.7:6379", reqs[i])
		},
		respLen: func(i int) int { return len(resps[i]) },
	}
}

// BenchmarkMockVsPlain answers b.N Redis GETs over 64 connections (one
// trace each) from the mock server, and the same number from a plain Go
// server writing the same bytes, in the same run.
func BenchmarkMockVsPlain(b *testing.B) {
	sv := benchServers(b, "bench")
	// Alternate the two servers in rounds so a noisy machine hurts both alike.
	const rounds = 4
	var plainT, mockT time.Duration
	plainH := hdrhistogram.New(1, int64(time.Second), 3)
	mockH := hdrhistogram.New(1, int64(time.Second), 3)
	b.ResetTimer()
	for range rounds {
		el, h := drive(b, benchConns, b.N/rounds+1, sv.dialPlain, sv.plainReq, sv.respLen)
		plainT += el
		plainH.Merge(h)
		el, h = drive(b, benchConns, b.N/rounds+1, sv.dialMock, sv.mockReq, sv.respLen)
		mockT += el
		mockH.Merge(h)
	}
	plainRate := float64(rounds*(b.N/rounds+1)) / plainT.Seconds()
	mockRate := float64(rounds*(b.N/rounds+1)) / mockT.Seconds()
	b.StopTimer()
	// The same exchange on one connection: latency without queueing behind
	// 63 other connections on a small machine.
	_, plain1 := drive(b, 1, 2000, sv.dialPlain, sv.plainReq, sv.respLen)
	_, mock1 := drive(b, 1, 2000, sv.dialMock, sv.mockReq, sv.respLen)
	b.ReportMetric(float64(plain1.ValueAtQuantile(99))/1e3, "plain-p99-1conn-µs")
	b.ReportMetric(float64(mock1.ValueAtQuantile(99))/1e3, "mock-p99-1conn-µs")
	b.ReportMetric(plainRate, "plain-req/s")
	b.ReportMetric(mockRate, "mock-req/s")
	b.ReportMetric(mockRate/plainRate, "mock/plain")
	b.ReportMetric(float64(plainH.ValueAtQuantile(99))/1e3, "plain-p99-µs")
	b.ReportMetric(float64(mockH.ValueAtQuantile(99))/1e3, "mock-p99-µs")
	for _, q := range []float64{50, 90} {
		b.ReportMetric(float64(plainH.ValueAtQuantile(q))/1e3, fmt.Sprintf("plain-p%v-µs", q))
		b.ReportMetric(float64(mockH.ValueAtQuantile(q))/1e3, fmt.Sprintf("mock-p%v-µs", q))
	}
}

// BenchmarkLoad100kSessions reports the heap of 100,000 decoded sessions
// and what loading them into a server adds (the index), against the bytes
// of their payloads.
func BenchmarkLoad100kSessions(b *testing.B) {
	const n = 100000
	for range b.N {
		var m0, m1, m2 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		payload := 0
		sessions := make([]*recording.Session, n)
		for i := range n {
			req, resp := benchCall(i)
			req2 := []byte(fmt.Sprintf("GET /users/%d HTTP/1.1\r\nHost: users\r\n\r\n", i))
			resp2 := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nuser %04d", i%10000))
			payload += len(req) + len(resp) + len(req2) + len(resp2)
			sessions[i] = &recording.Session{V: 1, ID: fmt.Sprintf("session-%d", i), Calls: []recording.Call{
				{Seq: 0, Proto: "redis", Dst: "10.0.0.7:6379", Request: req, Response: resp},
				{Seq: 1, Proto: "http", Dst: "10.0.0.8:80", Request: req2, Response: resp2}}}
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		srv, err := mockserver.New(mockserver.Config{Admin: "-"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := srv.Load(context.Background(), mockserver.SessionsSource(sessions...)); err != nil {
			b.Fatal(err)
		}
		sessions = nil
		runtime.GC()
		runtime.ReadMemStats(&m2)
		b.ReportMetric(float64(payload)/n, "payload-B/session")
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/n, "sessions-B/session")
		b.ReportMetric(float64(m2.HeapAlloc-m1.HeapAlloc)/n, "index-B/session")
		b.ReportMetric(float64(m2.HeapAlloc-m0.HeapAlloc)/float64(payload), "heap/payload")
		runtime.KeepAlive(srv)
		srv.Close()
	}
}

// paced sends, on each of benchConns connections, one request every
// interval for dur, and returns two latency histograms: from each request's
// intended send time (no coordinated omission: a late client counts), and
// from the moment it was written (what the server takes, without the
// client's timer wake-up). As in drive, connections, buffers and histograms
// are made, and the garbage of earlier rounds collected, before the clock
// starts: a collection during the run, set off by the harness, would slow
// whichever server holds the larger heap.
func paced(b *testing.B, dial func(i int) net.Conn, payload func(i int) []byte, respLen func(i int) int, interval, dur time.Duration) (intended, sent *hdrhistogram.Histogram) {
	type client struct {
		conn     net.Conn
		br       *bufio.Reader
		out, buf []byte
		h, hs    *hdrhistogram.Histogram
	}
	hist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(10*time.Second), 3) }
	clients := make([]client, benchConns)
	for c := range clients {
		conn := dial(c)
		clients[c] = client{conn: conn, br: bufio.NewReader(conn), out: payload(c), buf: make([]byte, respLen(c)),
			h: hist(), hs: hist()}
	}
	runtime.GC()
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		cl := &clients[c]
		wg.Go(func() {
			defer cl.conn.Close()
			// spread the connections' first sends over one interval
			next := start.Add(interval * time.Duration(c) / benchConns)
			for next.Before(start.Add(dur)) {
				time.Sleep(time.Until(next))
				t0 := time.Now()
				if err := exchange(cl.conn, cl.br, cl.out, cl.buf); err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				cl.h.RecordValue(int64(now.Sub(next)))
				cl.hs.RecordValue(int64(now.Sub(t0)))
				next = next.Add(interval)
			}
		})
	}
	wg.Wait()
	intended, sent = hist(), hist()
	for _, cl := range clients {
		intended.Merge(cl.h)
		sent.Merge(cl.hs)
	}
	return intended, sent
}

// BenchmarkLatencyAtRate measures p50 and p99 at 64 connections sending
// 5,000, 20,000 and 40,000 requests per second in all (open loop, below
// saturation), for the mock server and the plain server, alternated. Each
// b.N iteration is one second of load per server and rate. "sent" latency
// runs from the write to the answer; "intended" from when the request
// should have been sent, so it also holds the client's own timer wake-up
// (hundreds of microseconds on a small VM), late sends included.
//
//	go test -run XXX -bench LatencyAtRate -benchtime 3x ./mockserver/
func BenchmarkLatencyAtRate(b *testing.B) {
	sv := benchServers(b, "rate")
	for _, rate := range []int{5000, 20000, 40000, 60000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			interval := time.Duration(benchConns) * time.Second / time.Duration(rate)
			hist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(10*time.Second), 3) }
			pi, ps, mi, ms := hist(), hist(), hist(), hist()
			for range b.N {
				i, s := paced(b, sv.dialPlain, sv.plainReq, sv.respLen, interval, time.Second)
				pi.Merge(i)
				ps.Merge(s)
				i, s = paced(b, sv.dialMock, sv.mockReq, sv.respLen, interval, time.Second)
				mi.Merge(i)
				ms.Merge(s)
			}
			us := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
			// p98 and p99.9 show where the tail leaves the servers' own
			// work: on a small VM both fall off a cliff of scheduling
			// stalls of milliseconds around p99
			for _, q := range []float64{50, 98, 99, 99.9} {
				b.ReportMetric(us(ps, q), fmt.Sprintf("plain-p%v-sent-µs", q))
				b.ReportMetric(us(ms, q), fmt.Sprintf("mock-p%v-sent-µs", q))
			}
			b.ReportMetric(us(pi, 99), "plain-p99-intended-µs")
			b.ReportMetric(us(mi, 99), "mock-p99-intended-µs")
		})
	}
}
