package e2e_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
)

// TestHTTPSH2RecordedByTheAgent: an HTTP service whose requests each call
// an HTTPS downstream that negotiates h2 (a ForceAttemptHTTP2 transport,
// as http.DefaultTransport is), 32 requests at once sharing one HTTP/2
// connection, is recorded by the agent: each stream is one http2 call of
// its own request's session. Then, the downstream stopped, the same
// requests replayed in replay mode against a running mock loaded with
// those sessions: the client negotiates h2 with the agent as it was
// recorded, each stream carries its trace in-band and is answered from its
// own session.
func TestHTTPSH2RecordedByTheAgent(t *testing.T) {
	const n = 32
	down := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "not HTTP/2", http.StatusHTTPVersionNotSupported)
			return
		}
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "retrace-") {
				http.Error(w, "saw "+k, http.StatusBadRequest)
				return
			}
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "price of %s: %d", r.URL.Path, 7*len(b))
	}))
	down.EnableHTTP2 = true
	down.StartTLS()
	pool := down.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	dst := down.Listener.Addr().String()

	newTransport := func() *http.Transport {
		return &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	handler := func(tr *http.Transport) http.Handler {
		hc := &http.Client{Transport: tr, Timeout: 20 * time.Second}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tag := r.URL.Query().Get("tag")
			resp, err := hc.Post("https://"+dst+"/items/"+tag, "text/plain", strings.NewReader(strings.Repeat("x", len(tag)*3)))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			fmt.Fprintf(w, "%s %d %s", resp.Proto, resp.StatusCode, b)
		})
	}

	rec, store := newRecorder(t)
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport()
	front := serveHandler(t, handler(tr))
	// one request first, so that the others share its connection
	want := map[string]string{"warm": warmCall(t, front, "")}
	for tag, v := range frontCalls(t, front, n, nil) {
		want[tag] = v
	}
	tr.CloseIdleConnections()
	undo()
	if err := rec.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	down.Close()
	for tag, v := range want {
		if !strings.HasPrefix(v, "HTTP/2.0 200 price of /items/"+tag) {
			t.Fatalf("%s recorded as %q", tag, v)
		}
	}

	var sessions []*recording.Session
	ids := map[string]string{}
	err = store.Scan(context.Background(), func(s *recording.Session) error {
		if s.Background || s.Inbound.Proto != recording.ProtoHTTP {
			return nil
		}
		tag := tagOf(string(s.Inbound.Request))
		if len(s.Calls) != 1 || s.Calls[0].Proto != "http2" || !s.Calls[0].TLS.On || s.Calls[0].TLS.ALPN != "h2" {
			t.Fatalf("%s: calls %+v", tag, s.Calls)
		}
		if !strings.Contains(string(s.Calls[0].Request), ":path: /items/"+tag+"\r\n") {
			t.Fatalf("%s: its call is another request's: %q", tag, s.Calls[0].Request)
		}
		ids[tag] = s.ID
		sessions = append(sessions, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != n+1 {
		t.Fatalf("%d sessions recorded", len(sessions))
	}

	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	undo, err = hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{strings.TrimPrefix(srv.AdminURL(), "http://"), sl.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer undo()
	tr2 := newTransport()
	defer tr2.CloseIdleConnections()
	hs := &http.Server{Handler: handler(tr2)}
	go func() { _ = hs.Serve(sl) }()
	defer hs.Close()
	got := map[string]string{"warm": warmCall(t, sl.Addr().String(), ids["warm"])}
	for tag, v := range frontCalls(t, sl.Addr().String(), n, ids) {
		got[tag] = v
	}
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
		}
	}
	for _, s := range sessions {
		r := traceReport(t, srv, s.ID)
		if len(r.Unused) != 0 || len(r.Calls) != len(s.Calls) {
			t.Errorf("%s: %d calls observed of %d, %d recorded calls unused", s.ID, len(r.Calls), len(s.Calls), len(r.Unused))
		}
	}
}

// warmCall sends /call?tag=warm, with Retrace-Trace-Id id when not
// empty, and returns its answer.
func warmCall(t *testing.T, addr, id string) string {
	rc, err := agenttest.DialRaw(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var hdr []string
	if id != "" {
		hdr = append(hdr, hook.TraceHeader+": "+id)
	}
	code, body, err := rc.Get("/call?tag=warm", hdr...)
	if err != nil || code != http.StatusOK {
		t.Fatalf("warm: %d %s %v", code, body, err)
	}
	return string(body)
}

func serveHandler(t *testing.T, h http.Handler) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	return l.Addr().String()
}
