package hook_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/internal/certtest"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/trace"
	wgrpc "github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
)

// grpcShop is an HTTP service under test whose every request makes, over
// one shared grpc-go ClientConn, one call of each kind to a gRPC
// downstream: unary (twice, once answered with a status), server
// streaming, bidirectional, health (grpctest.Exercise, which checks each
// answer), and client streaming; it answers with what they answered.
type grpcShop struct{ cc *grpc.ClientConn }

func (s grpcShop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tag := r.URL.Query().Get("tag")
	n, err := grpctest.Exercise(r.Context(), s.cc, tag)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	ctx := metadata.AppendToOutgoingContext(r.Context(), "x-trace", tag)
	up, err := testpb.NewTestServiceClient(s.cc).StreamingInputCall(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for i := 1; i <= 3; i++ {
		if err := up.Send(&testpb.StreamingInputCallRequest{Payload: grpctest.Payload([]byte(tag), i*len(tag))}); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	sum, err := up.CloseAndRecv()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "%s: %d calls, %d bytes streamed up", tag, n+1, sum.AggregatedPayloadSize)
}

// serveShop serves h on a fresh listener until the test ends.
func serveShop(t *testing.T, h http.Handler) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return l.Addr().String()
}

// newCapture returns a Recorder writing to a directory store, with the
// wire protocols' decoded form.
func newCapture(t *testing.T) (*capture.Recorder, *recording.DirStore) {
	store, err := recording.NewDirStore(t.TempDir())
	require.NoError(t, err)
	smp, err := recording.NewSampler(1)
	require.NoError(t, err)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: smp, QueueSize: 1 << 12, Decode: capture.Decode})
	require.NoError(t, err)
	rec, err := capture.New(capture.Config{Pipeline: pipe, App: "h2"})
	require.NoError(t, err)
	return rec, store
}

// sessionsOf reads every session in st: the service's by the tag of its
// request, and the background ones.
func sessionsOf(t *testing.T, st *recording.DirStore) (byTag map[string]*recording.Session, bg []*recording.Session) {
	byTag = map[string]*recording.Session{}
	require.NoError(t, st.Scan(context.Background(), func(s *recording.Session) error {
		if s.Background {
			bg = append(bg, s)
			return nil
		}
		if s.Inbound.Proto != recording.ProtoHTTP {
			// the in-process downstream's own streams, recorded as
			// inbound sessions of their own
			return nil
		}
		line, _, _ := strings.Cut(string(s.Inbound.Request), "\r\n")
		_, tag, ok := strings.Cut(strings.Fields(line + " ")[1], "tag=")
		require.True(t, ok, "session %s: %q", s.ID, line)
		require.Nil(t, byTag[tag], "%s recorded twice", tag)
		byTag[tag] = s
		return nil
	}))
	return byTag, bg
}

// halves parses a recorded call's request and response.
func halves(t *testing.T, c recording.Call) (req, resp http2.Message, pace []http2.Mark) {
	t.Helper()
	req, _, err := http2.ParseMessage(c.Request)
	require.NoError(t, err, "request %q", c.Request)
	resp, pace, err = http2.ParseMessage(c.Response)
	require.NoError(t, err, "response %q", c.Response)
	return req, resp, pace
}

// TestRecordGRPCStreamsThenReplay records an HTTP service whose requests
// each make six gRPC calls of every kind over one shared ClientConn, 64
// requests at once: every session holds exactly its own six calls, each
// one stream (proto grpc) with its own request's metadata, messages and
// status, no retrace-* field anywhere, and the real server saw none. The
// recording then answers the same requests in replay mode, the
// downstream stopped: the test's HTTP/2 mock (hook's frameMock, a
// wire/http2.ServerConn) answers every stream from the session of the
// trace it carries, at the recording's pace, and every request is
// answered as when recorded.
func TestRecordGRPCStreamsThenReplay(t *testing.T) {
	const n = 64
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	downAddr := dl.Addr().String()
	svc := &grpctest.Service{}
	stopDown := serveGRPCService(t, dl, svc)

	rec, store := newCapture(t)
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec, Logger: discardLogger()})
	require.NoError(t, err)
	rewrittenBefore := hook.ReadStats().H2Outbound
	down, err := grpc.NewClient(downAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// start-up traffic of no request: a background session's
	_, err = grpctest.Exercise(ctx, down, "startup")
	require.NoError(t, err)
	sut := serveShop(t, grpcShop{cc: down})
	want := shopCalls(t, sut, n, nil)
	down.Close()
	undo()
	require.NoError(t, rec.Close(context.Background()))
	stopDown()

	assert.Equal(t, int64(1), hook.ReadStats().H2Outbound-rewrittenBefore, "one shared connection, rewritten")
	for _, md := range svc.Seen {
		for k := range md {
			require.False(t, strings.HasPrefix(k, "retrace-"), "the server saw %s", k)
		}
	}
	byTag, bg := sessionsOf(t, store)
	require.Len(t, byTag, n)
	paths := []string{"/grpc.testing.TestService/UnaryCall", "/grpc.testing.TestService/UnaryCall",
		"/grpc.testing.TestService/StreamingOutputCall", "/grpc.testing.TestService/FullDuplexCall",
		"/grpc.health.v1.Health/Check", "/grpc.testing.TestService/StreamingInputCall"}
	mock := &h2Recorded{left: map[string][]*http2.Exchange{}}
	for tag, s := range byTag {
		require.Len(t, s.Calls, len(paths), tag)
		for i, c := range s.Calls {
			assert.Equal(t, "grpc", c.Proto, tag)
			assert.Equal(t, downAddr, c.Dst)
			if !utf8.Valid(c.Request) {
				assert.NotEmpty(t, c.Decoded, "%s: the decoded form of a binary stream", tag)
			}
			assert.Contains(t, capture.Decode(c.Proto, c.Request), "/grpc.", "%s: decoded", tag)
			req, resp, pace := halves(t, c)
			path, _ := http2.Get(req.Header, ":path")
			require.Equal(t, paths[i], path, "%s: call %d", tag, i)
			got, _ := http2.Get(req.Header, "x-trace")
			require.Equal(t, tag, got, "%s: call %d is another request's", tag, i)
			for _, half := range [][]byte{c.Request, c.Response} {
				require.NotContains(t, string(half), "retrace-", tag)
			}
			msgs, rest, err := wgrpc.Split(req.Data, 0)
			require.NoError(t, err)
			require.Empty(t, rest)
			for _, m := range msgs {
				// every request message's payload is the tag repeated
				// (the health check's is empty)
				require.True(t, len(m.Data) == 0 || strings.Contains(string(m.Data), tag), "%s: a message of another request", tag)
			}
			st, ok, err := wgrpc.StatusOf(resp.Header, resp.Trailer)
			require.NoError(t, err)
			require.True(t, ok, "%s %s: a status", tag, path)
			if i == 1 {
				assert.Equal(t, 5, int(st.Code), "NotFound")
				assert.Equal(t, "no "+tag, st.Message)
			} else {
				assert.Zero(t, int(st.Code), "%s %s: %s", tag, path, st.Message)
			}
			if end, ok := http2.Get(resp.Trailer, "x-trace-end"); ok {
				require.Equal(t, tag, end, "%s: another request's trailer", tag)
			}
			x := &http2.Exchange{Request: req, Response: resp, Pace: pace}
			mock.left[s.ID+" "+path] = append(mock.left[s.ID+" "+path], x)
		}
	}
	var startup int
	for _, s := range bg {
		for _, c := range s.Calls {
			req, _, _ := halves(t, c)
			tag, _ := http2.Get(req.Header, "x-trace")
			require.Equal(t, "startup", tag, "only the start-up calls are background")
			startup++
		}
	}
	assert.Equal(t, 5, startup, "the start-up calls, in the background sessions")

	// Replay: the downstream stopped; the service's connection to it goes
	// to the mock, which answers each stream from its trace's session.
	mock.byTrace = true
	mockAddr := frameMock(t, mock)
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	install(t, hook.Config{Mode: hook.Replay, MockAddr: mockAddr, Passthrough: []string{sl.Addr().String()}, NoClock: true, Logger: discardLogger()})
	down2, err := grpc.NewClient(downAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer down2.Close()
	srv := &http.Server{Handler: grpcShop{cc: down2}}
	go func() { _ = srv.Serve(sl) }()
	defer srv.Close()
	ids := map[string]string{}
	for tag, s := range byTag {
		ids[tag] = s.ID
	}
	got := shopCalls(t, sl.Addr().String(), n, ids)
	mock.mu.Lock()
	defer mock.mu.Unlock()
	for _, err := range mock.errs {
		t.Error(err)
	}
	for tag, w := range want {
		assert.Equal(t, w, got[tag], tag)
	}
	for k, l := range mock.left {
		assert.Empty(t, l, "%s: recorded calls not made", k)
	}
}

// serveGRPCService serves svc and the health service on l; stop ends it.
func serveGRPCService(t *testing.T, l net.Listener, svc *grpctest.Service) (stop func()) {
	var once sync.Once
	var srvStop func()
	sub := &stopper{}
	grpctest.ServeService(sub, l, svc)
	srvStop = sub.run
	stop = func() { once.Do(srvStop) }
	t.Cleanup(stop)
	return stop
}

// stopper is a testing.TB whose cleanups run when run is called.
type stopper struct {
	testing.TB
	mu  sync.Mutex
	fns []func()
}

func (s *stopper) Helper()           {}
func (s *stopper) Cleanup(fn func()) { s.mu.Lock(); s.fns = append(s.fns, fn); s.mu.Unlock() }
func (s *stopper) run() {
	s.mu.Lock()
	fns := s.fns
	s.fns = nil
	s.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// shopCalls sends n requests to the service at addr at once, each on a
// raw connection (written past the hooks, as the replayer's are), with
// Retrace-Trace-Id from ids when given, and returns the answers by tag.
func shopCalls(t *testing.T, addr string, n int, ids map[string]string) map[string]string {
	return shopCallsFrom(t, addr, 0, n, ids)
}

// shopCallsFrom is shopCalls of the tags from first on.
func shopCallsFrom(t *testing.T, addr string, first, n int, ids map[string]string) map[string]string {
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("shop-%02d", first+i)
			rc, err := agenttest.DialRaw(addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer rc.Close()
			var hdr []string
			if ids != nil {
				hdr = append(hdr, hook.TraceHeader+": "+ids[tag])
			}
			code, body, err := rc.Get("/call?tag="+tag, hdr...)
			if err != nil || code != http.StatusOK {
				t.Errorf("%s: %d %s %v", tag, code, body, err)
				return
			}
			mu.Lock()
			got[tag] = string(body)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return got
}

// TestRecordNetHTTPH2: net/http's HTTP/2 client, over TLS with ALPN (a
// DefaultTransport-like transport: ForceAttemptHTTP2) and h2c with prior
// knowledge, shares one connection among 32 traces; each request is one
// call of proto http2 in its own trace's session, with its own body and
// answer, no retrace-* field recorded, and the server saw none.
func TestRecordNetHTTPH2(t *testing.T) {
	ca := certtest.New(t)
	echo := func(leaked *[]string, mu *sync.Mutex) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k := range r.Header {
				if strings.HasPrefix(strings.ToLower(k), "retrace-") {
					mu.Lock()
					*leaked = append(*leaked, k)
					mu.Unlock()
				}
			}
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Echo", r.URL.Path)
			fmt.Fprintf(w, "%s %s %s", r.Proto, r.URL.Path, strings.ToUpper(string(body)))
		})
	}
	for _, kind := range []string{"h2 over TLS", "h2c"} {
		t.Run(kind, func(t *testing.T) {
			var mu sync.Mutex
			var leaked []string
			var down *httptest.Server
			tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: ca.ClientConfig(), MaxConnsPerHost: 1}
			if kind == "h2c" {
				down = httptest.NewUnstartedServer(echo(&leaked, &mu))
				down.Config.Protocols = new(http.Protocols)
				down.Config.Protocols.SetUnencryptedHTTP2(true)
				down.Start()
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			} else {
				down = httptest.NewUnstartedServer(echo(&leaked, &mu))
				down.TLS = ca.ServerConfig(t)
				down.EnableHTTP2 = true
				down.StartTLS()
			}
			defer down.Close()
			rec, store := newCapture(t)
			undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec, Logger: discardLogger()})
			require.NoError(t, err)
			hc := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			sut := serveShop(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tag := r.URL.Query().Get("tag")
				resp, err := hc.Post(down.URL+"/items/"+tag, "text/plain", strings.NewReader(strings.Repeat(tag, 50)))
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				w.Write(b)
			}))
			// one request first, so that the others share its connection
			got := shopCalls(t, sut, 1, nil)
			for k, v := range shopCallsFrom(t, sut, 1, 31, nil) {
				got[k] = v
			}
			tr.CloseIdleConnections()
			undo()
			require.NoError(t, rec.Close(context.Background()))
			require.Empty(t, leaked, "the server saw retrace-* headers")
			byTag, _ := sessionsOf(t, store)
			require.Len(t, byTag, 32)
			conns := map[int64]bool{}
			for tag, s := range byTag {
				require.Equal(t, "HTTP/2.0 /items/"+tag+" "+strings.ToUpper(strings.Repeat(tag, 50)), got[tag])
				require.Len(t, s.Calls, 1, tag)
				c := s.Calls[0]
				conns[c.Conn] = true
				assert.Equal(t, "http2", c.Proto)
				assert.Equal(t, kind != "h2c", c.TLS.On)
				if c.TLS.On {
					assert.Equal(t, "h2", c.TLS.ALPN)
				}
				req, resp, _ := halves(t, c)
				p, _ := http2.Get(req.Header, ":path")
				assert.Equal(t, "/items/"+tag, p)
				assert.Equal(t, strings.Repeat(tag, 50), string(req.Data))
				assert.Equal(t, got[tag], string(resp.Data))
				echo, _ := http2.Get(resp.Header, "x-echo")
				assert.Equal(t, "/items/"+tag, echo)
				require.NotContains(t, string(c.Request), "retrace-")
			}
			assert.Len(t, conns, 1, "every stream on one connection")
		})
	}
}

// TestRecordH2RewriterFailsOpen: when the outbound rewriter fails (here it
// panics on the connection's first write), the connection's bytes go on as
// the client wrote them, every call is answered as without the agent, the
// failure is counted, and calls stop carrying their trace in-band, so the
// server sees no retrace-* field.
func TestRecordH2RewriterFailsOpen(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := &grpctest.Service{}
	grpctest.ServeService(t, l, svc)
	hook.ForceH2RewritePanic(t)
	before := hook.ReadStats().H2RewriteFailed
	install(t, hook.Config{Mode: hook.Record, Recorder: &writeRecorder{}, Logger: discardLogger()})
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("fail-%d", i)
			defer trace.Bind(&trace.Trace{ID: agenttest.NewID()})()
			if _, err := grpctest.Exercise(ctx, cc, tag); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(1), hook.ReadStats().H2RewriteFailed-before)
	for _, md := range svc.Seen {
		for k := range md {
			require.False(t, strings.HasPrefix(k, "retrace-"), "the server saw %s", k)
		}
	}
}

// TestRecordGRPCOverTLS: a grpc-go client with TLS credentials (ALPN h2)
// is recorded from its plaintext, stream by stream: 16 requests' six calls
// each, every call in its own request's session, marked TLS with h2.
func TestRecordGRPCOverTLS(t *testing.T) {
	const n = 16
	ca := certtest.New(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := &grpctest.Service{}
	grpctest.ServeService(t, l, svc, grpc.Creds(credentials.NewTLS(ca.ServerConfig(t))))
	rec, store := newCapture(t)
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec, Logger: discardLogger()})
	require.NoError(t, err)
	cfg := ca.ClientConfig()
	cfg.ServerName = "localhost"
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	require.NoError(t, err)
	sut := serveShop(t, grpcShop{cc: cc})
	got := shopCalls(t, sut, n, nil)
	cc.Close()
	undo()
	require.NoError(t, rec.Close(context.Background()))
	require.Len(t, got, n)
	for _, md := range svc.Seen {
		for k := range md {
			require.False(t, strings.HasPrefix(k, "retrace-"), "the server saw %s", k)
		}
	}
	byTag, _ := sessionsOf(t, store)
	require.Len(t, byTag, n)
	for tag, s := range byTag {
		require.Len(t, s.Calls, 6, tag)
		for _, c := range s.Calls {
			assert.Equal(t, "grpc", c.Proto)
			assert.True(t, c.TLS.On)
			assert.Equal(t, "h2", c.TLS.ALPN)
			req, _, _ := halves(t, c)
			x, _ := http2.Get(req.Header, "x-trace")
			require.Equal(t, tag, x)
		}
	}
}

// TestRecordPRIThatIsNotHTTP2: a client of another protocol whose first
// write starts with "PRI " goes through the rewriter until the preface
// does not match; its bytes reach the server as written, and that is no
// rewriter failure.
func TestRecordPRIThatIsNotHTTP2(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	before := hook.ReadStats()
	install(t, hook.Config{Mode: hook.Record, Recorder: &writeRecorder{}, Logger: discardLogger()})
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	msgs := []string{"PRI ", "VATE hello\r\n", "and more\r\n"}
	for _, m := range msgs {
		_, err := c.Write([]byte(m))
		require.NoError(t, err)
	}
	require.NoError(t, c.Close())
	assert.Equal(t, strings.Join(msgs, ""), string(<-got))
	st := hook.ReadStats()
	assert.Equal(t, before.H2RewriteFailed, st.H2RewriteFailed)
	assert.Equal(t, before.H2Outbound+1, st.H2Outbound)
}
