package hook_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/trace"
)

// TestTransportCarriesInBand: in record mode a request made with a trace
// bound carries it in-band over HTTP/1, plain or over TLS (stripped before
// the wire), and over HTTP/2 negotiated through ALPN (removed from the
// stream's header block by the write hook's rewriter): the echoing server
// never sees it. The caller's request is never modified.
func TestTransportCarriesInBand(t *testing.T) {
	plain := httptest.NewServer(agenttest.EchoHandler())
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(agenttest.EchoHandler())
	defer tlsSrv.Close()
	h2Srv := httptest.NewUnstartedServer(agenttest.EchoHandler())
	h2Srv.EnableHTTP2 = true
	h2Srv.StartTLS()
	defer h2Srv.Close()
	install(t, hook.Config{Mode: hook.Record, Recorder: &testRecorder{}, Logger: discardLogger()})

	get := func(c *http.Client, url string) (agenttest.EchoReply, *http.Response) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var er agenttest.EchoReply
		require.NoError(t, json.Unmarshal(body, &er))
		require.Empty(t, req.Header, "the caller's request was modified")
		require.Same(t, req, resp.Request, "the response names a request the caller never made")
		return er, resp
	}
	release := trace.Bind(&trace.Trace{ID: agenttest.NewID()})
	defer release()
	for name, srv := range map[string]*httptest.Server{"plain": plain, "tls": tlsSrv, "h2": h2Srv} {
		before := hook.ReadStats()
		c := srv.Client()
		er, _ := get(c, srv.URL+"/x")
		require.Empty(t, er.Headers.Values(hook.TraceHeader), name)
		carried := hook.ReadStats().CarriedRequests - before.CarriedRequests
		require.Equal(t, int64(1), carried, name)
		if name == "h2" {
			require.Equal(t, int64(1), hook.ReadStats().H2Outbound-before.H2Outbound, "h2 rewritten")
		}
		c.CloseIdleConnections()
	}
}

// TestConnectionGoroutinesInheritNoTrace: a connection that a traced
// request dials is written by net/http's writeLoop, a goroutine the round
// trip started; another request's write on it, with no trace, is not
// charged to the first request's trace, even while that trace is still
// bound: record mode does not report it at all, nor its response.
func TestConnectionGoroutinesInheritNoTrace(t *testing.T) {
	srv := httptest.NewServer(agenttest.EchoHandler())
	defer srv.Close()
	rec := &writeRecorder{dst: srv.Listener.Addr().String()}
	install(t, hook.Config{Mode: hook.Record, Recorder: rec, Logger: discardLogger()})
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	get := func(path string) {
		t.Helper()
		resp, err := c.Get(srv.URL + path)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	start, done := make(chan struct{}), make(chan struct{})
	go func() { // started before the Bind below: no trace
		defer close(done)
		<-start
		get("/untraced")
	}()
	id := agenttest.NewID()
	release := trace.Bind(&trace.Trace{ID: id})
	get("/traced") // dials the connection
	close(start)
	<-done
	release()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.writes, 1, "one connection")
	for _, ws := range rec.writes {
		var paths []string
		for _, w := range ws {
			require.Equal(t, id, w.tid, "%q: only the traced request is reported, with its trace", w.p)
			paths = append(paths, strings.SplitN(string(w.p), "\r\n", 2)[0])
		}
		require.Equal(t, []string{"GET /traced HTTP/1.1"}, paths)
	}
	require.Contains(t, string(rec.read), `"path":"/traced"`, "the traced response is reported")
	require.NotContains(t, string(rec.read), "/untraced", "the untraced response is not")
}
