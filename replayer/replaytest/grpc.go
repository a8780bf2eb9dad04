package replaytest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// GRPCCallsPerTrace is how many RPCs (sessions) RecordGRPC makes per trace.
const GRPCCallsPerTrace = 6

// RecordGRPC serves grpc-go's TestService (internal/grpctest) on an
// H2Recorder and makes traces traces of calls over one ClientConn at
// once: unary ("<tag>-unary"), unary with a NotFound status ("-status"),
// server streaming ("-out"), client streaming ("-in"), bidirectional
// ("-bidi") and a health check ("-health"), each RPC a session whose id is
// its tag ("t03-unary") and whose request carries x-trace: <tag>.
func RecordGRPC(t *testing.T, traces int) []*recording.Session {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := NewH2Recorder(l)
	stop := serveGRPC(t, rec, &grpctest.Service{})
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, traces)
	for i := 0; i < traces; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := grpcCalls(context.Background(), cc, fmt.Sprintf("t%02d", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	cc.Close()
	stop()
	ss := rec.Sessions(t, "x-id")
	if len(ss) != traces*GRPCCallsPerTrace {
		t.Fatalf("recorded %d sessions, want %d", len(ss), traces*GRPCCallsPerTrace)
	}
	return ss
}

// serveGRPC serves svc (and the health and reflection services) on l
// until the returned function is called (or the test ends).
func serveGRPC(t *testing.T, l net.Listener, svc testpb.TestServiceServer, opts ...grpc.ServerOption) (stop func()) {
	t.Helper()
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, svc)
	healthpb.RegisterHealthServer(srv, healthServer{})
	reflection.Register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { srv.Stop(); <-done }) }
	t.Cleanup(stop)
	return stop
}

type healthServer struct {
	healthpb.UnimplementedHealthServer
}

func (healthServer) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// grpcCalls makes one trace's RPCs; each carries "x-id", the session id
// the recorder gives it.
func grpcCalls(ctx context.Context, cc *grpc.ClientConn, tag string) error {
	c := testpb.NewTestServiceClient(cc)
	id := func(kind string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-id", tag+"-"+kind, "x-trace", tag)
	}
	seed := []byte(tag)
	if _, err := c.UnaryCall(id("unary"), &testpb.SimpleRequest{ResponseSize: 40, Payload: grpctest.Payload(seed, 8)}); err != nil {
		return err
	}
	_, err := c.UnaryCall(id("status"), &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "no " + tag}})
	if status.Code(err) != codes.NotFound {
		return fmt.Errorf("status call: %v", err)
	}
	ss, err := c.StreamingOutputCall(id("out"), &testpb.StreamingOutputCallRequest{Payload: grpctest.Payload(seed, 4),
		ResponseParameters: []*testpb.ResponseParameters{{Size: 3}, {Size: 9000}, {Size: 1}}})
	if err != nil {
		return err
	}
	for {
		if _, err := ss.Recv(); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	in, err := c.StreamingInputCall(id("in"))
	if err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		if err := in.Send(&testpb.StreamingInputCallRequest{Payload: grpctest.Payload(seed, i*10)}); err != nil {
			return err
		}
	}
	if _, err := in.CloseAndRecv(); err != nil {
		return err
	}
	bd, err := c.FullDuplexCall(id("bidi"))
	if err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		if err := bd.Send(&testpb.StreamingOutputCallRequest{Payload: grpctest.Payload(seed, i), ResponseParameters: []*testpb.ResponseParameters{{Size: int32(i * 5)}}}); err != nil {
			return err
		}
		if _, err := bd.Recv(); err != nil {
			return err
		}
	}
	if err := bd.CloseSend(); err != nil {
		return err
	}
	if _, err := bd.Recv(); err != io.EOF {
		return fmt.Errorf("bidi end: %v", err)
	}
	_, err = healthpb.NewHealthClient(cc).Check(id("health"), &healthpb.HealthCheckRequest{})
	return err
}

// ChangedGRPC is the TestService of a build whose answers differ from
// grpctest.Service's where a field is set: the username of UnaryCall's
// answer, the status code of a call that asks for a status, the size the
// client-streaming call counts (plus SizeAdd).
type ChangedGRPC struct {
	grpctest.Service
	Username string
	Code     codes.Code
	SizeAdd  int32
	// Noisy: UnaryCall answers a server id that is new on every call
	// (what noise detection is for).
	Noisy bool
	n     atomic.Int64
}

func (s *ChangedGRPC) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if in.ResponseStatus != nil && s.Code != codes.OK {
		in.ResponseStatus.Code = int32(s.Code)
	}
	r, err := s.Service.UnaryCall(ctx, in)
	if r != nil && s.Username != "" {
		r.Username = s.Username
	}
	if r != nil && s.Noisy {
		r.ServerId = fmt.Sprintf("srv-%d", s.n.Add(1))
	}
	return r, err
}

func (s *ChangedGRPC) StreamingInputCall(stream grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	if md, _ := metadata.FromIncomingContext(stream.Context()); len(md.Get("x-trace")) > 0 { // as grpctest.Service does
		_ = stream.SetHeader(metadata.Pairs("x-trace", md.Get("x-trace")[0]))
		stream.SetTrailer(metadata.Pairs("x-trace-end", md.Get("x-trace")[0]))
	}
	total := int32(0)
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: total + s.SizeAdd})
		}
		if err != nil {
			return err
		}
		total += int32(len(m.GetPayload().GetBody()))
	}
}

// ServeGRPC serves svc (with the health and reflection services) on a
// fresh port until the test ends and returns its http:// URL.
func ServeGRPC(t *testing.T, svc testpb.TestServiceServer) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveGRPC(t, l, svc)
	return "http://" + l.Addr().String()
}

// ServeGRPCTLS is ServeGRPC over TLS with cfg (a certificate for
// 127.0.0.1); it returns the https:// URL.
func ServeGRPCTLS(t *testing.T, svc testpb.TestServiceServer, cfg *tls.Config) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveGRPC(t, l, svc, grpc.Creds(credentials.NewTLS(cfg)))
	return "https://" + l.Addr().String()
}

// FramedDialer dials the mock server at mockAddr as the agent does in
// replay mode for a redirected connection to dst: a preamble frame, then
// every write framed (DESIGN.md 3.3) with no trace (an HTTP/2 stream's
// trace travels in-band, in its retrace-trace-id field); reads are plain.
// For grpc.WithContextDialer.
func FramedDialer(mockAddr, dst string) func(ctx context.Context, _ string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", mockAddr)
		if err != nil {
			return nil, err
		}
		if _, err := c.Write(trace.AppendFrameHeader(nil, "", dst, 0)); err != nil {
			c.Close()
			return nil, err
		}
		return &framedConn{Conn: c, dst: dst}, nil
	}
}

type framedConn struct {
	net.Conn
	dst string
	mu  sync.Mutex
	buf []byte
}

func (c *framedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = trace.AppendFrame(c.buf[:0], "", c.dst, p)
	if _, err := c.Conn.Write(c.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}
