package http2_test

import (
	"context"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/wire/http2"
)

// serveRecorded answers every stream of every connection on l with the
// response of x, from a ServerConn: the mock's work for a unary call.
func serveRecorded(b *testing.B, l net.Listener, x *http2.Exchange) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				sc := http2.NewServerConn(http2.ServerConfig{})
				buf := make([]byte, 64<<10)
				for {
					if out := sc.Output(); out != nil {
						if _, err := c.Write(out); err != nil {
							return
						}
					}
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					reqs, err := sc.Feed(buf[:n])
					for _, r := range reqs {
						if r.Ended {
							_ = sc.Respond(r.StreamID, x.Response)
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	b.Cleanup(func() { l.Close(); wg.Wait() })
}

// unaryRate makes calls unary calls from 64 goroutines over cc and returns
// calls per second.
func unaryRate(b *testing.B, cc *grpc.ClientConn, calls int) float64 {
	c := testpb.NewTestServiceClient(cc)
	req := &testpb.SimpleRequest{ResponseSize: 100, Payload: grpctest.Payload([]byte("bench"), 50)}
	const workers = 64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls / workers {
				if _, err := c.UnaryCall(context.Background(), req); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(calls/workers*workers) / time.Since(start).Seconds()
}

// BenchmarkMockVsGRPC measures, in the same sitting, unary calls per
// second from 64 concurrent streams over one ClientConn answered by a
// ServerConn from a recorded exchange, and answered by a grpc-go server
// with the same messages; it reports both rates and their ratio
// (mock/grpc, the median of alternating rounds).
//
//	go test -run XXX -bench MockVsGRPC -benchtime 5x ./wire/http2/
func BenchmarkMockVsGRPC(b *testing.B) {
	// One recorded UnaryCall.
	tap := recordGRPC(b, []string{"bench"})
	var x *http2.Exchange
	for _, e := range feedLog(b, tap.chunks(), rand.New(rand.NewPCG(1, 1)), 1<<20) {
		if e.Path() == "/grpc.testing.TestService/UnaryCall" && x == nil {
			x = e
		}
	}
	if x == nil {
		b.Fatal("no UnaryCall recorded")
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	grpctest.Serve(b, gl)
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	serveRecorded(b, ml, x)
	dial := func(addr string) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cc.Close() })
		return cc
	}
	gc, mc := dial(gl.Addr().String()), dial(ml.Addr().String())
	unaryRate(b, gc, 640) // warm both
	unaryRate(b, mc, 640)
	const calls = 6400
	var ratios, grpcRates, mockRates []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g := unaryRate(b, gc, calls)
		m := unaryRate(b, mc, calls)
		grpcRates, mockRates, ratios = append(grpcRates, g), append(mockRates, m), append(ratios, m/g)
	}
	b.ReportMetric(median(grpcRates), "grpc-calls/s")
	b.ReportMetric(median(mockRates), "mock-calls/s")
	b.ReportMetric(median(ratios), "mock/grpc")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
