// Command grpcfront is the gRPC service of the end-to-end tests: a grpc-go
// server (grpc-go's interop TestService and the health service) whose
// handlers call a grpc-go downstream over one shared ClientConn, with server
// reflection. It links
// the agent by the blank import, as a user's service does.
//
//	GRPCFRONT_DOWNSTREAM=127.0.0.1:9000 grpcfront -listen 127.0.0.1:0
//
// UnaryCall makes five calls to the downstream (grpctest.Exercise: unary,
// unary with a status, server streaming, a bidirectional ping-pong, health),
// tagged with the request's payload as x-trace metadata and in every
// payload, and answers which tag it served and how many calls were
// answered as they should be. StreamingOutputCall relays the downstream's
// StreamingOutputCall. It prints "grpcfront: listening on ADDR" once it
// listens and stops gracefully on SIGTERM. GRPCFRONT_VARIANT=changed is a
// build whose UnaryCall answer is worded differently (for replays that must
// fail).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/patches"
)

// ListeningPrefix starts the line printed once the service listens.
const ListeningPrefix = "grpcfront: listening on "

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "grpcfront:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "listen address")
	down := flag.String("downstream", os.Getenv("GRPCFRONT_DOWNSTREAM"), "host:port of the downstream TestService (env GRPCFRONT_DOWNSTREAM)")
	flag.Parse()
	if *down == "" {
		return errors.New("no downstream: set -downstream or GRPCFRONT_DOWNSTREAM")
	}
	cc, err := grpc.NewClient(*down, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &front{down: cc, client: testpb.NewTestServiceClient(cc),
		changed: os.Getenv("GRPCFRONT_VARIANT") == "changed"})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv) // for replays that show messages by field name

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "%s%s\n", ListeningPrefix, ln.Addr())
	select {
	case err = <-errc:
	case <-ctx.Done():
		srv.GracefulStop()
		err = <-errc
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if serr := patches.Stop(sctx); serr != nil {
		fmt.Fprintln(os.Stderr, "grpcfront: retrace:", serr)
	}
	return err
}

// front serves TestService by calling the downstream.
type front struct {
	testpb.UnimplementedTestServiceServer
	down    *grpc.ClientConn // shared by every handler
	client  testpb.TestServiceClient
	changed bool
}

// UnaryCall exercises the downstream with the request's payload as tag.
func (f *front) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	tag := string(in.GetPayload().GetBody())
	if tag == "" {
		return nil, status.Error(codes.InvalidArgument, "the payload (the tag) is empty")
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n, err := grpctest.Exercise(ctx, f.down, tag)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	answer := fmt.Appendf(nil, "%s: %d downstream calls answered", tag, n)
	if f.changed {
		answer = fmt.Appendf(nil, "%s: served with %d calls", tag, n)
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: answer}, Username: "grpcfront"}, nil
}

// StreamingOutputCall relays the downstream's answer to the same request.
func (f *front) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, out grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	ctx := out.Context()
	if tag := string(in.GetPayload().GetBody()); tag != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-trace", tag)
	}
	st, err := f.client.StreamingOutputCall(ctx, in)
	if err != nil {
		return err
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := out.Send(m); err != nil {
			return err
		}
	}
}
