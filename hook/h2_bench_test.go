package hook_test

import (
	"context"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/trace"
)

// grpcRate serves grpctest's service on a new listener and returns unary
// calls per second from 64 goroutines over one new ClientConn, each call
// on a goroutine bound to a trace of its own and carrying x-trace.
func grpcRate(b *testing.B, l net.Listener, calls int) float64 {
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &grpctest.Service{})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)
	req := &testpb.SimpleRequest{ResponseSize: 100, Payload: grpctest.Payload([]byte("bench"), 50)}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-trace", "bench")
	if _, err := c.UnaryCall(ctx, req); err != nil {
		b.Fatal(err)
	}
	const workers = 64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer trace.Bind(&trace.Trace{ID: "bench-" + string(rune('a'+w%26))})()
			for range calls / workers {
				if _, err := c.UnaryCall(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(calls/workers*workers) / time.Since(start).Seconds()
}

// BenchmarkGRPCReplayRatio measures a gRPC service's unary throughput (64
// concurrent calls over one ClientConn, client and service in this
// process) with the agent off and in replay mode, in alternating rounds of
// the same sitting, and reports the ratio replay/off (median of rounds).
// In replay mode every call carries its trace in-band, and the service's
// read side rewrites every header block and binds each stream.
//
//	go test -run XXX -bench GRPCReplayRatio -benchtime 5x ./hook/
func BenchmarkGRPCReplayRatio(b *testing.B) {
	const calls = 6400
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	grpcRate(b, listen(), 640)
	var ratios, offs, ons []float64
	for i := 0; i < b.N; i++ {
		off := grpcRate(b, listen(), calls)
		l := listen()
		undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:1", Passthrough: []string{l.Addr().String()}, NoClock: true})
		if err != nil {
			b.Fatal(err)
		}
		on := grpcRate(b, l, calls)
		undo()
		offs, ons, ratios = append(offs, off), append(ons, on), append(ratios, on/off)
	}
	b.ReportMetric(med(offs), "off-calls/s")
	b.ReportMetric(med(ons), "replay-calls/s")
	b.ReportMetric(med(ratios), "replay/off")
}

func med(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
