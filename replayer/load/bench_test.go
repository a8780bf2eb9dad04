package load

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkRunMax measures the generator's cost per request against a
// minimal local HTTP server (both share the machine).
func BenchmarkRunMax(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	in := input(b, numbered(b.N, time.Unix(0, 0), time.Millisecond))
	exec, err := NewHTTPExecutor(srv.URL, ExecutorConfig{Concurrency: 32})
	if err != nil {
		b.Fatal(err)
	}
	defer exec.Close()
	b.ReportAllocs()
	b.ResetTimer()
	res, err := Run(context.Background(), Config{Mode: ModeMax, Concurrency: 32, Executor: exec}, NewReader(in, "bench"))
	if err != nil || res.Sent != int64(b.N) {
		b.Fatalf("sent %d of %d: %v", res.Sent, b.N, err)
	}
}

// BenchmarkDispatch measures reading, pacing and recording alone, with an
// executor that does nothing.
func BenchmarkDispatch(b *testing.B) {
	in := input(b, numbered(b.N, time.Unix(0, 0), time.Millisecond))
	b.ReportAllocs()
	b.ResetTimer()
	res, err := Run(context.Background(), Config{Mode: ModeMax, Concurrency: 4, Executor: nopExecutor{}}, NewReader(in, "bench"))
	if err != nil || res.Sent != int64(b.N) {
		b.Fatalf("sent %d of %d: %v", res.Sent, b.N, err)
	}
}

type nopExecutor struct{}

func (nopExecutor) Execute(context.Context, *Request) Outcome { return Outcome{Status: 200} }
func (nopExecutor) Close() error                              { return nil }

var _ io.Closer = nopExecutor{}
