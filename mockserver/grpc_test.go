package mockserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire/http2"
)

func xTrace(x *http2.Exchange) string { v, _ := http2.Get(x.Request.Header, "x-trace"); return v }

// grpcWork is one trace's calls: grpctest.Exercise (unary, a status,
// server-streaming with a 70 000-byte message, bidirectional ping-pong,
// health) and a client-streaming call; it returns what came back.
func grpcWork(ctx context.Context, cc *grpc.ClientConn, tag string) (string, error) {
	if _, err := grpctest.Exercise(ctx, cc, tag); err != nil {
		return "", err
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "x-trace", tag)
	cs, err := testpb.NewTestServiceClient(cc).StreamingInputCall(ctx)
	if err != nil {
		return "", err
	}
	for i := 1; i <= 3; i++ {
		if err := cs.Send(&testpb.StreamingInputCallRequest{Payload: grpctest.Payload([]byte(tag), i*len(tag))}); err != nil {
			return "", fmt.Errorf("StreamingInputCall %s send: %w", tag, err)
		}
	}
	r, err := cs.CloseAndRecv()
	if err != nil {
		return "", fmt.Errorf("StreamingInputCall %s: %w", tag, err)
	}
	var hdr metadata.MD
	h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %s %v", r.AggregatedPayloadSize, h.Status, hdr.Get("x-trace")), nil
}

// inTrace adds the in-band trace field the agent adds to a call of the
// caller's trace.
func inTrace(ctx context.Context, tid string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, http2.TraceField, tid)
}

// runTraces runs work for n traces at once and returns each trace's
// answer (or error).
func runTraces(n int, prefix string, work func(tag string) (string, error)) map[string]string {
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tag := fmt.Sprintf("%s-%02d", prefix, i)
			s, err := work(tag)
			if err != nil {
				s = "error: " + err.Error()
			}
			mu.Lock()
			got[tag] = s
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// recordGRPC records n traces' grpcWork against a real grpc-go server
// over one ClientConn, and one untraced health check, then stops the
// server.
func recordGRPC(t testing.TB, n int) (dst string, want map[string]string, sessions []*recording.Session) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst = l.Addr().String()
	tap := mocktest.NewH2Listener(l)
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &grpctest.Service{})
	healthpb.RegisterHealthServer(srv, healthOK{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(tap) }()
	cc, err := grpc.NewClient(dst, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "startup"}); err != nil {
		t.Fatal(err)
	}
	want = runTraces(n, "grpc", func(tag string) (string, error) { return grpcWork(ctx, cc, tag) })
	cc.Close()
	time.Sleep(20 * time.Millisecond)
	srv.Stop()
	<-done
	for tag, w := range want {
		if strings.HasPrefix(w, "error") {
			t.Fatalf("recording %s: %s", tag, w)
		}
	}
	return dst, want, tap.Sessions(t, dst, xTrace)
}

type healthOK struct {
	healthpb.UnimplementedHealthServer
}

func (healthOK) Check(_ context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if r.Service == "startup" {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// mockClient is a grpc-go ClientConn to dst whose connections go to the
// mock server framed as the agent frames them.
func mockClient(t testing.TB, srv *mockserver.Server, dst string) *grpc.ClientConn {
	d := &mocktest.Dialer{Mock: srv.Addr(), Dst: dst}
	cc, err := grpc.NewClient("passthrough:///"+dst, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestMockGRPC64Traces: 64 traces' calls of every kind recorded from a
// real grpc-go server over one ClientConn; the server stopped, the same
// calls over one ClientConn to the mock server (the frames' trace is
// meaningless, each stream carries its own in-band): every answer is
// the recorded one, every recorded call is used by its own trace, each
// observed call is the recorded request, and an untraced call is
// answered from the background recording.
func TestMockGRPC64Traces(t *testing.T) {
	const n = 64
	dst, want, sessions := recordGRPC(t, n)
	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	cc := mockClient(t, srv, dst)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "startup"}); err != nil || h.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("untraced health check: %v %v", h, err)
	}
	got := runTraces(n, "grpc", func(tag string) (string, error) { return grpcWork(inTrace(ctx, tag), cc, tag) })
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
		}
	}
	for _, s := range sessions {
		if s.Background {
			continue
		}
		r := report(t, srv, s.ID)
		if len(r.Unused) != 0 || len(r.Calls) != len(s.Calls) {
			t.Errorf("%s: %d calls observed, %d recorded calls unused", s.ID, len(r.Calls), len(r.Unused))
		}
		for _, oc := range r.Calls {
			if oc.Matched < 0 || oc.Error != "" || oc.Proto != "grpc" || oc.Dst != dst {
				t.Errorf("%s: observed %+v", s.ID, oc)
				continue
			}
			if rec := s.Calls[oc.Matched].Request; !bytes.Equal(timeoutless(oc.Request), timeoutless(rec)) {
				t.Errorf("%s call %d: observed request\n%q\nrecorded\n%q", s.ID, oc.Matched, oc.Request, rec)
			}
		}
	}
}

// timeoutless is a recorded request without its grpc-timeout field (the
// deadline left, different on every call).
func timeoutless(b []byte) []byte {
	return regexp.MustCompile(`(?m)^grpc-timeout: [0-9]+[a-zA-Z]\r\n`).ReplaceAll(b, nil)
}

// TestMockGRPCMissing: a call the trace's recording does not have, and a
// trace no recording names, get UNAVAILABLE naming the reason, counted
// and listed as missing mocks; the connection keeps serving.
func TestMockGRPCMissing(t *testing.T) {
	dst, _, sessions := recordGRPC(t, 2)
	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	cc := mockClient(t, srv, dst)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := testpb.NewTestServiceClient(cc)
	_, err := c.EmptyCall(inTrace(ctx, "grpc-00"), &testpb.Empty{})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), `no "POST /grpc.testing.TestService/EmptyCall" call`) {
		t.Errorf("call not recorded: %v", err)
	}
	_, err = c.UnaryCall(inTrace(ctx, "no-such-trace"), &testpb.SimpleRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "resolves to no recording") {
		t.Errorf("unknown trace: %v", err)
	}
	bd, err := c.FullDuplexCall(inTrace(ctx, "no-such-trace"))
	if err != nil {
		t.Fatal(err)
	}
	_ = bd.Send(&testpb.StreamingOutputCallRequest{})
	if _, err := bd.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("bidirectional call of an unknown trace: %v", err)
	}
	if _, err := grpcWork(inTrace(ctx, "grpc-01"), cc, "grpc-01"); err != nil {
		t.Errorf("the connection after missing mocks: %v", err)
	}
	var missing []mockserver.MissingMock
	getJSON(t, srv.AdminURL()+"/missing", &missing)
	if len(missing) != 3 {
		t.Errorf("%d missing mocks listed: %+v", len(missing), missing)
	}
	r := report(t, srv, "grpc-00")
	if len(r.Calls) != 1 || r.Calls[0].Error == "" || r.Calls[0].Matched != -1 || !strings.Contains(string(r.Calls[0].Request), ":path: /grpc.testing.TestService/EmptyCall") {
		t.Errorf("missing call observed as %+v", r.Calls)
	}
}

// TestMockGRPCHeldTraceDoesNotStall: a trace whose answer the causal
// hold keeps back (its recording sent another call before that answer
// came, on another connection, and the replay has not sent it yet)
// holds up its own stream only: another trace's stream on the same
// connection is answered meanwhile; once the missing call comes, the
// held answer goes.
func TestMockGRPCHeldTraceDoesNotStall(t *testing.T) {
	dst, _, sessions := recordGRPC(t, 3)
	var held *recording.Session
	for _, s := range sessions {
		if s.ID == "grpc-00" {
			held = s
		}
	}
	// held's first call (UnaryCall, payload of its tag) was sent, on
	// another connection, before the answer to its fourth (the bidirectional
	// call) came back
	held.Calls[0].Conn, held.Calls[0].StartNs = 99, 3200
	srv := mocktest.NewServer(t, mockserver.Config{CausalWait: time.Minute}, sessions...)
	cc := mockClient(t, srv, dst)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := testpb.NewTestServiceClient(cc)
	hctx := inTrace(metadata.AppendToOutgoingContext(ctx, "x-trace", "grpc-00"), "grpc-00")
	// the calls of held before its bidirectional one, but the first
	if _, err := c.UnaryCall(hctx, &testpb.SimpleRequest{Payload: grpctest.Payload([]byte("grpc-00"), 7), ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: "no grpc-00"}}); status.Code(err) != codes.NotFound {
		t.Fatalf("held: %v", err)
	}
	ss, err := c.StreamingOutputCall(hctx, &testpb.StreamingOutputCallRequest{Payload: grpctest.Payload([]byte("grpc-00"), 14),
		ResponseParameters: []*testpb.ResponseParameters{{Size: 3}, {Size: 70000}, {Size: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := ss.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("held: %v", err)
			}
			break
		}
	}
	heldDone := make(chan error, 1)
	go func() {
		bd, err := c.FullDuplexCall(hctx)
		if err == nil {
			err = bd.Send(&testpb.StreamingOutputCallRequest{Payload: grpctest.Payload([]byte("grpc-00"), 7), ResponseParameters: []*testpb.ResponseParameters{{Size: 7}}})
		}
		if err == nil {
			_, err = bd.Recv()
		}
		heldDone <- err
	}()
	waitMetric(t, srv, "retrace_mock_causal_holds_total 1")
	if _, err := grpcWork(inTrace(ctx, "grpc-01"), cc, "grpc-01"); err != nil {
		t.Fatalf("the free trace beside the held one: %v", err)
	}
	select {
	case err := <-heldDone:
		t.Fatalf("held answer released before the call it waits for: %v", err)
	default:
	}
	if _, err := c.UnaryCall(hctx, &testpb.SimpleRequest{ResponseSize: 100, Payload: grpctest.Payload([]byte("grpc-00"), 7)}); err != nil {
		t.Fatalf("held's first call: %v", err)
	}
	if err := <-heldDone; err != nil {
		t.Fatalf("held answer: %v", err)
	}
}

// waitMetric waits until the admin API's metrics hold line.
func waitMetric(t *testing.T, srv *mockserver.Server, line string) {
	t.Helper()
	for range 500 {
		resp, err := http.Get(srv.AdminURL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), line+"\n") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("metrics never showed %q", line)
}

// TestMockH2C: net/http's HTTP/2 client (h2c with prior knowledge), 64
// traces sharing one connection, recorded from a real server and
// answered by the mock server; a request the recording lacks gets a 502
// naming the reason.
func TestMockH2C(t *testing.T) {
	const n = 64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst := l.Addr().String()
	tap := mocktest.NewH2Listener(l)
	hs := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", r.Header.Get("X-Trace"))
		fmt.Fprintf(w, "%s %s %s", r.Header.Get("X-Trace"), r.URL.Path, bytes.ToUpper(body))
	})}
	hs.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = hs.Serve(tap) }()
	call := func(c *http.Client, tag, path string, tid bool) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+dst+path, strings.NewReader(strings.Repeat(tag, len(tag)*3)))
		req.Header.Set("X-Trace", tag)
		if tid {
			req.Header.Set("Retrace-Trace-Id", tag) // what the agent adds
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return fmt.Sprintf("%s %d %s %s", resp.Proto, resp.StatusCode, resp.Header.Get("X-Echo"), b), err
	}
	client := func(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
		tr := &http.Transport{Protocols: new(http.Protocols), DialContext: dial}
		tr.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 20 * time.Second}
	}
	rc := client(nil)
	if _, err := call(rc, "warm", "/warm", false); err != nil {
		t.Fatal(err)
	}
	want := runTraces(n, "h2c", func(tag string) (string, error) { return call(rc, tag, "/items/"+tag, false) })
	rc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(ctx)
	traceOf := func(x *http2.Exchange) string {
		v, _ := http2.Get(x.Request.Header, "x-trace")
		if v == "warm" {
			return ""
		}
		return v
	}
	srv := mocktest.NewServer(t, mockserver.Config{}, tap.Sessions(t, dst, traceOf)...)
	d := &mocktest.Dialer{Mock: srv.Addr()}
	mc := client(d.DialContext)
	if _, err := call(mc, "warm", "/warm", false); err != nil {
		t.Fatal(err)
	}
	got := runTraces(n, "h2c", func(tag string) (string, error) { return call(mc, tag, "/items/"+tag, true) })
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
		}
	}
	s, err := call(mc, "h2c-01", "/elsewhere", true)
	if err != nil || !strings.HasPrefix(s, "HTTP/2.0 502") || !strings.Contains(s, `no "POST /elsewhere" call`) {
		t.Errorf("request not recorded: %q %v", s, err)
	}
	if r := report(t, srv, "h2c-05"); len(r.Calls) != 1 || r.Calls[0].Proto != "http2" || r.Calls[0].Matched != 0 {
		t.Errorf("observed %+v", r.Calls)
	}
}

// TestMockGRPCMovedDestination: the service dials its gRPC downstream at
// another address than the recording's. With Config.Map (--map) naming
// it, and without (the recorded gRPC destination chosen by the first
// stream), every call is answered from the recorded destination, and
// GET /destinations says why.
func TestMockGRPCMovedDestination(t *testing.T) {
	dst, want, sessions := recordGRPC(t, 4)
	for _, tc := range []struct {
		name, live string
		cfg        mockserver.Config
		how        string
	}{
		{"map", "inventory.staging:50051", mockserver.Config{Map: map[string]string{"inventory.staging:50051": dst}}, mockserver.HowMap},
		{"auto", "inventory.staging:50051", mockserver.Config{}, mockserver.HowAuto},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := mocktest.NewServer(t, tc.cfg, sessions...)
			cc := mockClient(t, srv, tc.live)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got := runTraces(4, "grpc", func(tag string) (string, error) { return grpcWork(inTrace(ctx, tag), cc, tag) })
			for tag, w := range want {
				if got[tag] != w {
					t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
				}
			}
			ds := srv.Destinations()
			if len(ds) != 1 || ds[0].Live != tc.live || ds[0].Recorded != dst || ds[0].How != tc.how {
				t.Errorf("destinations %+v", ds)
			}
		})
	}
}

// TestMockGRPCSlowLookupDoesNotStall: with recordings fetched on demand
// (Config.Lookup, --lazy), a trace whose recording is slow to come holds
// up its own stream only: another trace's calls on the same connection
// are answered meanwhile.
func TestMockGRPCSlowLookupDoesNotStall(t *testing.T) {
	dst, _, sessions := recordGRPC(t, 2)
	byID := map[string]*recording.Session{}
	for _, s := range sessions {
		byID[s.ID] = s
	}
	asked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lookup := func(ctx context.Context, id string) (*recording.Session, error) {
		if id == "grpc-00" {
			once.Do(func() { close(asked) })
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return byID[id], nil
	}
	srv := mocktest.NewServer(t, mockserver.Config{Lookup: lookup})
	cc := mockClient(t, srv, dst)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow := make(chan error, 1)
	go func() {
		_, err := grpcWork(inTrace(ctx, "grpc-00"), cc, "grpc-00")
		slow <- err
	}()
	<-asked
	if _, err := grpcWork(inTrace(ctx, "grpc-01"), cc, "grpc-01"); err != nil {
		t.Fatalf("the trace beside the slow one: %v", err)
	}
	select {
	case err := <-slow:
		t.Fatalf("the slow trace answered before its recording came: %v", err)
	default:
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("the slow trace: %v", err)
	}
}
