package capture_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrace-dev/retrace/internal/testenv"
	"golang.org/x/sync/errgroup"
)

// pgFanOut is a handler that makes three PostgreSQL queries at once on a
// pgx pool (default query mode: cached prepared statements) for every
// request, and answers what they returned.
type pgFanOut struct{ pool *pgxpool.Pool }

func (h pgFanOut) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	var a, c string
	var b int
	g, ctx := errgroup.WithContext(r.Context())
	g.Go(func() error { return h.pool.QueryRow(ctx, "SELECT $1::text || '-a'", id).Scan(&a) })
	g.Go(func() error { return h.pool.QueryRow(ctx, "SELECT length($1::text)", id).Scan(&b) })
	g.Go(func() error { return h.pool.QueryRow(ctx, "SELECT upper($1::text)", id).Scan(&c) })
	if err := g.Wait(); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	fmt.Fprintf(w, "%s|%d|%s", a, b, c)
}

// BenchmarkPostgresFanOut measures the pgx fan-out handler's throughput
// with the agent off and recording at 100%, in one run:
//
//	go test -run x -bench PostgresFanOut -benchtime 3000x -count 3 ./recording/capture/
//
// The throughput ratio of recording is ns/op(off) / ns/op(record=100%).
// The modes run one after the other in one process, so a shared machine's
// drift falls on them unevenly: for the ratio, run BenchmarkFanOutRatio
// with CAPTURE_BENCH_SERVICE=postgres, which alternates processes.
func BenchmarkPostgresFanOut(b *testing.B) {
	url := testenv.PostgresURL(b)
	for _, mode := range []struct {
		name string
		rate float64
	}{{"off", -1}, {"record=100%", 1}} {
		b.Run(mode.name, func(b *testing.B) {
			if mode.rate >= 0 {
				installRecorder(b, "pg-fanout", *sampler(b, mode.rate))
			}
			pool, err := pgxpool.New(context.Background(), url)
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: pgFanOut{pool}}
			served := make(chan struct{})
			go func() { defer close(served); srv.Serve(ln) }()
			c := newClient(16)
			b.Cleanup(func() {
				c.CloseIdleConnections()
				srv.Close()
				<-served
				pool.Close()
			})
			var n atomic.Int64
			get := func() error { return pgGet(c, ln.Addr().String(), fmt.Sprintf("rq%016x", n.Add(1))) }
			for range 200 { // warm the pool, its statement caches and the store
				if err := get(); err != nil {
					b.Fatal(err)
				}
			}
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := get(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// runPGFanOut is the pgx fan-out service in a child process
// (BenchmarkFanOutRatio with CAPTURE_BENCH_SERVICE=postgres).
func runPGFanOut() int {
	pool, err := pgxpool.New(context.Background(), os.Getenv(testenv.PostgresEnv))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	return serveChild(pgFanOut{pool}, pool.Close)
}

// pgGet sends one request to the pgx fan-out service and checks its
// answer.
func pgGet(c *http.Client, addr, id string) error {
	resp, err := c.Get("http://" + addr + "/work?id=" + id)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("%s-a|%d|%s", id, len(id), strings.ToUpper(id)); err != nil || string(body) != want {
		return fmt.Errorf("request %s: %s %v", id, body, err)
	}
	return nil
}
