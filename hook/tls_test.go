package hook_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/internal/certtest"
	"github.com/retrace-dev/retrace/trace"
)

// TestTLSFailsOpen: with every TLS hook panicking, or the recorder behind
// them, a service serving HTTPS and calling an HTTPS downstream keeps
// serving every request, and the panics are counted.
func TestTLSFailsOpen(t *testing.T) {
	for name, panics := range map[string]func(t *testing.T) hook.Recorder{
		"hook":     func(t *testing.T) hook.Recorder { hook.ForceTLSPanic(t); return &testRecorder{} },
		"recorder": func(t *testing.T) hook.Recorder { return &testRecorder{panics: true} },
	} {
		t.Run(name, func(t *testing.T) {
			ca := certtest.New(t)
			down := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, "down:"+r.URL.Query().Get("i"))
			}))
			down.TLS = ca.ServerConfig(t)
			down.StartTLS()
			defer down.Close()
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}
			defer hc.CloseIdleConnections()
			svc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				resp, err := hc.Get(down.URL + "/?i=" + r.URL.Query().Get("i"))
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				defer resp.Body.Close()
				io.Copy(w, resp.Body)
			}))
			svc.TLS = ca.ServerConfig(t)
			svc.StartTLS()
			defer svc.Close()
			before := hook.ReadStats().Failures
			install(t, hook.Config{Mode: hook.Record, Recorder: panics(t), Logger: discardLogger()})
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}
			defer client.CloseIdleConnections()
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for i := range 32 {
				wg.Go(func() {
					resp, err := client.Get(fmt.Sprintf("%s/?i=%d", svc.URL, i))
					if err != nil {
						errs <- err
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if string(b) != fmt.Sprintf("down:%d", i) {
						errs <- fmt.Errorf("request %d: %q", i, b)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			require.Greater(t, hook.ReadStats().Failures, before, "no panic was caught")
		})
	}
}

// TestTLSInfoReported: a TLS connection's handshake is
// reported with what it negotiated, its plaintext under its own ConnInfo,
// and nothing of the TCP connection under it.
func TestTLSInfoReported(t *testing.T) {
	ca := certtest.New(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	srv.TLS = ca.ServerConfig(t)
	srv.TLS.NextProtos = []string{"http/1.1"}
	srv.StartTLS()
	defer srv.Close()
	rec := &tlsRecorder{}
	install(t, hook.Config{Mode: hook.Record, Recorder: rec, Logger: discardLogger()})
	cfg := ca.ClientConfig()
	cfg.NextProtos = []string{"http/1.1"}
	cfg.ServerName = "localhost"
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	defer c.CloseIdleConnections()
	release := trace.Bind(&trace.Trace{ID: "rt00000000000000aa"})
	resp, err := c.Get(srv.URL)
	release()
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// (writes of no trace may be an earlier test's: net/http finishes a
	// dial it no longer needs in the background, and puts it in its pool)
	var mine int
	for _, w := range rec.writes {
		if w.tid != "rt00000000000000aa" {
			continue
		}
		mine++
		require.NotNil(t, w.tls, "outbound bytes reported without TLS: %q", w.p)
		require.Equal(t, hook.TLSInfo{ServerName: "localhost", ALPN: "http/1.1", Version: tls.VersionTLS13,
			CipherSuite: w.tls.CipherSuite, Curve: tls.X25519MLKEM768, PeerCerts: 2}, *w.tls, "the server presents its certificate and the CA")
		require.Contains(t, w.p, "GET / HTTP/1.1")
	}
	require.NotZero(t, mine, "no outbound plaintext reported")
}

type tlsWrite struct {
	tid string
	p   string
	tls *hook.TLSInfo
}

// tlsRecorder keeps the outbound writes with their connection's TLS.
type tlsRecorder struct {
	mu     sync.Mutex
	writes []tlsWrite
}

func (r *tlsRecorder) StartRequest(*hook.ConnInfo, trace.RequestHead) string { return "" }
func (r *tlsRecorder) InboundRead(*hook.ConnInfo, string, []byte)            {}
func (r *tlsRecorder) InboundWrite(*hook.ConnInfo, string, []byte)           {}
func (r *tlsRecorder) OutboundRead(*hook.ConnInfo, []byte)                   {}
func (r *tlsRecorder) Closed(*hook.ConnInfo)                                 {}
func (r *tlsRecorder) OutboundWrite(c *hook.ConnInfo, tid string, p []byte) {
	r.mu.Lock()
	r.writes = append(r.writes, tlsWrite{tid: tid, p: string(p), tls: c.TLS.Load()})
	r.mu.Unlock()
}

// tlsInbound keeps the TLS of the accepted connections whose requests it
// saw, and traces each request.
type tlsInbound struct {
	tlsRecorder
	in []*hook.TLSInfo
}

func (r *tlsInbound) StartRequest(c *hook.ConnInfo, _ trace.RequestHead) string {
	r.mu.Lock()
	r.in = append(r.in, c.TLS.Load())
	r.mu.Unlock()
	return agenttest.NewID()
}

// TestTLSMutualResumedAndH2: a server's client certificates (mTLS) and a
// resumed session are reported; a connection that negotiates h2 is
// logged once as not decoded.
func TestTLSMutualResumedAndH2(t *testing.T) {
	ca := certtest.New(t)
	srvCfg := ca.ServerConfig(t)
	srvCfg.ClientAuth, srvCfg.ClientCAs = tls.RequireAndVerifyClientCert, ca.Pool()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}))
	srv.TLS = srvCfg
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	var logs logBuffer
	rec := &tlsInbound{}
	install(t, hook.Config{Mode: hook.Record, Recorder: rec, Logger: logs.logger()})
	clientCert, err := ca.Leaf("client")
	require.NoError(t, err)
	get := func(cfg *tls.Config, h2 bool) string {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(srv.URL)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	cfg := ca.ClientConfig()
	cfg.Certificates = []tls.Certificate{clientCert}
	cfg.NextProtos = []string{"http/1.1"}
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	require.Equal(t, "HTTP/1.1", get(cfg, false))
	require.Equal(t, "HTTP/1.1", get(cfg, false)) // resumes the first session
	rec.mu.Lock()
	require.Len(t, rec.in, 2)
	require.NotNil(t, rec.in[0])
	require.Equal(t, 2, rec.in[0].PeerCerts, "the client's certificate and its CA")
	require.False(t, rec.in[0].Resumed)
	require.True(t, rec.in[1].Resumed, "the second connection resumed the session: %+v", rec.in[1])
	rec.mu.Unlock()
	cfg = cfg.Clone()
	cfg.NextProtos = nil
	require.Equal(t, "HTTP/2.0", get(cfg, true))
	require.NotContains(t, logs.String(), "outbound HTTP/2", "the client's HTTP/2 rewritten without a failure")
}

// wrapped is a net.Conn the hooks do not patch, around one they do.
type wrapped struct{ net.Conn }

// TestTLSOverWrappedConn: a TLS connection over a net.Conn of the
// application's own (a dialer that wraps its connections) is followed in
// plaintext too, so the in-band trace of an HTTPS request is stripped
// before it reaches the server and charged to its request.
func TestTLSOverWrappedConn(t *testing.T) {
	ca := certtest.New(t)
	srv := httptest.NewUnstartedServer(agenttest.EchoHandler())
	srv.TLS = ca.ServerConfig(t)
	srv.StartTLS()
	defer srv.Close()
	rec := &tlsRecorder{}
	install(t, hook.Config{Mode: hook.Record, Recorder: rec, Logger: discardLogger()})
	d := &net.Dialer{}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wrapped{nc}, nil
		}}}
	defer c.CloseIdleConnections()
	const tid = "rt00000000000000bb"
	release := trace.Bind(&trace.Trace{ID: tid})
	resp, err := c.Get(srv.URL + "/x")
	release()
	require.NoError(t, err)
	var er agenttest.EchoReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&er))
	resp.Body.Close()
	require.Empty(t, er.Headers.Values(hook.TraceHeader), "the in-band trace reached the server")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var mine int
	for _, w := range rec.writes {
		if w.tid == tid && strings.Contains(w.p, "GET /x HTTP/1.1") {
			mine++
			require.NotContains(t, w.p, hook.TraceHeader)
		}
	}
	require.Equal(t, 1, mine, "the request's plaintext, charged to its trace")
}

// TestReplayTLSWriteFirst: a redirected TLS client that never calls
// Handshake — it writes first, as crypto/tls lets it — gets its handshake
// completed by its first Write, as crypto/tls would: ConnectionState says
// so, with a plausible state when the mock has no recorded one (the
// agenttest mock keeps none) and the server name crypto/tls sends; the
// mock was asked, and exporting keying material fails rather than panics.
func TestReplayTLSWriteFirst(t *testing.T) {
	line := agenttest.NewLineServer(t)
	mock := agenttest.NewMock(t, map[string]agenttest.Proto{line.Addr: agenttest.ProtoLine})
	install(t, hook.Config{Mode: hook.Replay, MockAddr: mock.Addr, NoClock: true, Logger: discardLogger()})
	before := hook.ReadStats()
	nc, err := net.Dial("tcp", line.Addr)
	require.NoError(t, err)
	tc := tls.Client(nc, &tls.Config{ServerName: "line.internal.", NextProtos: []string{"x-line"}})
	defer tc.Close()
	defer trace.Bind(&trace.Trace{ID: "rt00000000000000wf"})()
	require.False(t, tc.ConnectionState().HandshakeComplete)
	_, err = fmt.Fprintf(tc, "GET rt00000000000000wf\n")
	require.NoError(t, err)
	buf := make([]byte, 256)
	n, err := tc.Read(buf)
	require.NoError(t, err)
	require.Equal(t, agenttest.LineReply("GET rt00000000000000wf\n"), string(buf[:n]))
	cs := tc.ConnectionState()
	require.True(t, cs.HandshakeComplete)
	require.Equal(t, uint16(tls.VersionTLS13), cs.Version)
	require.Equal(t, tls.TLS_AES_128_GCM_SHA256, cs.CipherSuite)
	require.Equal(t, tls.X25519MLKEM768, cs.CurveID)
	require.Equal(t, "line.internal", cs.ServerName, "the name crypto/tls sends: no trailing dot")
	require.Empty(t, cs.NegotiatedProtocol, "neither http/1.1 nor h2 offered")
	require.Empty(t, cs.PeerCertificates)
	_, err = cs.ExportKeyingMaterial("label", nil, 16)
	require.Error(t, err)
	after := hook.ReadStats()
	require.Equal(t, before.TLSHandshakes+1, after.TLSHandshakes)
	require.Equal(t, before.TLSRecorded, after.TLSRecorded, "the agenttest mock has no recorded state")
	st := mock.Stats()
	require.Empty(t, st.Errors)
	require.Equal(t, 2, st.Conns, "the line connection and the agent's question")
}
