package hook_test

import (
	"context"
	"fmt"
	"net"
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
	"github.com/retrace-dev/retrace/trace"
)

// TestReplayGRPCBothWays runs a grpc-go client and server in one process
// in replay mode: 64 traces call over one ClientConn from goroutines
// bound to their traces. The client side adds each call's trace in-band
// (grpc-go writes every frame from one goroutine); the server side's read
// hook removes it before grpc-go decodes the headers, and binds it to the
// goroutine that starts the call's handler, so every handler, and a
// goroutine the handler starts, runs in its caller's trace, and no handler
// sees retrace-* metadata. A call of no trace runs in none.
func TestReplayGRPCBothWays(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ handler, child string }
	var mu sync.Mutex
	got := map[string][]seen{}
	var leaked []string
	svc := &grpctest.Service{OnCall: func(md metadata.MD) {
		for k := range md {
			if strings.HasPrefix(k, "retrace-") {
				mu.Lock()
				leaked = append(leaked, k)
				mu.Unlock()
			}
		}
		tag := md.Get("x-trace")[0]
		s := seen{handler: trace.CurrentID()}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.child = trace.CurrentID()
		}()
		<-done
		mu.Lock()
		got[tag] = append(got[tag], s)
		mu.Unlock()
	}}
	h2Before := hook.ReadStats().H2Conns
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:1", Passthrough: []string{l.Addr().String()}, NoClock: true})
	grpctest.ServeService(t, l, svc)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := grpctest.Exercise(ctx, cc, "untraced"); err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("trace-%02d", i)
			defer trace.Bind(&trace.Trace{ID: tag})()
			if _, err := grpctest.Exercise(ctx, cc, tag); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := grpctest.Exercise(ctx, cc, "untraced"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) > 0 {
		t.Fatalf("handlers saw %d retrace-* fields (%+v)", len(leaked), hook.ReadStats())
	}
	if len(got) != n+1 {
		t.Fatalf("%d tags seen", len(got))
	}
	for tag, calls := range got {
		want := tag
		if tag == "untraced" {
			want = ""
		}
		for _, s := range calls {
			if s.handler != want || s.child != want {
				t.Fatalf("a call of %s ran in trace %q, its child in %q", tag, s.handler, s.child)
			}
		}
	}
	if st := hook.ReadStats(); st.H2Conns-h2Before != 1 {
		t.Fatalf("%d HTTP/2 connections rewritten", st.H2Conns-h2Before)
	}
}

// TestRecordCountsInboundHTTP2: record mode cannot record an inbound
// HTTP/2 connection yet; it counts it and the server works as without the
// agent.
func TestRecordCountsInboundHTTP2(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	before := hook.ReadStats().H2Unrecorded
	install(t, hook.Config{Mode: hook.Record, Recorder: &writeRecorder{}})
	grpctest.Serve(t, l)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := grpctest.Exercise(ctx, cc, "rec"); err != nil {
		t.Fatal(err)
	}
	if got := hook.ReadStats().H2Unrecorded - before; got != 1 {
		t.Fatalf("%d inbound HTTP/2 connections counted", got)
	}
}

// TestReplayTimeOnStreams: a stream's retrace-replay-time sets the clock
// its handler sees, as Retrace-Replay-Time does for HTTP/1.
func TestReplayTimeOnStreams(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recorded := time.Date(2026, 11, 29, 10, 15, 23, 0, time.UTC)
	var mu sync.Mutex
	var seen []time.Time
	svc := &grpctest.Service{OnCall: func(metadata.MD) {
		mu.Lock()
		seen = append(seen, time.Now())
		mu.Unlock()
	}}
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:1", Passthrough: []string{l.Addr().String()}, NoGRPC: false})
	grpctest.ServeService(t, l, svc)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	func() {
		defer trace.Bind(&trace.Trace{ID: "clock-1"})()
		c := metadata.AppendToOutgoingContext(ctx, "retrace-replay-time", fmt.Sprint(recorded.UnixNano()))
		if _, err := grpctest.Exercise(c, cc, "clock"); err != nil {
			t.Fatal(err)
		}
	}()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 4 {
		t.Fatalf("%d calls", len(seen))
	}
	for _, s := range seen {
		if d := s.Sub(recorded); d < 0 || d > 10*time.Second {
			t.Fatalf("a handler saw %v, recorded %v", s, recorded)
		}
	}
}

// TestReplayStreamBindingsEnd: every stream's binding ends, whether the
// server finished the stream or the client cancelled it: no binding is
// left once the calls are over, while the connection stays open.
func TestReplayStreamBindingsEnd(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	defer close(block)
	svc := &grpctest.Service{OnCall: func(md metadata.MD) {
		if md.Get("x-trace")[0] == "cancel" {
			<-block // until the test ends: the client cancels first
		}
	}}
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:1", Passthrough: []string{l.Addr().String()}, NoClock: true})
	grpctest.ServeService(t, l, svc)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	bound := trace.Bound()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 8 {
		func() {
			defer trace.Bind(&trace.Trace{ID: fmt.Sprintf("end-%d", i)})()
			if _, err := grpctest.Exercise(ctx, cc, "done"); err != nil {
				t.Fatal(err)
			}
			// Cancelled, not timed out: the server learns of it only from
			// the client's RST_STREAM, and its handler writes nothing.
			c, cancelCall := context.WithCancel(context.Background())
			defer cancelCall()
			time.AfterFunc(50*time.Millisecond, cancelCall)
			c = metadata.AppendToOutgoingContext(c, "x-trace", "cancel")
			if _, err := testpb.NewTestServiceClient(cc).UnaryCall(c, &testpb.SimpleRequest{}); err == nil {
				t.Fatal("a blocked call answered")
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for trace.Bound() != bound && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := trace.Bound(); got != bound {
		t.Fatalf("%d bindings left, %d before the calls", got, bound)
	}
}
