package regress_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
)

// h2cServer serves net/http over h2c with prior knowledge on l: a JSON
// answer that echoes the request's x-id header and body, with the
// version field v.
func h2cServer(t *testing.T, l net.Listener, v string) {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Id", r.Header.Get("X-Id"))
		fmt.Fprintf(w, `{"id":%q,"echo":%q,"v":%q,"items":[1,2,3]}`, r.Header.Get("X-Id"), b, v)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

// TestReplayH2CSessions: sessions of net/http's HTTP/2 server (h2c with
// prior knowledge) recorded from its connections, 32 at once over shared
// connections, replayed by the runner: the same server passes, one whose
// answer changed fails at the JSON field's path.
func TestReplayH2CSessions(t *testing.T) {
	rec := replaytest.NewH2Recorder(listen(t))
	h2cServer(t, rec, "1")
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &p}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", "http://"+rec.Addr().String()+fmt.Sprintf("/orders/%d?x=1", i), strings.NewReader(fmt.Sprintf("order %d", i)))
			req.Header.Set("X-Id", fmt.Sprintf("h%02d", i))
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	sessions := rec.Sessions(t, "x-id")
	if len(sessions) != 32 || sessions[0].Inbound.Proto != "http2" {
		t.Fatalf("recorded %d sessions (%+v)", len(sessions), sessions[0].Inbound.Proto)
	}
	target := func(v string) string {
		l := listen(t)
		h2cServer(t, l, v)
		return "http://" + l.Addr().String()
	}
	run := func(url string) *collected {
		return replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: url, Concurrency: 16})
	}
	c := run(target("1"))
	if n := len(c.byStatus(regress.Passed)); n != 32 {
		t.Fatalf("same server: %d passed: %+v", n, c.results[0])
	}
	if c.results[0].API != "POST /orders/{id}" {
		t.Errorf("API %q", c.results[0].API)
	}
	c = run(target("2"))
	for _, r := range c.results {
		if r.Status != regress.Failed || len(r.Findings) != 1 || r.Findings[0].Path != "body.v" || r.Findings[0].Want != `"1"` || r.Findings[0].Got != `"2"` {
			t.Errorf("%s: %s %v", r.Session, r.Status, r.Findings)
		}
	}
}
