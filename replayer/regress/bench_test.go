package regress_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
	"github.com/retrace-dev/retrace/replayer/report"
)

// BenchmarkReplay measures sessions replayed and diffed per second at
// concurrency 64: the shop behind the real mock server (each downstream
// call framed as the agent frames it), every session registered under its
// own trace id, its response and downstream request diffed, and the
// result written to a report. b.N sessions stream from a generator, so
// the heap figure shows whether memory stays flat as b.N grows:
//
//	go test -run XXX -bench Replay -benchtime 10000x ./replayer/regress
func BenchmarkReplay(b *testing.B) {
	sessions := record(b)
	mock := mocktest.NewServer(b, mockserver.Config{}, sessions...)
	shop := replaytest.NewShop(b, replaytest.ShopV1, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	rules, _ := diff.NewRules(diff.Rule{Ignore: "body.ts"}, diff.Rule{IgnoreHeader: "X-Request-Id"})
	n := b.N
	src := regress.SourceFunc(func(ctx context.Context, fn func(*recording.Session) error) error {
		for i := 0; i < n; i++ {
			if err := fn(sessions[i%len(sessions)]); err != nil {
				return err
			}
		}
		return nil
	})
	rep, err := report.New(report.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	var peak uint64
	var ms runtime.MemStats
	b.ReportAllocs()
	b.ResetTimer()
	err = regress.Run(context.Background(), regress.Config{Source: src, Target: shop.URL, MockAdmin: mock.AdminURL(),
		Concurrency: 64, Rules: rules}, func(r *regress.Result) {
		rep.Add(r)
		if rep.Counts().Sessions%1000 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	sum, err := rep.Close()
	if err != nil {
		b.Fatal(err)
	}
	if sum.Passed != n {
		b.Fatalf("%d of %d passed (%d errors: %v)", sum.Passed, n, sum.Errors, sum.ErrorSessions)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "sessions/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
}

// BenchmarkMovedDestinations compares replays whose downstream is where
// it was recorded with replays whose downstream moved to an address no
// recording names (the mock server maps it automatically, DESIGN.md
// section 10): rounds of 2000 sessions at concurrency 64, alternated,
// the ratio of their throughputs reported (1 = no cost):
//
//	go test -run XXX -bench MovedDestinations -benchtime 1x ./replayer/regress
func BenchmarkMovedDestinations(b *testing.B) {
	sessions := record(b)
	rules, _ := diff.NewRules(diff.Rule{Ignore: "body.ts"}, diff.Rule{IgnoreHeader: "X-Request-Id"})
	const perRound, rounds = 2000, 5
	round := func(dst string) float64 {
		mock := mocktest.NewServer(b, mockserver.Config{}, sessions...)
		shop := replaytest.NewShop(b, replaytest.ShopV1, replaytest.Framed(mock.Addr(), dst))
		src := regress.SourceFunc(func(ctx context.Context, fn func(*recording.Session) error) error {
			for i := 0; i < perRound; i++ {
				if err := fn(sessions[i%len(sessions)]); err != nil {
					return err
				}
			}
			return nil
		})
		passed := 0
		start := time.Now()
		err := regress.Run(context.Background(), regress.Config{Source: src, Target: shop.URL, MockAdmin: mock.AdminURL(),
			Concurrency: 64, Rules: rules}, func(r *regress.Result) {
			if r.Status == regress.Passed {
				passed++
			}
		})
		el := time.Since(start)
		if err != nil || passed != perRound {
			b.Fatalf("%s: %d of %d passed: %v", dst, passed, perRound, err)
		}
		shop.Close()
		mock.Close()
		return float64(perRound) / el.Seconds()
	}
	var recorded, moved float64
	for range b.N {
		for range rounds {
			recorded += round(replaytest.PricesDst)
			moved += round("prices.staging.invalid:9080")
		}
	}
	b.ReportMetric(recorded/float64(rounds*b.N), "recorded-sessions/s")
	b.ReportMetric(moved/float64(rounds*b.N), "moved-sessions/s")
	b.ReportMetric(moved/recorded, "moved/recorded")
}

// BenchmarkReplayGRPC measures gRPC sessions replayed and compared per
// second at concurrency 64 (every kind of call: unary, a status, server-
// and client-streaming, bidirectional, health; each session one stream of
// the runner's shared connections, its response decoded and diffed field
// by field) against a grpc-go server, and the same calls made by a grpc-go
// client over one ClientConn, 64 traces at once, in the same run: the
// ratio is the runner's rate against the client's.
//
//	go test -run XXX -bench ReplayGRPC -benchtime 3000x ./replayer/regress
func BenchmarkReplayGRPC(b *testing.B) {
	sessions := replaytest.RecordGRPC(b, 16)
	target := replaytest.ServeGRPC(b, &grpctest.Service{})
	n := b.N
	src := regress.SourceFunc(func(ctx context.Context, fn func(*recording.Session) error) error {
		for i := 0; i < n; i++ {
			if err := fn(sessions[i%len(sessions)]); err != nil {
				return err
			}
		}
		return nil
	})
	b.ResetTimer()
	start := time.Now()
	failed := 0
	err := regress.Run(context.Background(), regress.Config{Source: src, Target: target, Concurrency: 64}, func(r *regress.Result) {
		if r.Status != regress.Passed {
			failed++
		}
	})
	replay := time.Since(start)
	b.StopTimer()
	if err != nil || failed > 0 {
		b.Fatalf("%v; %d failed", err, failed)
	}
	cc, err := grpc.NewClient(strings.TrimPrefix(target, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	traces := max(1, n/replaytest.GRPCCallsPerTrace)
	work := make(chan int, traces)
	for i := range traces {
		work <- i
	}
	close(work)
	start = time.Now()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range work {
				if err := replaytest.GRPCCalls(context.Background(), cc, fmt.Sprintf("b%05d", i)); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	direct := time.Since(start)
	replayRate := float64(n) / replay.Seconds()
	directRate := float64(traces*replaytest.GRPCCallsPerTrace) / direct.Seconds()
	b.ReportMetric(replayRate, "sessions/s")
	b.ReportMetric(directRate, "client-calls/s")
	b.ReportMetric(replayRate/directRate, "ratio")
}
