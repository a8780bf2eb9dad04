package hook_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
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

// shopRate serves an HTTP service whose every request makes one unary
// gRPC call to a downstream over one shared ClientConn (both in this
// process, with the ClientConn made after the agent, if any, was
// installed), and returns the requests per second 64 keep-alive clients
// get through it.
func shopRate(b *testing.B, requests int) float64 {
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, &grpctest.Service{})
	go func() { _ = gs.Serve(dl) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(dl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestServiceClient(cc)
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := metadata.AppendToOutgoingContext(r.Context(), "x-trace", "bench")
		resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 100, Payload: grpctest.Payload([]byte(r.URL.Path), 50)})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Write(resp.GetPayload().GetBody())
	})}
	go func() { _ = srv.Serve(sl) }()
	defer srv.Close()
	const workers = 64
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer hc.CloseIdleConnections()
	get := func(i int) error {
		resp, err := hc.Get(fmt.Sprintf("http://%s/item/%d", sl.Addr(), i))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	}
	if err := get(0); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range requests / workers {
				if err := get(w*requests + i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(requests/workers*workers) / time.Since(start).Seconds()
}

// BenchmarkGRPCRecordRatio measures the throughput of a service whose
// every request calls a gRPC downstream (shopRate) with the agent off and
// in record mode, every request sampled and written with its gRPC call
// (the stream's trace in-band, its header blocks rewritten, both
// directions reassembled by capture) to a directory store, in alternating
// rounds of the same sitting, and reports the ratio record/off (median of
// rounds).
//
//	go test -run XXX -bench GRPCRecordRatio -benchtime 5x ./hook/
func BenchmarkGRPCRecordRatio(b *testing.B) {
	const requests = 3200
	shopRate(b, 320)
	var ratios, offs, ons []float64
	for i := 0; i < b.N; i++ {
		off := shopRate(b, requests)
		store, err := recording.NewDirStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		smp, _ := recording.NewSampler(1)
		pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: smp, QueueSize: 1 << 14})
		if err != nil {
			b.Fatal(err)
		}
		rec, err := capture.New(capture.Config{Pipeline: pipe})
		if err != nil {
			b.Fatal(err)
		}
		undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		on := shopRate(b, requests)
		undo()
		if err := rec.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		if st := rec.Stats(); st.Recorded < requests || st.Dropped > 0 {
			b.Fatalf("recorded %d of %d requests, %d dropped", st.Recorded, requests, st.Dropped)
		}
		offs, ons, ratios = append(offs, off), append(ons, on), append(ratios, on/off)
	}
	b.ReportMetric(med(offs), "off-req/s")
	b.ReportMetric(med(ons), "record-req/s")
	b.ReportMetric(med(ratios), "record/off")
}
