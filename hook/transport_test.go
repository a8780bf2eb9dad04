package hook_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/trace"
)

// TestTransportCarriesOnlyPlainHTTP: a request made with a trace bound
// carries it in-band over plain HTTP (stripped before the wire, so the
// echoing server never sees it), and not at all over TLS, where it could
// not be stripped. The caller's request is never modified.
func TestTransportCarriesOnlyPlainHTTP(t *testing.T) {
	plain := httptest.NewServer(agenttest.EchoHandler())
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(agenttest.EchoHandler())
	defer tlsSrv.Close()
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
	for name, srv := range map[string]*httptest.Server{"plain": plain, "tls": tlsSrv} {
		before := hook.ReadStats()
		c := srv.Client()
		er, _ := get(c, srv.URL+"/x")
		require.Empty(t, er.Headers.Values(hook.TraceHeader), name)
		carried := hook.ReadStats().CarriedRequests - before.CarriedRequests
		if name == "plain" {
			require.Equal(t, int64(1), carried, name)
		} else {
			require.Zero(t, carried, name)
		}
		c.CloseIdleConnections()
	}
}
