package trace

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// stripRelay accepts client connections on a loopback listener and relays
// each to target, passing the client's bytes through an InboundParser in
// reads of at most readSize bytes, as the agent's Read hook would. It
// records every request head it sees.
type stripRelay struct {
	ln       net.Listener
	target   string
	readSize int

	mu    sync.Mutex
	heads []RequestHead
	wg    sync.WaitGroup
}

func startStripRelay(t *testing.T, target string, readSize int) *stripRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &stripRelay{ln: ln, target: target, readSize: readSize}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		ln.Close()
		r.wg.Wait()
	})
	return r
}

func (r *stripRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.wg.Add(2)
		go func() { // server → client, untouched
			defer r.wg.Done()
			_, _ = io.Copy(c, s)
			c.Close()
		}()
		go func() { // client → parser → server
			defer r.wg.Done()
			defer s.(*net.TCPConn).CloseWrite()
			var p InboundParser
			buf := make([]byte, r.readSize)
			var out []byte
			for {
				n, err := c.Read(buf)
				out = p.Feed(out[:0], buf[:n], func(h RequestHead, _ int) {
					r.mu.Lock()
					r.heads = append(r.heads, h)
					r.mu.Unlock()
				})
				if _, werr := s.Write(out); werr != nil || err != nil {
					return
				}
			}
		}()
	}
}

// TestInboundParserBehindRealServer sends keep-alive requests with Retrace
// headers and bodies (Content-Length and chunked, some holding header-like
// text) from net/http's client through the parser to net/http's server:
// the handler must never see a Retrace-* header and must read every body
// intact, and the parser must report every request with its own trace id.
func TestInboundParserBehindRealServer(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "retrace-") {
				http.Error(w, "saw "+k, http.StatusTeapot)
				return
			}
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(body)
		fmt.Fprintf(w, "%s %s", r.URL.Path, hex.EncodeToString(sum[:]))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	for _, readSize := range []int{1, 3, 7, 64, 4096} {
		t.Run(fmt.Sprintf("reads of %d bytes", readSize), func(t *testing.T) {
			relay := startStripRelay(t, ln.Addr().String(), readSize)
			tr := &http.Transport{MaxConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			const n = 12
			for i := range n {
				body := strings.Repeat(fmt.Sprintf("Retrace-Trace-Id: body-%d\r\n", i), i)
				var rd io.Reader = strings.NewReader(body)
				if i%2 == 1 {
					rd = io.MultiReader(rd) // unknown length: chunked
				}
				req, err := http.NewRequest(http.MethodPost, "http://"+relay.ln.Addr().String()+fmt.Sprintf("/r%d", i), rd)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Retrace-Trace-Id", fmt.Sprintf("trace-%d", i))
				req.Header.Set("Retrace-Replay-Time", "1764411323000000000")
				req.Header.Set("retrace-anything", "x")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				sum := sha256.Sum256([]byte(body))
				if want := fmt.Sprintf("/r%d %s", i, hex.EncodeToString(sum[:])); resp.StatusCode != 200 || string(got) != want {
					t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, got, want)
				}
			}
			relay.mu.Lock()
			defer relay.mu.Unlock()
			if len(relay.heads) != n {
				t.Fatalf("parser saw %d requests, want %d", len(relay.heads), n)
			}
			for i, h := range relay.heads {
				if h.TraceID != fmt.Sprintf("trace-%d", i) || h.ReplayTime.UnixNano() != 1764411323000000000 ||
					h.Method != "POST" || h.Path != fmt.Sprintf("/r%d", i) || h.Stripped != 3 {
					t.Errorf("request %d: head %+v", i, h)
				}
			}
		})
	}
}
