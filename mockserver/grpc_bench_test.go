package mockserver_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
)

// benchUnary makes calls unary calls from 64 goroutines over cc, each
// goroutine one trace (tag(i)), and returns calls per second.
func benchUnary(b *testing.B, cc *grpc.ClientConn, calls int, tag func(int) string) float64 {
	c := testpb.NewTestServiceClient(cc)
	const workers = 64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-trace", tag(w))
			ctx = inTrace(ctx, tag(w))
			req := &testpb.SimpleRequest{ResponseSize: 100, Payload: grpctest.Payload([]byte(tag(w)), 50)}
			for range calls / workers {
				if _, err := c.UnaryCall(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(calls/workers*workers) / time.Since(start).Seconds()
}

// BenchmarkMockVsGRPC measures, in the same sitting, unary calls per
// second from 64 concurrent streams (64 traces) over one ClientConn
// answered by a running mock server from the recordings of a grpc-go
// server, through the agent's framing, and answered by that grpc-go
// server itself; it reports both rates and their ratio (mock/grpc, the
// median of alternating rounds). Each trace's one recorded call answers
// all its calls (the destination's strategy is "first").
//
//	go test -run XXX -bench MockVsGRPC -benchtime 5x ./mockserver/
func BenchmarkMockVsGRPC(b *testing.B) {
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	client := func(addr string, opts ...grpc.DialOption) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cc.Close() })
		return cc
	}
	tag := func(i int) string { return fmt.Sprintf("bench-%02d", i) }
	// The recording: one call per trace to a tapped server.
	rl := listen()
	dst := rl.Addr().String()
	tap := mocktest.NewH2Listener(rl)
	grpctest.Serve(b, tap)
	benchUnary(b, client(dst), 64, tag)
	sessions := tap.Sessions(b, dst, xTrace)
	if len(sessions) != 64 {
		b.Fatalf("%d sessions recorded", len(sessions))
	}
	// The baseline: another grpc-go server, not tapped.
	gl := listen()
	grpctest.Serve(b, gl)
	gc := client(gl.Addr().String())
	srv := mocktest.NewServer(b, mockserver.Config{DstStrategies: map[string][]mockserver.Strategy{dst: {mockserver.StrategyFirst}}}, sessions...)
	d := &mocktest.Dialer{Mock: srv.Addr(), Dst: dst}
	mc := client(dst, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	benchUnary(b, gc, 640, tag) // warm both
	benchUnary(b, mc, 640, tag)
	const calls = 6400
	var ratios, grpcRates, mockRates []float64
	b.ResetTimer()
	for range b.N {
		g := benchUnary(b, gc, calls, tag)
		m := benchUnary(b, mc, calls, tag)
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
