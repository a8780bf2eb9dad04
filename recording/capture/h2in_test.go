//lint:file-ignore SA1019 x/net/http2/h2c is what services serving h2c by Upgrade (and older h2c services) use: the agent hooks its server, the test serves through it
package capture_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	x2 "golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/certtest"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
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
	unrecorded := hook.ReadStats().H2Unrecorded
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
	assert.Equal(t, unrecorded, hook.ReadStats().H2Unrecorded, "every HTTP/2 connection recorded")
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
	if strings.HasSuffix(path, "/StreamingOutputCall") && !s.Inbound.ResponseTruncated {
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

// h2Handler is an HTTP/2 service's handler: it reads the request's body,
// calls the echo downstream with the request's id and answers with both.
func h2Handler(hc *http.Client, down string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tag := r.URL.Query().Get("id")
		body, _ := io.ReadAll(r.Body)
		if err := echoGet(hc, down, tag); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("x-tag", tag)
		_, _ = io.WriteString(w, "done-"+tag+"-"+string(body))
	})
}

// TestRecordNetHTTPH2 records net/http's HTTP/2 server, over TLS (ALPN h2)
// and over h2c with prior knowledge, 64 clients at once: every request is
// one http2 session with its headers, body and response, and its handler's
// downstream call — net/http starts handlers from its serve loop, not from
// the goroutine that read the request, so this needs the agent's hook on
// the server's ServeConn.
func TestRecordNetHTTPH2(t *testing.T) {
	for _, mode := range []string{"tls", "h2c"} {
		t.Run(mode, func(t *testing.T) {
			rec, store := installRecorder(t, "h2", *sampler(t, 1))
			down, _ := startChild(t, "echo")
			hc := newClient(64)
			defer hc.CloseIdleConnections()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			srv := &http.Server{Handler: h2Handler(hc, down)}
			tr := &http.Transport{}
			scheme := "http"
			if mode == "tls" {
				ca := certtest.New(t)
				srv.TLSConfig = ca.ServerConfig(t)
				tr.TLSClientConfig = ca.ClientConfig()
				tr.ForceAttemptHTTP2 = true
				scheme = "https"
			} else {
				var p http.Protocols
				p.SetUnencryptedHTTP2(true)
				srv.Protocols = &p
				tr.Protocols = &p
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if mode == "tls" {
					_ = srv.ServeTLS(ln, "", "")
				} else {
					_ = srv.Serve(ln)
				}
			}()
			client := &http.Client{Transport: tr}
			tags := runH2Clients(t, client, scheme+"://"+ln.Addr().String())
			tr.CloseIdleConnections()
			require.NoError(t, srv.Close())
			<-done
			require.Zero(t, rec.Stats().Active)
			require.NoError(t, rec.Flush(context.Background()))
			seen := checkH2Sessions(t, store, ln.Addr().String(), mode == "tls")
			require.Equal(t, tags, seen)
		})
	}
}

// w3cTrace is the W3C trace-id a request tagged tag carries.
func w3cTrace(tag string) string { return "0000000000000000" + tag[2:] }

// runH2Clients makes 64 concurrent POSTs, each with a tag of its own, and
// returns the tags.
func runH2Clients(t *testing.T, c *http.Client, base string) map[string]bool {
	t.Helper()
	const clients = 64
	tags := map[string]bool{}
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		tag := "tg" + newReqID()[2:]
		tags[tag] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest("POST", base+"/work?id="+tag, strings.NewReader("body-"+tag))
			if err != nil {
				errs <- err
				return
			}
			req.Header.Set("Content-Type", "text/plain")
			req.Header.Set("traceparent", "00-"+w3cTrace(tag)+"-00f067aa0ba902b7-01")
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.ProtoMajor != 2 || string(b) != "done-"+tag+"-body-"+tag {
				errs <- fmt.Errorf("%s: %s %q", tag, resp.Proto, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return tags
}

// checkH2Sessions checks every http2 session of the server at addr: its
// request and response are its own tag's, and so is its one downstream
// call. It returns the tags seen.
func checkH2Sessions(t *testing.T, store recording.Store, addr string, tls bool) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	require.NoError(t, store.Scan(context.Background(), func(s *recording.Session) error {
		if s.Inbound.Local != addr {
			return nil
		}
		require.Equal(t, "http2", s.Inbound.Proto, "session %s", s.ID)
		require.Equal(t, tls, s.Inbound.TLS.On, "session %s", s.ID)
		req, _, err := http2.ParseMessage(s.Inbound.Request)
		require.NoError(t, err, "session %s request %q", s.ID, s.Inbound.Request)
		resp, _, err := http2.ParseMessage(s.Inbound.Response)
		require.NoError(t, err, "session %s response %q", s.ID, s.Inbound.Response)
		path, _ := http2.Get(req.Header, ":path")
		tag := tagPattern.FindString(path)
		require.NotEmpty(t, tag, "session %s: path %q", s.ID, path)
		require.False(t, seen[tag], "%s recorded twice", tag)
		seen[tag] = true
		if m, _ := http2.Get(req.Header, ":method"); m == "POST" {
			require.Equal(t, "body-"+tag, string(req.Data), "session %s", s.ID)
			require.Equal(t, w3cTrace(tag), s.Trace, "session %s: the W3C trace-id of its traceparent", s.ID)
		}
		status, _ := http2.Get(resp.Header, ":status")
		require.Equal(t, "200", status, "session %s", s.ID)
		require.Contains(t, string(resp.Data), "done-"+tag, "session %s", s.ID)
		require.Len(t, s.Calls, 1, "session %s: its handler's downstream call", s.ID)
		require.Contains(t, string(s.Calls[0].Request), "GET /echo?id="+tag+" ", "session %s", s.ID)
		for _, b := range [][]byte{s.Inbound.Request, s.Inbound.Response, s.Calls[0].Request, s.Calls[0].Response} {
			for _, other := range tagPattern.FindAllString(string(b), -1) {
				require.Equal(t, tag, other, "session %s of %s holds %s", s.ID, tag, other)
			}
		}
		return nil
	}))
	return seen
}

// TestRecordH2CUpgrade records x/net's h2c handler reached by Upgrade: the
// request that asked to upgrade is stream 1, answered as HTTP/2, and the
// client's later streams follow on the same connection; 8 connections at
// once, 8 streams each. Every stream is one http2 session with its
// response and its handler's downstream call — none holds only the
// 101 Switching Protocols.
func TestRecordH2CUpgrade(t *testing.T) {
	rec, store := installRecorder(t, "h2c", *sampler(t, 1))
	down, _ := startChild(t, "echo")
	hc := newClient(64)
	defer hc.CloseIdleConnections()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h2c.NewHandler(h2Handler(hc, down), &x2.Server{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	const conns, streams = 8, 8
	tags := map[string]bool{}
	perConn := make([][]string, conns)
	for i := range perConn {
		for range streams {
			tag := "tg" + newReqID()[2:]
			tags[tag] = true
			perConn[i] = append(perConn[i], tag)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for _, ts := range perConn {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := upgradeAndGet(ln.Addr().String(), ts); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.NoError(t, srv.Close())
	<-done
	require.Eventually(t, func() bool { return rec.Stats().Active == 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, rec.Flush(context.Background()))
	require.Equal(t, tags, checkH2Sessions(t, store, ln.Addr().String(), false))
}

// upgradeAndGet asks for tags[0] by an h2c Upgrade, then for every other
// tag on a stream of its own on the upgraded connection, and checks each
// answer.
func upgradeAndGet(addr string, tags []string) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	settings := base64.RawURLEncoding.EncodeToString([]byte{0, 2, 0, 0, 0, 0}) // ENABLE_PUSH 0
	if _, err := fmt.Fprintf(conn, "GET /work?id=%s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: %s\r\n\r\n", tags[0], addr, settings); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("upgrade: %s", resp.Status)
	}
	if _, err := io.WriteString(conn, x2.ClientPreface); err != nil {
		return err
	}
	fr := x2.NewFramer(conn, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	want := map[uint32]string{1: tags[0]}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i, tag := range tags[1:] {
		id := uint32(3 + 2*i)
		want[id] = tag
		block.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", addr}, {":path", "/work?id=" + tag}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(x2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
	}
	bodies := map[uint32]string{}
	for ended := 0; ended < len(tags); {
		f, err := fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("%d of %d streams answered: %w", ended, len(tags), err)
		}
		switch f := f.(type) {
		case *x2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *x2.DataFrame:
			bodies[f.StreamID] += string(f.Data())
			if f.StreamEnded() {
				ended++
			}
		case *x2.MetaHeadersFrame:
			if f.StreamEnded() {
				ended++
			}
		case *x2.RSTStreamFrame, *x2.GoAwayFrame:
			return fmt.Errorf("upgraded connection: %v", f)
		}
	}
	for id, tag := range want {
		if bodies[id] != "done-"+tag+"-" {
			return fmt.Errorf("stream %d of %s: %q", id, tag, bodies[id])
		}
	}
	return nil
}

// TestRecordGRPCSampledCapped records the gRPC service of
// TestRecordGRPCService sampling about half of its calls, with a payload
// cap of 4 KiB and a masking rule: the sampled calls share the connection
// with unsampled ones and are still exactly their own, the server-streaming
// answer (70 000 bytes) is cut within the cap and marked truncated, yet
// parses, and the masked metadata is masked.
func TestRecordGRPCSampledCapped(t *testing.T) {
	store, err := recording.NewDirStore(t.TempDir())
	require.NoError(t, err)
	mask, err := recording.ParseMasker(strings.NewReader("header x-secret\n"), "test rules")
	require.NoError(t, err)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: *sampler(t, 0.5), MaxPayload: 4096, Mask: mask})
	require.NoError(t, err)
	rec, err := capture.New(capture.Config{Pipeline: pipe, App: "grpc"})
	require.NoError(t, err)
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
	require.NoError(t, err)
	defer func() {
		undo()
		require.NoError(t, rec.Close(context.Background()))
	}()
	down, _ := startChild(t, "echo")
	hc := newClient(64)
	defer hc.CloseIdleConnections()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := &grpctest.Service{OnCall: func(md metadata.MD) {
		if v := md.Get("x-trace"); len(v) > 0 {
			_ = echoGet(hc, down, v[0])
		}
	}}
	grpctest.ServeService(t, ln, svc)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	const clients = 64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		tag := "tg" + newReqID()[2:]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-secret", "s3cr3t")
			if _, err := grpctest.Exercise(ctx, cc, tag); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.NoError(t, cc.Close())
	require.Eventually(t, func() bool { return rec.Stats().Active == 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, rec.Flush(context.Background()))
	n, truncated := 0, 0
	require.NoError(t, store.Scan(context.Background(), func(s *recording.Session) error {
		if s.Inbound.Local != ln.Addr().String() {
			return nil
		}
		n++
		_, path := checkGRPCSession(t, s)
		req, _, err := http2.ParseMessage(s.Inbound.Request)
		require.NoError(t, err)
		v, _ := http2.Get(req.Header, "x-secret")
		require.Equal(t, "***", v, "session %s: x-secret masked", s.ID)
		require.LessOrEqual(t, len(s.Inbound.Response), 4096)
		if strings.HasSuffix(path, "/StreamingOutputCall") {
			require.True(t, s.Inbound.ResponseTruncated, "session %s", s.ID)
			truncated++
		}
		return nil
	}))
	st := rec.Stats()
	t.Logf("%d of %d calls recorded, %d server-streaming ones truncated; %+v", n, clients*5, truncated, st)
	require.Equal(t, st.Sampled, int64(n), "every sampled call recorded")
	require.Greater(t, n, clients*5/4, "about half the calls")
	require.Less(t, n, clients*5*3/4, "about half the calls")
	require.Positive(t, truncated)
}

// TestRecordGRPCCancelled: bidirectional calls the client cancels after
// their first answer, 32 at once on one connection beside calls that end
// normally: each cancelled call is a session with what was exchanged, its
// downstream call, and a note that the client reset the stream; the others
// are whole.
func TestRecordGRPCCancelled(t *testing.T) {
	rec, store := installRecorder(t, "grpc", *sampler(t, 1))
	down, _ := startChild(t, "echo")
	hc := newClient(64)
	defer hc.CloseIdleConnections()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := &grpctest.Service{OnCall: func(md metadata.MD) {
		if v := md.Get("x-trace"); len(v) > 0 {
			_ = echoGet(hc, down, v[0])
		}
	}}
	grpctest.ServeService(t, ln, svc)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for range n {
		tag := "tg" + newReqID()[2:]
		wg.Add(2)
		go func() { // cancelled after its first answer
			defer wg.Done()
			ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-trace", tag))
			defer cancel()
			bd, err := testpb.NewTestServiceClient(cc).FullDuplexCall(ctx)
			if err == nil {
				err = bd.Send(&testpb.StreamingOutputCallRequest{Payload: grpctest.Payload([]byte(tag), len(tag)), ResponseParameters: []*testpb.ResponseParameters{{Size: 40}}})
			}
			if err == nil {
				_, err = bd.Recv()
			}
			if err != nil {
				errs <- err
			}
			cancel()
		}()
		go func() {
			defer wg.Done()
			if _, err := testpb.NewTestServiceClient(cc).UnaryCall(metadata.AppendToOutgoingContext(context.Background(), "x-trace", tag),
				&testpb.SimpleRequest{ResponseSize: 10, Payload: grpctest.Payload([]byte(tag), len(tag))}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { return rec.Stats().Active == 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, rec.Flush(context.Background()))
	reset, whole := 0, 0
	require.NoError(t, store.Scan(context.Background(), func(s *recording.Session) error {
		if s.Inbound.Local != ln.Addr().String() {
			return nil
		}
		req, _, err := http2.ParseMessage(s.Inbound.Request)
		require.NoError(t, err)
		resp, _, err := http2.ParseMessage(s.Inbound.Response)
		require.NoError(t, err)
		tag, _ := http2.Get(req.Header, "x-trace")
		require.Len(t, s.Calls, 1, "session %s: its downstream call", s.ID)
		require.Contains(t, string(s.Calls[0].Request), "id="+tag+" ")
		path, _ := http2.Get(req.Header, ":path")
		if strings.HasSuffix(path, "/FullDuplexCall") {
			require.Contains(t, s.Inbound.TLS.Note, "reset by the client with CANCEL", "session %s", s.ID)
			msgs, _, err := wgrpc.Split(resp.Data, 0)
			require.NoError(t, err)
			require.Len(t, msgs, 1, "session %s: the answer the client had", s.ID)
			reset++
		} else {
			require.Empty(t, s.Inbound.TLS.Note)
			code, _ := http2.Get(resp.Trailer, "grpc-status")
			require.Equal(t, "0", code)
			whole++
		}
		return nil
	}))
	require.Equal(t, n, reset)
	require.Equal(t, n, whole)
}
