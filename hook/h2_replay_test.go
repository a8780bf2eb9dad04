package hook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http2"
)

// orderService is a gRPC service under test: each UnaryCall calls the
// downstream TestService (unary, server-streaming, bidirectional) and its
// health service over one shared ClientConn, and answers with what they
// answered. The call's x-trace metadata goes downstream too.
type orderService struct {
	testpb.UnimplementedTestServiceServer
	down *grpc.ClientConn
}

func (s *orderService) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	tag := md.Get("x-trace")
	if len(tag) != 1 {
		return nil, errors.New("no x-trace")
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "x-trace", tag[0])
	seed := in.GetPayload().GetBody()
	c := testpb.NewTestServiceClient(s.down)
	var body bytes.Buffer
	r, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 30, Payload: &testpb.Payload{Body: seed}})
	if err != nil {
		return nil, fmt.Errorf("downstream UnaryCall: %w", err)
	}
	body.Write(r.GetPayload().GetBody())
	ss, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: seed},
		ResponseParameters: []*testpb.ResponseParameters{{Size: 7}, {Size: 20000}}})
	if err != nil {
		return nil, err
	}
	for {
		m, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("downstream StreamingOutputCall: %w", err)
		}
		body.Write(m.GetPayload().GetBody())
	}
	bd, err := c.FullDuplexCall(ctx)
	if err != nil {
		return nil, err
	}
	for i := 1; i <= 2; i++ {
		if err := bd.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: seed}, ResponseParameters: []*testpb.ResponseParameters{{Size: int32(5 * i)}}}); err != nil {
			return nil, err
		}
		m, err := bd.Recv() // answered before the next is sent
		if err != nil {
			return nil, fmt.Errorf("downstream FullDuplexCall: %w", err)
		}
		body.Write(m.GetPayload().GetBody())
	}
	if err := bd.CloseSend(); err != nil {
		return nil, err
	}
	if _, err := bd.Recv(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("downstream FullDuplexCall end: %v", err)
	}
	h, err := healthpb.NewHealthClient(s.down).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, fmt.Errorf("downstream health: %w", err)
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: body.Bytes()}, Username: tag[0] + " " + h.Status.String()}, nil
}

// serveGRPC serves svc on a fresh listener until stop.
func serveGRPC(t *testing.T, l net.Listener, register func(*grpc.Server)) (stop func()) {
	srv := grpc.NewServer()
	register(srv)
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

// tapped keeps, in order, what a server read and wrote on each connection.
type tapped struct {
	net.Listener
	mu  sync.Mutex
	log [][]tapChunk
}

type tapChunk struct {
	client bool
	b      []byte
}

type tappedConn struct {
	net.Conn
	l *tapped
	i int
}

func (l *tapped) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, nil)
	return &tappedConn{Conn: c, l: l, i: len(l.log) - 1}, nil
}

func (c *tappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.l.mu.Lock()
		c.l.log[c.i] = append(c.l.log[c.i], tapChunk{true, bytes.Clone(p[:n])})
		c.l.mu.Unlock()
	}
	return n, err
}

func (c *tappedConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.log[c.i] = append(c.l.log[c.i], tapChunk{false, bytes.Clone(p)})
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// h2Recorded is the downstream's exchanges by trace (x-trace) and path, in
// stream order.
type h2Recorded struct {
	mu   sync.Mutex
	left map[string][]*http2.Exchange
	errs []error
	// byTrace: left is by in-band trace and path (a recording's sessions
	// by id), and a stream's x-trace must be its recorded call's.
	byTrace bool
}

func recordedOf(t *testing.T, l *tapped) *h2Recorded {
	r := &h2Recorded{left: map[string][]*http2.Exchange{}}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, log := range l.log {
		c := http2.NewConn(http2.Limits{})
		for _, ch := range log {
			var err error
			if ch.client {
				err = c.Client(ch.b)
			} else {
				err = c.Server(ch.b)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, x := range c.Close("end") {
			if x.Unfinished != "" {
				continue // the client's last streams at shutdown
			}
			tag, _ := http2.Get(x.Request.Header, "x-trace")
			k := tag + " " + x.Path()
			r.left[k] = append(r.left[k], x)
		}
	}
	return r
}

func (r *h2Recorded) take(h []hpack.HeaderField) (*http2.Exchange, error) {
	tid, _ := http2.Get(h, http2.TraceField)
	tag, _ := http2.Get(h, "x-trace")
	path, _ := http2.Get(h, ":path")
	live := tag
	if r.byTrace {
		tag = tid
	}
	if tid != tag {
		return nil, fmt.Errorf("stream of %s %s carried trace %q", tag, path, tid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := tid + " " + path
	l := r.left[k]
	if len(l) == 0 {
		return nil, fmt.Errorf("no recorded call left for %s", k)
	}
	// Streams of one trace and path are in recorded order.
	best := 0
	for i, x := range l {
		if x.StreamID < l[best].StreamID {
			best = i
		}
	}
	x := l[best]
	r.left[k] = append(l[:best:best], l[best+1:]...)
	if want, _ := http2.Get(x.Request.Header, "x-trace"); r.byTrace && want != live {
		return nil, fmt.Errorf("stream of trace %s %s (x-trace %q) is another request's (x-trace %q recorded)", tid, path, live, want)
	}
	return x, nil
}

// frameMock is a mock server of the agent's replay framing (DESIGN.md 3.3)
// for HTTP/2: each redirected connection's frames are unwrapped and fed
// to a wire/http2 ServerConn, whose streams are answered, each from its
// own in-band trace's recording, at the recording's pace.
func frameMock(t *testing.T, rec *h2Recorded) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if err := serveFrames(c, rec); err != nil {
					rec.mu.Lock()
					rec.errs = append(rec.errs, err)
					rec.mu.Unlock()
				}
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().String()
}

func serveFrames(c net.Conn, rec *h2Recorded) error {
	fr := trace.NewFrameReader(c, 0)
	sc := http2.NewServerConn(http2.ServerConfig{})
	type playing struct {
		x        *http2.Exchange
		sent     int
		answered bool
	}
	streams := map[uint32]*playing{}
	for {
		if out := sc.Output(); out != nil {
			if _, err := c.Write(out); err != nil {
				return nil
			}
		}
		_, payload, err := fr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return err
		}
		reqs, ferr := sc.Feed(payload)
		for _, r := range reqs {
			p := streams[r.StreamID]
			if p == nil {
				x, err := rec.take(r.Header)
				if err != nil {
					sc.Reset(r.StreamID, 0x2)
					rec.mu.Lock()
					rec.errs = append(rec.errs, err)
					rec.mu.Unlock()
					continue
				}
				p = &playing{x: x}
				streams[r.StreamID] = p
			}
			due := p.x.Due(len(r.Data), r.Ended)
			if due == p.sent && !r.Ended {
				continue
			}
			m := http2.Message{Data: p.x.Response.Data[p.sent:due]}
			if !p.answered {
				m.Header = p.x.Response.Header
			}
			if r.Ended {
				m.End, m.Trailer = true, p.x.Response.Trailer
				delete(streams, r.StreamID)
			}
			if err := sc.Respond(r.StreamID, m); err != nil {
				return err
			}
			p.sent, p.answered = due, true
		}
		if ferr != nil {
			if out := sc.Output(); out != nil {
				_, _ = c.Write(out)
			}
			if errors.Is(ferr, http2.ErrGoAway) {
				return nil
			}
			return ferr
		}
	}
}

// callOrders makes n traces' calls to the service under test at once,
// each from a goroutine bound to its trace, and returns the answers.
func callOrders(t *testing.T, addr string, n int) map[string]string {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("order-%02d", i)
			defer trace.Bind(&trace.Trace{ID: tag})()
			c := metadata.AppendToOutgoingContext(ctx, "x-trace", tag)
			r, err := testpb.NewTestServiceClient(cc).UnaryCall(c, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(tag)}})
			if err != nil {
				t.Errorf("%s: %v", tag, err)
				return
			}
			mu.Lock()
			got[tag] = r.Username + " " + string(r.GetPayload().GetBody())
			mu.Unlock()
		}()
	}
	wg.Wait()
	return got
}

// TestReplayGRPCServiceWithDownstreamStopped records a gRPC service whose
// calls each make four calls (unary, server-streaming, bidirectional,
// health) to a gRPC downstream over one shared ClientConn, 64 traces at
// once, then replays the same calls with the agent in replay mode and the
// downstream stopped: the service's downstream connection goes to a mock
// that answers every stream from the recording of the trace the stream
// carries in-band, and every answer must be what the service answered
// when recorded. The mock checks that each stream carries the trace of the
// call that made it.
func TestReplayGRPCServiceWithDownstreamStopped(t *testing.T) {
	const n = 64
	// Record: the real downstream, tapped.
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := dl.Addr().String()
	tl := &tapped{Listener: dl}
	stopDown := serveGRPC(t, tl, func(s *grpc.Server) {
		testpb.RegisterTestServiceServer(s, &grpctest.Service{})
		healthpb.RegisterHealthServer(s, healthServing{})
	})
	down, err := grpc.NewClient(downAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stopSUT := serveGRPC(t, sl, func(s *grpc.Server) { testpb.RegisterTestServiceServer(s, &orderService{down: down}) })
	want := callOrders(t, sl.Addr().String(), n)
	if len(want) != n {
		t.Fatalf("%d calls answered when recording", len(want))
	}
	stopSUT()
	down.Close()
	time.Sleep(20 * time.Millisecond)
	stopDown()
	rec := recordedOf(t, tl)

	// Replay: the downstream stopped, its address redirected to the mock.
	mock := frameMock(t, rec)
	sl2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	install(t, hook.Config{Mode: hook.Replay, MockAddr: mock, Passthrough: []string{sl2.Addr().String()}, NoClock: true})
	down2, err := grpc.NewClient(downAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer down2.Close()
	serveGRPC(t, sl2, func(s *grpc.Server) { testpb.RegisterTestServiceServer(s, &orderService{down: down2}) })
	got := callOrders(t, sl2.Addr().String(), n)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, err := range rec.errs {
		t.Error(err)
	}
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, trunc(got[tag]), trunc(w))
		}
	}
	for k, l := range rec.left {
		if len(l) > 0 {
			t.Errorf("%s: %d recorded calls not made", k, len(l))
		}
	}
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

type healthServing struct {
	healthpb.UnimplementedHealthServer
}

func (healthServing) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// TestReplayH2CClient: net/http's HTTP/2 client (h2c with prior knowledge)
// shares one connection among 64 traces; in replay mode each request
// carries its trace in-band as a stream header, and the mock answers each
// stream from its own trace's recording, with the real server stopped.
func TestReplayH2CClient(t *testing.T) {
	const n = 64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	tl := &tapped{Listener: l}
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Header.Get("X-Trace"), r.URL.Path, bytes.ToUpper(body))
	})}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(tl) }()
	want := h2cCalls(t, addr, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	rec := recordedOf(t, tl)

	install(t, hook.Config{Mode: hook.Replay, MockAddr: frameMock(t, rec), NoClock: true})
	got := h2cCalls(t, addr, n)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, err := range rec.errs {
		t.Error(err)
	}
	if len(want) != n || len(got) != n {
		t.Fatalf("%d answers recorded, %d replayed", len(want), len(got))
	}
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
		}
	}
}

// h2cCalls posts n traces' requests over one h2c connection, each from a
// goroutine bound to its trace (after one that opens the connection).
func h2cCalls(t *testing.T, addr string, n int) map[string]string {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		call := func() {
			defer wg.Done()
			tag := fmt.Sprintf("h2c-%02d", i)
			defer trace.Bind(&trace.Trace{ID: tag})()
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/items/"+tag, strings.NewReader(strings.Repeat(tag, i*100)))
			req.Header.Set("X-Trace", tag)
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("%s: %v", tag, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			got[tag] = resp.Proto + " " + string(body)
			mu.Unlock()
		}
		if i == 0 {
			call()
		} else {
			go call()
		}
	}
	wg.Wait()
	return got
}

// TestReplayGRPCOverTLS: a grpc-go client with TLS credentials (ALPN h2
// only) to a redirected destination gets a completed handshake with h2
// negotiated and speaks plaintext HTTP/2 to the mock, each stream with its
// trace in-band: 64 traces' calls answered from a recording made against
// the same service.
func TestReplayGRPCOverTLS(t *testing.T) {
	const n = 64
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dl.Addr().String()
	tl := &tapped{Listener: dl}
	stop := serveGRPC(t, tl, func(s *grpc.Server) { testpb.RegisterTestServiceServer(s, &grpctest.Service{}) })
	unary := func(cc *grpc.ClientConn) map[string]string {
		out := map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tag := fmt.Sprintf("tls-%02d", i)
				defer trace.Bind(&trace.Trace{ID: tag})()
				c := metadata.AppendToOutgoingContext(ctx, "x-trace", tag)
				r, err := testpb.NewTestServiceClient(cc).UnaryCall(c, &testpb.SimpleRequest{ResponseSize: 64, Payload: &testpb.Payload{Body: []byte(tag)}})
				if err != nil {
					t.Errorf("%s: %v", tag, err)
					return
				}
				mu.Lock()
				out[tag] = string(r.GetPayload().GetBody())
				mu.Unlock()
			}()
		}
		wg.Wait()
		return out
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	want := unary(cc)
	cc.Close()
	time.Sleep(20 * time.Millisecond)
	stop()
	rec := recordedOf(t, tl)

	faked := hook.ReadStats().TLSHandshakes
	install(t, hook.Config{Mode: hook.Replay, MockAddr: frameMock(t, rec), NoClock: true})
	// No certificate anywhere: the handshake is completed by the agent.
	creds := credentials.NewTLS(&tls.Config{ServerName: "inventory.internal", MinVersion: tls.VersionTLS12})
	cc2, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	got := unary(cc2)
	if hook.ReadStats().TLSHandshakes == faked {
		t.Fatal("no TLS handshake was completed by the agent")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, err := range rec.errs {
		t.Error(err)
	}
	if len(want) != n || len(got) != n {
		t.Fatalf("%d answers recorded, %d replayed", len(want), len(got))
	}
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
		}
	}
}
