package capture_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
)

// The load of BenchmarkGRPCInboundRecordRatio comes from a child process
// (the test binary as "grpcload"), so that the agent follows the service
// only: the gRPC target and the number of calls.
const (
	grpcLoadTargetEnv = "CAPTURE_GRPC_TARGET"
	grpcLoadCallsEnv  = "CAPTURE_GRPC_CALLS"
	// grpcLoadTracedEnv: each call carries a trace of its worker in
	// retrace-trace-id, as a replayed RPC does
	grpcLoadTracedEnv = "CAPTURE_GRPC_TRACED"
)

// runGRPCLoad is the "grpcload" child: it prints the unary calls per second
// it gets from its target.
func runGRPCLoad() int {
	calls, _ := strconv.Atoi(os.Getenv(grpcLoadCallsEnv))
	rate, err := unaryRate(os.Getenv(grpcLoadTargetEnv), calls, os.Getenv(grpcLoadTracedEnv) != "")
	if err != nil {
		fmt.Println("error:", strings.ReplaceAll(err.Error(), " ", "_"))
		return 1
	}
	fmt.Printf("%.1f\n", rate)
	return 0
}

// grpcUnaryRate serves grpctest's service on l and returns the unary calls
// per second a "grpcload" child gets from it.
func grpcUnaryRate(b *testing.B, l net.Listener, calls int, env ...string) float64 {
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &grpctest.Service{})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	out, stop := startChild(b, "grpcload", append([]string{grpcLoadTargetEnv + "=" + l.Addr().String(), fmt.Sprintf("%s=%d", grpcLoadCallsEnv, calls)}, env...)...)
	stop()
	rate, err := strconv.ParseFloat(out, 64)
	if err != nil {
		b.Fatalf("grpcload: %s", out)
	}
	return rate
}

// unaryRate makes calls unary calls to addr from 64 goroutines over one
// ClientConn and returns them per second; traced, each worker's calls
// carry its trace in retrace-trace-id, as replayed RPCs do.
func unaryRate(addr string, calls int, traced bool) (float64, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)
	req := &testpb.SimpleRequest{ResponseSize: 100, Payload: grpctest.Payload([]byte("bench"), 50)}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-trace", "bench")
	if _, err := c.UnaryCall(ctx, req); err != nil {
		return 0, err
	}
	const workers = 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctx
			if traced {
				ctx = metadata.AppendToOutgoingContext(ctx, "retrace-trace-id", fmt.Sprintf("bench-%02d", w))
			}
			for range calls / workers {
				if _, err := c.UnaryCall(ctx, req); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(calls/workers*workers) / time.Since(start).Seconds(), nil
}

// BenchmarkGRPCInboundRecordRatio measures a gRPC service's unary
// throughput (64 concurrent calls over one ClientConn from a child
// process, the service in this one) with the agent off and in record mode, every call sampled and
// one in ten, sessions written to a directory store, in alternating rounds
// of the same sitting; it reports the ratios record/off (medians of the
// rounds).
//
//	go test -run XXX -bench GRPCInboundRecordRatio -benchtime 5x ./recording/capture/
func BenchmarkGRPCInboundRecordRatio(b *testing.B) {
	const calls = 32000 // about a second each at agent off
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	record := func(rate float64) float64 {
		store, err := recording.NewDirStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: *sampler(b, rate), QueueSize: 1 << 14})
		if err != nil {
			b.Fatal(err)
		}
		rec, err := capture.New(capture.Config{Pipeline: pipe, App: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
		if err != nil {
			b.Fatal(err)
		}
		on := grpcUnaryRate(b, listen(), calls)
		undo()
		if err := rec.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		if st := rec.Stats(); st.Recorded < st.Sampled || st.Sampled == 0 {
			b.Fatalf("recorded %d of %d sampled", st.Recorded, st.Sampled)
		}
		return on
	}
	grpcUnaryRate(b, listen(), 640)
	var offs, alls, tenths, rAll, rTenth []float64
	for i := 0; i < b.N; i++ {
		off := grpcUnaryRate(b, listen(), calls)
		all := record(1)
		tenth := record(0.1)
		offs, alls, tenths = append(offs, off), append(alls, all), append(tenths, tenth)
		rAll, rTenth = append(rAll, all/off), append(rTenth, tenth/off)
		b.Logf("round %d: off %.0f, record all %.0f, 10%% %.0f calls/s", i, off, all, tenth)
	}
	b.ReportMetric(median2(offs), "off-calls/s")
	b.ReportMetric(median2(alls), "record-all-calls/s")
	b.ReportMetric(median2(tenths), "record-10%-calls/s")
	b.ReportMetric(median2(rAll), "record-all/off")
	b.ReportMetric(median2(rTenth), "record-10%/off")
}

func median2(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// BenchmarkGRPCInboundReplayRatio measures a gRPC service's unary
// throughput (64 concurrent calls over one ClientConn from a child
// process, each carrying its worker's trace in retrace-trace-id as a
// replayed RPC does; the service in this one) with the agent off and in
// replay mode (every header block rewritten, every stream bound to its
// trace), in alternating rounds of the same sitting; it reports the ratio
// replay/off (median of the rounds). Unlike hook's
// BenchmarkGRPCReplayRatio, the client is not under the agent.
//
//	go test -run XXX -bench GRPCInboundReplayRatio -benchtime 5x ./recording/capture/
func BenchmarkGRPCInboundReplayRatio(b *testing.B) {
	const calls = 32000
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	traced := grpcLoadTracedEnv + "=1"
	grpcUnaryRate(b, listen(), 640, traced)
	var offs, ons, ratios []float64
	for i := 0; i < b.N; i++ {
		off := grpcUnaryRate(b, listen(), calls, traced)
		undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:1", NoClock: true})
		if err != nil {
			b.Fatal(err)
		}
		before := hook.ReadStats().Traced
		on := grpcUnaryRate(b, listen(), calls, traced)
		bound := hook.ReadStats().Traced - before
		undo()
		if bound < calls {
			b.Fatalf("%d of %d replayed calls bound to their traces", bound, calls)
		}
		offs, ons, ratios = append(offs, off), append(ons, on), append(ratios, on/off)
		b.Logf("round %d: off %.0f, replay %.0f calls/s", i, off, on)
	}
	b.ReportMetric(median2(offs), "off-calls/s")
	b.ReportMetric(median2(ons), "replay-calls/s")
	b.ReportMetric(median2(ratios), "replay/off")
}
