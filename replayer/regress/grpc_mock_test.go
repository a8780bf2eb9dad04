package regress_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
	"github.com/retrace-dev/retrace/wire/http2"
)

// frontend is a gRPC service whose UnaryCall asks a gRPC downstream (one
// shared ClientConn) and answers what it said. Its handler passes the
// inbound retrace-trace-id on to the downstream call, as the agent does
// in replay mode (hook/grpc.go); sizeAdd changes the request it sends
// downstream (a changed build).
type frontend struct {
	testpb.UnimplementedTestServiceServer
	down    testpb.TestServiceClient
	sizeAdd int32
}

func (f *frontend) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for _, k := range []string{"x-id", http2.TraceField} {
		if v := md.Get(k); len(v) > 0 {
			out.Set(k, v[0])
		}
	}
	req := proto.Clone(in).(*testpb.SimpleRequest)
	req.ResponseSize += f.sizeAdd
	return f.down.UnaryCall(metadata.NewOutgoingContext(ctx, out), req)
}

const inventory = "inventory.internal:50051"

// serveFrontend serves a frontend calling the downstream through dial on
// l, until the test ends.
func serveFrontend(t *testing.T, l net.Listener, f *frontend, dial func(context.Context, string) (net.Conn, error)) {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+inventory, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	f.down = testpb.NewTestServiceClient(cc)
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); <-done })
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestReplayGRPCWithMock: a gRPC service and its gRPC downstream, both
// recorded from their real connections (32 traces at once over shared
// connections); replayed by the runner against the service with the
// downstream stopped and the real mock server answering it, each stream by
// its in-band trace. The same build passes; a build that sends another
// request downstream fails on that call alone, naming the field.
func TestReplayGRPCWithMock(t *testing.T) {
	const traces = 32
	downRec := replaytest.NewH2Recorder(listen(t))
	downCtx, stopDown := context.WithCancel(context.Background())
	downSrv := grpc.NewServer()
	testpb.RegisterTestServiceServer(downSrv, &grpctest.Service{})
	downDone := make(chan struct{})
	go func() { defer close(downDone); _ = downSrv.Serve(downRec) }()
	frontRec := replaytest.NewH2Recorder(listen(t))
	serveFrontend(t, frontRec, &frontend{}, func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", downRec.Addr().String())
	})
	client, err := grpc.NewClient(frontRec.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range traces {
		wg.Go(func() {
			ctx := metadata.AppendToOutgoingContext(downCtx, "x-id", fmt.Sprintf("f%02d", i))
			if _, err := testpb.NewTestServiceClient(client).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: int32(10 + i), Payload: grpctest.Payload([]byte{byte('a' + i%26)}, 4)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	client.Close()
	stopDown()
	downSrv.Stop() // the downstream is gone for the replay
	<-downDone

	calls := map[string]*recording.Session{}
	for _, s := range downRec.Sessions(t, "x-id") {
		calls[s.ID] = s
	}
	sessions := frontRec.Sessions(t, "x-id")
	if len(sessions) != traces || len(calls) != traces {
		t.Fatalf("recorded %d sessions and %d downstream calls", len(sessions), len(calls))
	}
	for _, s := range sessions {
		c := calls[s.ID]
		if c == nil {
			t.Fatalf("session %s: no downstream call", s.ID)
		}
		s.Calls = []recording.Call{{Seq: 0, Proto: http2.GRPCName, Dst: inventory, Request: c.Inbound.Request, Response: c.Inbound.Response}}
	}
	mock := mocktest.NewServer(t, mockserver.Config{}, sessions...)

	replay := func(f *frontend, schema bool) *collected {
		l := listen(t)
		serveFrontend(t, l, f, replaytest.FramedDialer(mock.Addr(), inventory))
		cfg := regress.Config{Source: regress.Sessions(sessions), Target: "http://" + l.Addr().String(), MockAdmin: mock.AdminURL(), Concurrency: 16}
		if schema {
			cfg.Schema = testSchema(t)
		}
		return replayGRPC(t, cfg)
	}
	c := replay(&frontend{}, false)
	if n := len(c.byStatus(regress.Passed)); n != traces {
		for _, r := range c.results {
			if r.Status != regress.Passed {
				t.Errorf("%s: %s %s %v", r.Session, r.Status, r.Error, r.Findings)
			}
		}
		t.Fatalf("same build: %d of %d passed", n, traces)
	}
	for name, schema := range map[string]bool{"message[0].2": false, "message[0].response_size": true} {
		c = replay(&frontend{sizeAdd: 1}, schema)
		for _, r := range c.results {
			if r.Status != regress.Failed || len(r.Findings) != 1 {
				t.Errorf("%s: %s %s %v", r.Session, r.Status, r.Error, r.Findings)
				continue
			}
			f := r.Findings[0]
			if f.Where != regress.InDownstream || f.Path != name || f.Call == nil || f.Call.Proto != http2.GRPCName || f.Call.Dst != inventory {
				t.Errorf("%s: finding %+v", r.Session, f)
			}
		}
	}
}
