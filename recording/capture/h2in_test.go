package capture_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/recording"
	wgrpc "github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
)

// echoGet asks the HTTP/1 echo downstream for tag and checks its answer:
// the downstream call a handler makes, tagged with the request it serves.
func echoGet(c *http.Client, down, tag string) error {
	resp, err := c.Get("http://" + down + "/echo?id=" + tag)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "echo-"+tag {
		return fmt.Errorf("echo %s: %q %v", tag, b, err)
	}
	return nil
}

// streamingInput is a client-streaming call of three messages tagged tag.
func streamingInput(ctx context.Context, cc grpc.ClientConnInterface, tag string) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-trace", tag)
	s, err := testpb.NewTestServiceClient(cc).StreamingInputCall(ctx)
	if err != nil {
		return err
	}
	total := 0
	for i := 1; i <= 3; i++ {
		if err := s.Send(&testpb.StreamingInputCallRequest{Payload: grpctest.Payload([]byte(tag), i*len(tag))}); err != nil {
			return err
		}
		total += i * len(tag)
	}
	r, err := s.CloseAndRecv()
	if err != nil || int(r.GetAggregatedPayloadSize()) != total {
		return fmt.Errorf("StreamingInputCall %s: %v %v", tag, r, err)
	}
	return nil
}

var tagPattern = regexp.MustCompile(`tg[0-9a-f]{16}`)

// TestRecordGRPCService records a grpc-go service (unary, server-streaming,
// client-streaming, bidirectional and health calls) whose TestService
// handlers each call an HTTP/1 downstream with the call's tag, 64 clients
// at once over one ClientConn (one HTTP/2 connection): every call is one
// session holding exactly its RPC — method, metadata, messages, status —
// and exactly its handler's downstream call.
func TestRecordGRPCService(t *testing.T) {
	rec, store := installRecorder(t, "grpc", *sampler(t, 1))
	down, _ := startChild(t, "echo")
	hc := newClient(64)
	defer hc.CloseIdleConnections()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := &grpctest.Service{}
	var downErrs sync.Map
	svc.OnCall = func(md metadata.MD) {
		if v := md.Get("x-trace"); len(v) > 0 {
			if err := echoGet(hc, down, v[0]); err != nil {
				downErrs.Store(v[0], err)
			}
		}
	}
	grpctest.ServeService(t, ln, svc)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()

	const clients = 64
	tags := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		tag := "tg" + newReqID()[2:]
		tags[tag] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := grpctest.Exercise(context.Background(), cc, tag); err != nil {
				errs <- err
				return
			}
			if err := streamingInput(context.Background(), cc, tag); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	downErrs.Range(func(k, v any) bool { t.Errorf("downstream of %s: %v", k, v); return true })
	require.NoError(t, cc.Close())
	ln.Close()
	require.Zero(t, rec.Stats().Active)
	require.NoError(t, rec.Flush(context.Background()))

	// per tag, the methods recorded
	methods := map[string][]string{}
	require.NoError(t, store.Scan(context.Background(), func(s *recording.Session) error {
		if s.Inbound.Local != ln.Addr().String() {
			return nil
		}
		tag, path := checkGRPCSession(t, s)
		methods[tag] = append(methods[tag], path)
		return nil
	}))
	require.Len(t, methods, clients, "sessions of every client")
	for tag, ms := range methods {
		require.True(t, tags[tag], "a session of a tag never sent: %s", tag)
		assert.ElementsMatch(t, []string{
			"/grpc.testing.TestService/UnaryCall", "/grpc.testing.TestService/UnaryCall",
			"/grpc.testing.TestService/StreamingOutputCall", "/grpc.testing.TestService/FullDuplexCall",
			"/grpc.health.v1.Health/Check", "/grpc.testing.TestService/StreamingInputCall",
		}, ms, "the calls of %s", tag)
	}
	st := hook.ReadStats()
	assert.Zero(t, st.H2Unrecorded)
}

// checkGRPCSession checks that a recorded gRPC session is one whole call
// whose every part is its own tag's, and returns the tag and method.
func checkGRPCSession(t *testing.T, s *recording.Session) (tag, path string) {
	t.Helper()
	require.Equal(t, "grpc", s.Inbound.Proto, "session %s", s.ID)
	req, _, err := http2.ParseMessage(s.Inbound.Request)
	require.NoError(t, err, "session %s request", s.ID)
	resp, _, err := http2.ParseMessage(s.Inbound.Response)
	require.NoError(t, err, "session %s response", s.ID)
	tag, _ = http2.Get(req.Header, "x-trace")
	path, _ = http2.Get(req.Header, ":path")
	require.Regexp(t, tagPattern, tag, "session %s: request headers %v", s.ID, req.Header)
	for _, f := range append(append([]hpack.HeaderField{}, req.Header...), resp.Header...) {
		require.False(t, strings.HasPrefix(f.Name, "retrace-"), "session %s: %s recorded", s.ID, f.Name)
	}
	// every tag in the session is its own
	for _, b := range [][]byte{s.Inbound.Request, s.Inbound.Response} {
		for _, other := range tagPattern.FindAllString(string(b), -1) {
			require.Equal(t, tag, other, "session %s of %s holds %s", s.ID, tag, other)
		}
	}
	code, _ := http2.Get(resp.Trailer, "grpc-status")
	if code == "" {
		code, _ = http2.Get(resp.Header, "grpc-status")
	}
	if strings.HasSuffix(path, "/StreamingOutputCall") {
		msgs, _, err := wgrpc.Split(resp.Data, 0)
		require.NoError(t, err)
		require.Len(t, msgs, 3, "session %s: server-streaming messages", s.ID)
	}
	if strings.HasSuffix(path, "/StreamingInputCall") || strings.HasSuffix(path, "/FullDuplexCall") {
		msgs, _, err := wgrpc.Split(req.Data, 0)
		require.NoError(t, err)
		require.Len(t, msgs, 3, "session %s: client messages", s.ID)
	}
	switch {
	case strings.HasPrefix(path, "/grpc.health"):
		require.Empty(t, s.Calls, "session %s: the health check calls nothing", s.ID)
		require.Equal(t, "0", code)
	default:
		require.Len(t, s.Calls, 1, "session %s (%s): its handler's downstream call", s.ID, path)
		c := s.Calls[0]
		require.Equal(t, recording.ProtoHTTP, c.Proto)
		require.Contains(t, string(c.Request), "GET /echo?id="+tag+" ", "session %s", s.ID)
		require.Contains(t, string(c.Response), "echo-"+tag, "session %s", s.ID)
		require.Contains(t, []string{"0", "5"}, code, "session %s: status", s.ID)
	}
	require.Positive(t, s.Inbound.DurNs)
	return tag, path
}
