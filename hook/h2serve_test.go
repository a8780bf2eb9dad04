//lint:file-ignore SA1019 x/net/http2/h2c is what services serving h2c by Upgrade (and older h2c services) use: the agent hooks its server, the test serves through it
package hook_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/trace"
)

// TestReplayNetHTTPH2Handlers: in replay mode, net/http's HTTP/2 server
// (h2c with prior knowledge, served natively and by x/net's h2c handler)
// runs every stream's handler, and a goroutine it starts, in the trace its
// retrace-trace-id named, 64 traces at once on one connection, and never
// lets the handler see a Retrace-* header; a request of no trace runs in
// none. net/http starts handlers from its serve loop, not from the
// goroutine that read the stream: the agent's serverConnBaseContext hook
// binds them.
func TestReplayNetHTTPH2Handlers(t *testing.T) {
	for _, kind := range []string{"native", "x/net"} {
		t.Run(strings.ReplaceAll(kind, "/", ""), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			got := map[string][2]string{}
			var leaked []string
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k := range r.Header {
					if strings.HasPrefix(strings.ToLower(k), "retrace-") {
						mu.Lock()
						leaked = append(leaked, k)
						mu.Unlock()
					}
				}
				s := [2]string{trace.CurrentID()}
				done := make(chan struct{})
				go func() {
					defer close(done)
					s[1] = trace.CurrentID()
				}()
				<-done
				mu.Lock()
				got[r.URL.Query().Get("tag")] = s
				mu.Unlock()
				_, _ = io.WriteString(w, "ok")
			})
			install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:1", Passthrough: []string{l.Addr().String()}, NoClock: true})
			srv := &http.Server{Handler: h}
			if kind == "native" {
				var p http.Protocols
				p.SetUnencryptedHTTP2(true)
				srv.Protocols = &p
			} else {
				srv.Handler = h2c.NewHandler(h, &http2.Server{})
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = srv.Serve(l)
			}()
			defer func() {
				_ = srv.Close()
				<-done
			}()
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			tr := &http.Transport{Protocols: &p, MaxConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			get := func(tag string) {
				resp, err := c.Get("http://" + l.Addr().String() + "/?tag=" + tag)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Errorf("%s: %s", tag, resp.Proto)
				}
			}
			get("untraced")
			const n = 64
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tag := fmt.Sprintf("%032x", i+1)
					defer trace.Bind(&trace.Trace{ID: tag})()
					get(tag)
				}()
			}
			wg.Wait()
			get("untraced2")
			mu.Lock()
			defer mu.Unlock()
			if len(leaked) > 0 {
				t.Fatalf("handlers saw %v", leaked)
			}
			if len(got) != n+2 {
				t.Fatalf("%d tags seen", len(got))
			}
			for tag, s := range got {
				want := tag
				if strings.HasPrefix(tag, "untraced") {
					want = ""
				}
				if s[0] != want || s[1] != want {
					t.Fatalf("the request of %s ran in trace %q, its child in %q", tag, s[0], s[1])
				}
			}
		})
	}
}
