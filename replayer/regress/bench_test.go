package regress_test

import (
	"context"
	"runtime"
	"testing"

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
