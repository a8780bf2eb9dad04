package hook_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
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
			CipherSuite: w.tls.CipherSuite, PeerCerts: 2}, *w.tls, "the server presents its certificate and the CA")
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
