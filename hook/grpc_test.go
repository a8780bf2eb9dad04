package hook_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/trace"
)

// TestGRPCCarriesTrace makes calls of 64 traces, each on a goroutine bound
// to its trace, over one grpc-go ClientConn: with the patch, every call
// reaches the server with its own caller's trace in retrace-trace-id
// (grpc-go writes all frames from one goroutine, so only the caller's
// goroutine knows the trace), metadata the application set is kept, and a
// call of no trace carries none.
func TestGRPCCarriesTrace(t *testing.T) {
	hook.PatchGRPC(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := grpctest.Serve(t, l)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("trace-%02d", i)
			defer trace.Bind(&trace.Trace{ID: tag})()
			c := ctx
			if i%2 == 0 {
				c = metadata.NewOutgoingContext(ctx, metadata.Pairs("x-app", tag))
			}
			if _, err := grpctest.Exercise(c, cc, tag); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := grpctest.Exercise(ctx, cc, "untraced"); err != nil {
		t.Fatal(err)
	}
	if len(svc.Seen) != 4*(n+1) {
		t.Fatalf("%d calls seen", len(svc.Seen))
	}
	for _, md := range svc.Seen {
		tag := md.Get("x-trace")[0]
		got := md.Get(hook.GRPCTraceKey)
		if tag == "untraced" {
			if len(got) != 0 {
				t.Fatalf("an untraced call carried %v", got)
			}
			continue
		}
		if len(got) != 1 || got[0] != tag {
			t.Fatalf("call of %s carried trace %v", tag, got)
		}
		var i int
		fmt.Sscanf(tag, "trace-%d", &i)
		if app := md.Get("x-app"); i%2 == 0 && (len(app) != 1 || app[0] != tag) {
			t.Fatalf("call of %s lost the application's metadata: %v", tag, md)
		}
	}
}
