package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

// grpcCalls is one trace's calls to a gRPC downstream: unary, a status,
// server-streaming (a 70 000-byte message), a bidirectional ping-pong and
// health (grpctest.Exercise), then a client-streaming call; it returns
// what came back.
func grpcCalls(ctx context.Context, cc *grpc.ClientConn, tag string) (string, error) {
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
	if _, err := testpb.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 9, Payload: grpctest.Payload([]byte(tag), 3)}, grpc.Header(&hdr)); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %v", r.AggregatedPayloadSize, hdr.Get("x-trace")), nil
}

// eachTrace runs work for n traces at once, each on a goroutine bound to
// its trace as the agent binds a replayed request's, and returns what
// each returned (or its error).
func eachTrace(n int, prefix string, bind bool, work func(tag string) (string, error)) map[string]string {
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tag := fmt.Sprintf("%s-%02d", prefix, i)
			if bind {
				defer trace.Bind(&trace.Trace{ID: tag})()
			}
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

func xTraceOf(x *http2.Exchange) string { v, _ := http2.Get(x.Request.Header, "x-trace"); return v }

// TestGRPCThroughAgent: 64 traces' gRPC calls of every kind, over one
// ClientConn, recorded from a real grpc-go server; the server stopped,
// the same service code runs under the agent in replay mode: its
// ClientConn's connection is redirected to a running mock server, each
// call carries its caller's trace in-band, and every answer is the
// recorded one, every recorded call used by its own trace. A call of a
// trace no recording names gets UNAVAILABLE with the reason.
func TestGRPCThroughAgent(t *testing.T) {
	const n = 64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst := l.Addr().String()
	tap := mocktest.NewH2Listener(l)
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, &grpctest.Service{})
	healthpb.RegisterHealthServer(gs, healthServing{})
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(tap) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc, err := grpc.NewClient(dst, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	want := eachTrace(n, "g", false, func(tag string) (string, error) { return grpcCalls(ctx, cc, tag) })
	cc.Close()
	time.Sleep(20 * time.Millisecond)
	gs.Stop()
	<-done
	sessions := tap.Sessions(t, dst, xTraceOf)
	if len(sessions) != n {
		t.Fatalf("%d sessions recorded", len(sessions))
	}

	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{strings.TrimPrefix(srv.AdminURL(), "http://")}})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	defer undo()
	cc2, err := grpc.NewClient(dst, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	got := eachTrace(n, "g", true, func(tag string) (string, error) { return grpcCalls(ctx, cc2, tag) })
	for tag, w := range want {
		if strings.HasPrefix(w, "error") {
			t.Fatalf("recording %s: %s", tag, w)
		}
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
		}
	}
	for _, s := range sessions {
		r := traceReport(t, srv, s.ID)
		if len(r.Unused) != 0 || len(r.Calls) != len(s.Calls) {
			t.Errorf("%s: %d calls observed of %d, %d recorded calls unused", s.ID, len(r.Calls), len(s.Calls), len(r.Unused))
		}
		for _, oc := range r.Calls {
			if oc.Matched < 0 || oc.Proto != "grpc" || bytes.Contains(oc.Request, []byte("retrace-")) ||
				!bytes.Contains(oc.Request, []byte("x-trace: "+s.ID+"\r\n")) {
				t.Errorf("%s: observed %+v", s.ID, oc)
			}
		}
	}
	// a trace no recording names
	func() {
		defer trace.Bind(&trace.Trace{ID: "g-unrecorded"})()
		_, err := testpb.NewTestServiceClient(cc2).UnaryCall(ctx, &testpb.SimpleRequest{})
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), `trace "g-unrecorded" resolves to no recording`) {
			t.Errorf("call of an unrecorded trace: %v", err)
		}
	}()
}

// traceReport is GET /traces/{tid}, asked of the admin handler itself.
func traceReport(t *testing.T, srv *mockserver.Server, tid string) mockserver.TraceReport {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/traces/"+tid, nil))
	var r mockserver.TraceReport
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("GET /traces/%s: %v: %s", tid, err, rec.Body.Bytes())
	}
	return r
}

type healthServing struct {
	healthpb.UnimplementedHealthServer
}

func (healthServing) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// TestH2CThroughAgent: net/http's HTTP/2 client (h2c with prior
// knowledge) shared by 64 traces, recorded from a real server, replayed
// under the agent against the mock server with the server stopped: the
// agent adds each request's trace, the mock answers each stream from its
// own trace's recording; a request the recording lacks gets a 502 naming
// the reason.
func TestH2CThroughAgent(t *testing.T) {
	const n = 64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst := l.Addr().String()
	tap := mocktest.NewH2Listener(l)
	hs := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Header.Get("X-Trace"), r.URL.Path, bytes.ToUpper(body))
	})}
	hs.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = hs.Serve(tap) }()
	newClient := func() *http.Client {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	post := func(c *http.Client, tag, path string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+dst+path, strings.NewReader(strings.Repeat(tag, 40)))
		req.Header.Set("X-Trace", tag)
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return fmt.Sprintf("%s %d %s", resp.Proto, resp.StatusCode, b), err
	}
	rc := newClient()
	if _, err := post(rc, "warm", "/warm"); err != nil { // opens the one connection
		t.Fatal(err)
	}
	want := eachTrace(n, "h", false, func(tag string) (string, error) { return post(rc, tag, "/items/"+tag) })
	rc.CloseIdleConnections()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	sessions := tap.Sessions(t, dst, func(x *http2.Exchange) string {
		if v := xTraceOf(x); v != "warm" {
			return v
		}
		return ""
	})

	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	undo, err := hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{strings.TrimPrefix(srv.AdminURL(), "http://")}})
	if err != nil {
		t.Fatalf("installing the agent: %v", err)
	}
	defer undo()
	mc := newClient()
	if s, err := post(mc, "warm", "/warm"); err != nil || !strings.Contains(s, " 200 ") {
		t.Fatalf("untraced request: %q %v", s, err)
	}
	got := eachTrace(n, "h", true, func(tag string) (string, error) { return post(mc, tag, "/items/"+tag) })
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
		}
	}
	func() {
		defer trace.Bind(&trace.Trace{ID: "h-03"})()
		s, err := post(mc, "h-03", "/elsewhere")
		if err != nil || !strings.HasPrefix(s, "HTTP/2.0 502") || !strings.Contains(s, `no "POST /elsewhere" call`) {
			t.Errorf("request the recording lacks: %q %v", s, err)
		}
	}()
}

// grpcService is a service under test: each /work?i=N request makes one
// trace's gRPC calls of every kind (grpcCalls) to its downstream over a
// ClientConn shared by every request, and answers with what came back.
func grpcService(cc *grpc.ClientConn) *http.Server {
	return &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := grpcCalls(r.Context(), cc, "w"+r.URL.Query().Get("i"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, s)
	})}
}

// TestGRPCRecordedByAgentReplayedByMock: the whole path. A service whose
// requests each make gRPC calls of every kind over one shared ClientConn
// is recorded by the agent in record mode (each stream one call of its
// request's session, capture's own HTTP/2 reassembly), 64 requests at
// once; then, the downstream stopped, replayed through the agent in
// replay mode against the mock server loaded from that recording: every
// answer is the recorded one, no missing mock, every stream matched in
// its own request's recording.
func TestGRPCRecordedByAgentReplayedByMock(t *testing.T) {
	const n = 64
	ctx := context.Background()
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst := dl.Addr().String()
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, &grpctest.Service{})
	healthpb.RegisterHealthServer(gs, healthServing{})
	gdone := make(chan struct{})
	go func() { defer close(gdone); _ = gs.Serve(dl) }()
	defer func() { gs.Stop(); <-gdone }()

	dir := t.TempDir()
	store, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sampler, err := recording.NewSampler(1)
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: sampler})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := capture.New(capture.Config{Pipeline: pipe, App: "e2e-grpc"})
	if err != nil {
		t.Fatal(err)
	}
	tids := make([]string, n)
	for i := range tids {
		tids[i] = trace.NewID()
	}
	serve := func(cfg hook.Config, hdr func(i int) string) []string {
		sutLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Mode == hook.Replay {
			cfg.Passthrough = append(cfg.Passthrough, sutLn.Addr().String()) // the test's own requests
		}
		undo, err := hook.Install(cfg)
		if err != nil {
			t.Fatalf("installing the agent: %v", err)
		}
		defer undo()
		cc, err := grpc.NewClient(dst, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		sut := grpcService(cc)
		var wg sync.WaitGroup
		wg.Go(func() { _ = sut.Serve(sutLn) })
		defer func() { sut.Close(); wg.Wait() }()
		return wiretest.Drive(t, sutLn.Addr().String(), n, hdr)
	}
	want := serve(hook.Config{Mode: hook.Record, Recorder: recorder}, func(i int) string {
		return fmt.Sprintf("traceparent: 00-%s-%016x-01", tids[i], i+1)
	})
	if err := recorder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if !strings.HasSuffix(w, fmt.Sprintf(" [w%d]", i)) {
			t.Fatalf("recording request %d: %s", i, w)
		}
	}
	gs.Stop()

	srv := mocktest.NewServer(t, mockserver.Config{})
	rd, err := recording.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sessionOf := map[string]string{}
	streams := map[string]int{}
	if _, err := srv.Load(ctx, func(ctx context.Context, fn func(*recording.Session) error) error {
		return rd.Scan(ctx, func(s *recording.Session) error {
			if s.Trace != "" {
				sessionOf[s.Trace] = s.ID
				for _, c := range s.Calls {
					if c.Proto == "grpc" && c.Dst == dst {
						streams[s.ID]++
					}
				}
			}
			return fn(s)
		})
	}); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	got := serve(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{strings.TrimPrefix(srv.AdminURL(), "http://")}}, func(i int) string {
		return "Retrace-Trace-Id: " + sessionOf[tids[i]]
	})
	for i := range n {
		if got[i] != want[i] {
			t.Errorf("request %d: replayed %q, recorded %q", i, got[i], want[i])
		}
	}
	var missing []mockserver.MissingMock
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/missing", nil))
	if err := json.Unmarshal(rec.Body.Bytes(), &missing); err != nil || len(missing) != 0 {
		t.Errorf("missing mocks: %+v %v", missing, err)
	}
	for i := range n {
		id := sessionOf[tids[i]]
		r := traceReport(t, srv, id)
		matched := 0
		for _, oc := range r.Calls {
			if oc.Proto == "grpc" && oc.Matched >= 0 {
				matched++
			}
		}
		if streams[id] != 7 || matched != 7 || len(r.Unused) != 0 {
			t.Errorf("request %d: %d gRPC calls recorded, %d matched, %d unused", i, streams[id], matched, len(r.Unused))
		}
	}
}
