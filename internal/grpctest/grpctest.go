// Package grpctest serves and calls gRPC for retrace's tests: grpc-go's
// interop TestService (unary, server-streaming, client-streaming and
// bidirectional methods) and the health service, answering from what each
// request asks, and helpers that start a server on a listener the test
// owns. Imported by tests only.
package grpctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Service answers TestService calls: a payload of the size asked for,
// filled from the request's own payload (so answers differ per request),
// the status asked for in ResponseStatus, and the request's "x-trace"
// metadata, when it has one, echoed as response header and trailer.
type Service struct {
	testpb.UnimplementedTestServiceServer
	mu sync.Mutex
	// Seen holds the metadata of every call, for tests that check what
	// reached the handler.
	Seen []metadata.MD
	// OnCall, when set before the server starts, runs on each call's
	// handler goroutine with the call's metadata.
	OnCall func(md metadata.MD)
}

func (s *Service) note(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	if s.OnCall != nil {
		s.OnCall(md)
	}
	s.mu.Lock()
	s.Seen = append(s.Seen, md)
	s.mu.Unlock()
	if v := md.Get("x-trace"); len(v) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-trace", v[0]))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trace-end", v[0]))
	}
}

// Payload is size bytes of seed repeated.
func Payload(seed []byte, size int) *testpb.Payload {
	b := make([]byte, size)
	if len(seed) == 0 {
		seed = []byte{'.'}
	}
	for i := range b {
		b[i] = seed[i%len(seed)]
	}
	return &testpb.Payload{Body: b}
}

func statusErr(st *testpb.EchoStatus) error {
	if st == nil || st.Code == 0 {
		return nil
	}
	return status.Error(codes.Code(st.Code), st.Message)
}

// EmptyCall answers nothing.
func (s *Service) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.note(ctx)
	return &testpb.Empty{}, nil
}

// UnaryCall answers ResponseSize bytes of the request's payload.
func (s *Service) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.note(ctx)
	if err := statusErr(in.ResponseStatus); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Payload: Payload(in.GetPayload().GetBody(), int(in.ResponseSize)), Username: "retrace"}, nil
}

// StreamingOutputCall answers one message per ResponseParameters entry.
func (s *Service) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, out grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	s.note(out.Context())
	for _, p := range in.ResponseParameters {
		if err := out.Send(&testpb.StreamingOutputCallResponse{Payload: Payload(in.GetPayload().GetBody(), int(p.Size))}); err != nil {
			return err
		}
	}
	return statusErr(in.ResponseStatus)
}

// StreamingInputCall answers the total payload size received.
func (s *Service) StreamingInputCall(in grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	s.note(in.Context())
	total := 0
	for {
		m, err := in.Recv()
		if errors.Is(err, io.EOF) {
			return in.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		total += len(m.GetPayload().GetBody())
	}
}

// FullDuplexCall answers each request as it comes, one message per
// ResponseParameters entry.
func (s *Service) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	s.note(stream.Context())
	for {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := statusErr(in.ResponseStatus); err != nil {
			return err
		}
		for _, p := range in.ResponseParameters {
			if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: Payload(in.GetPayload().GetBody(), int(p.Size))}); err != nil {
				return err
			}
		}
	}
}

// Serve starts a grpc-go server with Service and the health service (its
// status SERVING) on l; the test's cleanup stops it.
func Serve(t testing.TB, l net.Listener, opts ...grpc.ServerOption) *Service {
	t.Helper()
	svc := &Service{}
	ServeService(t, l, svc, opts...)
	return svc
}

// ServeService is Serve with the caller's Service.
func ServeService(t testing.TB, l net.Listener, svc *Service, opts ...grpc.ServerOption) {
	t.Helper()
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
}

// Exercise makes one call of each kind on cc, tagged with tag (metadata
// x-trace and in every payload), and checks the answers; it returns the
// number of calls made. A call's answer that is not what Service would
// have sent is an error naming the call.
func Exercise(ctx context.Context, cc grpc.ClientConnInterface, tag string) (int, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-trace", tag)
	c := testpb.NewTestServiceClient(cc)
	seed := []byte(tag) // every request's payload is seed repeated: answers are seed repeated
	r, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 100, Payload: Payload(seed, len(seed))})
	if err != nil {
		return 0, fmt.Errorf("UnaryCall %s: %w", tag, err)
	}
	if want := Payload(seed, 100).Body; string(r.GetPayload().GetBody()) != string(want) {
		return 0, fmt.Errorf("UnaryCall %s: answer %q", tag, r.GetPayload().GetBody())
	}
	_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: Payload(seed, len(seed)), ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "no " + tag}})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "no "+tag {
		return 0, fmt.Errorf("UnaryCall %s with status: got %v", tag, err)
	}
	ss, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
		Payload:            Payload(seed, 2*len(seed)),
		ResponseParameters: []*testpb.ResponseParameters{{Size: 3}, {Size: 70000}, {Size: 1}},
	})
	if err != nil {
		return 0, fmt.Errorf("StreamingOutputCall %s: %w", tag, err)
	}
	for i, size := range []int{3, 70000, 1} {
		m, err := ss.Recv()
		if err != nil {
			return 0, fmt.Errorf("StreamingOutputCall %s message %d: %w", tag, i, err)
		}
		if string(m.GetPayload().GetBody()) != string(Payload(seed, size).Body) {
			return 0, fmt.Errorf("StreamingOutputCall %s message %d: wrong payload of %d bytes", tag, i, len(m.GetPayload().GetBody()))
		}
	}
	if _, err := ss.Recv(); !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("StreamingOutputCall %s end: %v", tag, err)
	}
	bd, err := c.FullDuplexCall(ctx)
	if err != nil {
		return 0, fmt.Errorf("FullDuplexCall %s: %w", tag, err)
	}
	for i := 1; i <= 3; i++ {
		if err := bd.Send(&testpb.StreamingOutputCallRequest{Payload: Payload(seed, i*len(seed)), ResponseParameters: []*testpb.ResponseParameters{{Size: int32(i * 7)}}}); err != nil {
			return 0, fmt.Errorf("FullDuplexCall %s send %d: %w", tag, i, err)
		}
		m, err := bd.Recv()
		if err != nil {
			return 0, fmt.Errorf("FullDuplexCall %s recv %d: %w", tag, i, err)
		}
		if string(m.GetPayload().GetBody()) != string(Payload(seed, i*7).Body) {
			return 0, fmt.Errorf("FullDuplexCall %s recv %d: wrong payload", tag, i)
		}
	}
	if err := bd.CloseSend(); err != nil {
		return 0, fmt.Errorf("FullDuplexCall %s close: %w", tag, err)
	}
	if _, err := bd.Recv(); !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("FullDuplexCall %s end: %v", tag, err)
	}
	hc := healthpb.NewHealthClient(cc)
	h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		return 0, fmt.Errorf("Health.Check %s: %v %v", tag, h, err)
	}
	return 5, nil
}
