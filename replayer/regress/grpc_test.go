package regress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
	"github.com/retrace-dev/retrace/replayer/schema"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protobuf"
)

// grpcTraces is how many traces the recording makes, each of five RPCs.
const grpcTraces = 16

// recordGRPC serves grpc-go's TestService on a recorder and makes
// grpcTraces traces of calls over one ClientConn at once: unary, unary
// with a status, server streaming, client streaming, bidirectional and a
// health check, each RPC a session.
func recordGRPC(t *testing.T) []*recording.Session {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := replaytest.NewH2Recorder(l)
	stop := serveGRPC(t, rec, &grpctest.Service{})
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, grpcTraces)
	for i := 0; i < grpcTraces; i++ {
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
	if len(ss) != grpcTraces*6 {
		t.Fatalf("recorded %d sessions, want %d", len(ss), grpcTraces*6)
	}
	return ss
}

// serveGRPC serves svc (and the health and reflection services) on l
// until the returned function is called (or the test ends).
func serveGRPC(t *testing.T, l net.Listener, svc testpb.TestServiceServer) (stop func()) {
	t.Helper()
	srv := grpc.NewServer()
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

// changed is the TestService of a build whose answers differ: a field of
// UnaryCall's answer, the status of the status call, the size the
// client-streaming call counts.
type changed struct {
	grpctest.Service
	username string
	code     codes.Code
	sizeAdd  int32
}

func (s *changed) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if in.ResponseStatus != nil && s.code != codes.OK {
		in.ResponseStatus.Code = int32(s.code)
	}
	r, err := s.Service.UnaryCall(ctx, in)
	if r != nil && s.username != "" {
		r.Username = s.username
	}
	return r, err
}

func (s *changed) StreamingInputCall(stream grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	if md, _ := metadata.FromIncomingContext(stream.Context()); len(md.Get("x-trace")) > 0 { // as grpctest.Service does
		_ = stream.SetHeader(metadata.Pairs("x-trace", md.Get("x-trace")[0]))
		stream.SetTrailer(metadata.Pairs("x-trace-end", md.Get("x-trace")[0]))
	}
	total := int32(0)
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: total + s.sizeAdd})
		}
		if err != nil {
			return err
		}
		total += int32(len(m.GetPayload().GetBody()))
	}
}

// target serves svc on a fresh port and returns its URL.
func grpcTarget(t *testing.T, svc testpb.TestServiceServer) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveGRPC(t, l, svc)
	return "http://" + l.Addr().String()
}

func replayGRPC(t *testing.T, cfg regress.Config) *collected {
	t.Helper()
	var c collected
	if err := regress.Run(context.Background(), cfg, c.add); err != nil {
		t.Fatal(err)
	}
	return &c
}

func testSchema(t *testing.T) *protobuf.Schema {
	t.Helper()
	s, err := protobuf.SchemaOf(testpb.File_grpc_testing_test_proto, healthpb.File_grpc_health_v1_health_proto)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func findings(c *collected, session string) []regress.Finding {
	for _, r := range c.results {
		if r.Session == session {
			return r.Findings
		}
	}
	return nil
}

func TestReplayGRPCSessions(t *testing.T) {
	sessions := recordGRPC(t)

	t.Run("identical build passes", func(t *testing.T) {
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: grpcTarget(t, &grpctest.Service{}), Concurrency: 16})
		if len(c.results) != len(sessions) {
			t.Fatalf("%d results for %d sessions", len(c.results), len(sessions))
		}
		for _, r := range c.results {
			if r.Status != regress.Passed {
				t.Errorf("%s: %s %s %v", r.Session, r.Status, r.Error, r.Findings)
			}
			if !strings.HasPrefix(r.API, "POST /grpc.testing.TestService/") && r.API != "POST /grpc.health.v1.Health/Check" {
				t.Errorf("%s: API %q", r.Session, r.API)
			}
		}
	})

	t.Run("changed field fails by field number and by name", func(t *testing.T) {
		target := grpcTarget(t, &changed{username: "someone else"})
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8})
		assertOnly(t, c, "-unary", "message[0].2")
		c = replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8, Schema: testSchema(t)})
		assertOnly(t, c, "-unary", "message[0].username")
		f := findings(c, "t03-unary")
		if len(f) != 1 || f[0].Want != `"retrace"` || f[0].Got != `"someone else"` {
			t.Errorf("finding %+v", f)
		}
	})

	t.Run("changed status fails", func(t *testing.T) {
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: grpcTarget(t, &changed{code: codes.Internal}), Concurrency: 8})
		assertOnly(t, c, "-status", "grpc-status")
		f := findings(c, "t00-status")
		if len(f) != 1 || f[0].Want != "5" || f[0].Got != "13" {
			t.Errorf("findings %+v", f)
		}
	})

	t.Run("ignore and tolerance rules", func(t *testing.T) {
		target := grpcTarget(t, &changed{username: "x", sizeAdd: 2})
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8, Schema: testSchema(t)})
		if n := len(c.byStatus(regress.Failed)); n != 2*grpcTraces {
			t.Fatalf("%d failed without rules, want %d", n, 2*grpcTraces)
		}
		assertPaths(t, findings(c, "t01-in"), "message[0].aggregated_payload_size")
		rules, err := diff.NewRules(
			diff.Rule{API: "POST /grpc.testing.TestService/UnaryCall", Ignore: "message[*].username"},
			diff.Rule{Tolerance: "message[0].aggregated_payload_size", Abs: 2},
		)
		if err != nil {
			t.Fatal(err)
		}
		c = replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8, Schema: testSchema(t), Rules: rules})
		if failed := c.byStatus(regress.Failed); len(failed) > 0 || len(c.byStatus(regress.Passed)) != len(sessions) {
			t.Fatalf("with rules: failed %v", failed)
		}
	})

	t.Run("undecodable session is an error", func(t *testing.T) {
		bad := *sessions[0]
		m, pace, err := http2.ParseMessage(bad.Inbound.Response)
		if err != nil {
			t.Fatal(err)
		}
		m.Data = []byte("\x00\x00\x00\x00\x03\xff\xff\xff") // one message, not protobuf
		bad.Inbound.Response = http2.AppendMessage(nil, m, pace)
		bad.ID = "undecodable"
		c := replayGRPC(t, regress.Config{Source: regress.Sessions([]*recording.Session{&bad}), Target: grpcTarget(t, &grpctest.Service{})})
		if len(c.results) != 1 || c.results[0].Status != regress.Errored || !strings.Contains(c.results[0].Error, "not protobuf") {
			t.Fatalf("results %+v", c.results[0])
		}
	})

	t.Run("descriptor set file and reflection name fields", func(t *testing.T) {
		set := &descriptorpb.FileDescriptorSet{}
		for _, fd := range []*descriptorpb.FileDescriptorProto{
			protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_empty_proto),
			protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_messages_proto),
			protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_test_proto),
		} {
			set.File = append(set.File, fd)
		}
		b, err := proto.Marshal(set)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "test.protoset")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		fromFile, err := schema.File(path)
		if err != nil {
			t.Fatal(err)
		}
		target := grpcTarget(t, &changed{username: "y"})
		fromServer, err := schema.Reflect(context.Background(), target, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]*protobuf.Schema{"file": fromFile, "reflection": fromServer} {
			c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8, Schema: s})
			f := findings(c, "t05-unary")
			if len(f) != 1 || f[0].Path != "message[0].username" {
				t.Errorf("%s: findings %+v", name, f)
			}
		}
	})
}

// assertOnly checks that exactly the sessions whose id ends in suffix
// failed, each with differences at paths, and that every other passed.
func assertOnly(t *testing.T, c *collected, suffix string, paths ...string) {
	t.Helper()
	for _, r := range c.results {
		switch {
		case strings.HasSuffix(r.Session, suffix):
			if r.Status != regress.Failed {
				t.Errorf("%s: %s %s, want failed", r.Session, r.Status, r.Error)
				continue
			}
			assertPaths(t, r.Findings, paths...)
		case r.Status != regress.Passed:
			t.Errorf("%s: %s %s %v, want passed", r.Session, r.Status, r.Error, r.Findings)
		}
	}
}

func assertPaths(t *testing.T, fs []regress.Finding, paths ...string) {
	t.Helper()
	var got []string
	for _, f := range fs {
		got = append(got, f.Path)
	}
	if strings.Join(got, " ") != strings.Join(paths, " ") {
		t.Errorf("difference paths %v, want %v (%+v)", got, paths, fs)
	}
}
