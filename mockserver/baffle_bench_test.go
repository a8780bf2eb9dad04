package mockserver_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// BenchmarkBaffledAtRate is the mock's part of a write-path load test:
// baffled HTTP calls (a pricing service's), each under a fresh derived
// alias of one of 1,000 recordings (a new trace state per call, as `retrace
// load --trace-ids` sends), paced over 64 keep-alive connections at 5,000,
// 10,000 and 20,000 calls per second for one second per b.N iteration. It
// reports the answers per second, the client's p50/p99 from the write, and
// the mock's own time per answer (GET /answers) — the latency the mock adds
// to the service's call.
//
//	go test -run XXX -bench BaffledAtRate -benchtime 3x ./mockserver/
func BenchmarkBaffledAtRate(b *testing.B) {
	const recordings = 1000
	var sessions []*recording.Session
	for i := range recordings {
		sessions = append(sessions, baffledSession(fmt.Sprintf("rec-%04d", i), fmt.Sprintf("sku%04d", i)))
	}
	srv := mocktest.NewServer(b, mockserver.Config{}, sessions...)
	for _, rate := range []int{5000, 10000, 20000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			hist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(10*time.Second), 3) }
			sent := hist()
			var a0, a1 mockserver.AnswerTimes
			getJSON(b, srv.AdminURL()+"/answers", &a0)
			start := time.Now()
			for range b.N {
				sent.Merge(pacedBaffled(b, srv.Addr(), recordings, time.Duration(benchConns)*time.Second/time.Duration(rate), time.Second))
			}
			elapsed := time.Since(start)
			getJSON(b, srv.AdminURL()+"/answers", &a1)
			h0, _ := mockserver.DecodeAnswers(a0.Hist)
			h1, _ := mockserver.DecodeAnswers(a1.Hist)
			d := subtractHist(h1, h0)
			us := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
			b.ReportMetric(float64(d.TotalCount())/elapsed.Seconds(), "answers/s")
			b.ReportMetric(us(sent, 50), "client-p50-µs")
			b.ReportMetric(us(sent, 99), "client-p99-µs")
			b.ReportMetric(us(d, 50), "mock-p50-µs")
			b.ReportMetric(us(d, 99), "mock-p99-µs")
		})
	}
}

// subtractHist is after less before, bucket by bucket.
func subtractHist(after, before *hdrhistogram.Histogram) *hdrhistogram.Histogram {
	earlier := map[int64]int64{}
	for _, bar := range before.Distribution() {
		earlier[bar.From] = bar.Count
	}
	out := mockserver.NewAnswerHistogram()
	for _, bar := range after.Distribution() {
		if n := bar.Count - earlier[bar.From]; n > 0 {
			out.RecordValues(bar.From, n)
		}
	}
	return out
}

// pacedBaffled sends, on each of benchConns connections to the mock, one
// framed pricing request every interval for dur, each under a new alias,
// and returns the latency from each write to its whole answer.
func pacedBaffled(b *testing.B, mock string, recordings int, interval, dur time.Duration) *hdrhistogram.Histogram {
	const dst = "pricing.prod:8081"
	type client struct {
		conn net.Conn
		br   *bufio.Reader
		h    *hdrhistogram.Histogram
	}
	clients := make([]client, benchConns)
	for c := range clients {
		conn, err := net.Dial("tcp", mock)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Write(trace.AppendFrameHeader(nil, "", dst, 0)); err != nil {
			b.Fatal(err)
		}
		clients[c] = client{conn: conn, br: bufio.NewReader(conn), h: hdrhistogram.New(1, int64(10*time.Second), 3)}
	}
	runtime.GC()
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		cl := &clients[c]
		wg.Go(func() {
			defer cl.conn.Close()
			var frame []byte
			want := map[string]int{}
			next := start.Add(interval * time.Duration(c) / benchConns)
			for k := 0; next.Before(start.Add(dur)); k++ {
				r := (c*7919 + k) % recordings
				rec, sku := fmt.Sprintf("rec-%04d", r), fmt.Sprintf("sku%04d", r)
				tid, _ := trace.Alias(rec, "b"+strconv.Itoa(c)+"x"+strconv.Itoa(k)+"n"+strconv.FormatInt(start.UnixNano()%1e6, 36))
				req := "GET /price?sku=" + sku + " HTTP/1.1\r\nHost: pricing.prod:8081\r\nUser-Agent: t\r\n\r\n"
				frame = trace.AppendFrame(frame[:0], tid, dst, []byte(req))
				n, ok := want[sku]
				if !ok {
					body := `{"sku":"` + sku + `","cents":` + fmt.Sprint(len(sku)*100) + `}`
					n = len("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\n\r\n") + len(body)
					want[sku] = n
				}
				time.Sleep(time.Until(next))
				t0 := time.Now()
				if _, err := cl.conn.Write(frame); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.CopyN(io.Discard, cl.br, int64(n)); err != nil {
					b.Error(err)
					return
				}
				cl.h.RecordValue(int64(time.Since(t0)))
				next = next.Add(interval)
			}
		})
	}
	wg.Wait()
	out := hdrhistogram.New(1, int64(10*time.Second), 3)
	for _, cl := range clients {
		out.Merge(cl.h)
	}
	return out
}
