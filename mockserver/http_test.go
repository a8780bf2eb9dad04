package mockserver_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
)

// downstream is a real HTTP server whose every answer carries a fresh random
// value, so an answer replayed from the wrong recording is detected.
func downstream(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"nonce":%q}`, r.PathValue("id"), randHex(6))
	})
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		fmt.Fprintf(w, `{"order":%s,"nonce":%q}`, b, randHex(6))
	})
	mux.HandleFunc("GET /stream/{id}", func(w http.ResponseWriter, r *http.Request) {
		// chunked and gzip-encoded
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		for i := range 3 {
			fmt.Fprintf(zw, "part %d of %s %s\n", i, r.PathValue("id"), randHex(4))
			zw.Flush()
			w.(http.Flusher).Flush()
		}
		zw.Close()
	})
	mux.HandleFunc("PUT /upload/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "stored %d bytes for %s (%s)", len(b), r.PathValue("id"), randHex(4))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func httpClient(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial,
		ExpectContinueTimeout: 5 * time.Second, MaxIdleConnsPerHost: 2}}
}

// httpWork is what one replayed request does with an HTTP downstream, on one
// keep-alive connection: a GET, a gzip-encoded JSON POST, a chunked gzip
// response and a PUT that waits for 100 Continue.
func httpWork(c *http.Client, base string, i int) (string, error) {
	var out []string
	do := func(req *http.Request) error {
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s %s: %s %s %s", req.Method, req.URL.Path, resp.Status, resp.Header.Get("X-Retrace-Missing"), b)
		}
		out = append(out, string(b))
		return nil
	}
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/items/%d", base, i), nil)
	if err := do(req); err != nil {
		return "", err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	fmt.Fprintf(zw, `{"item":%d,"qty":%d}`, i, i%7)
	zw.Close()
	req, _ = http.NewRequest("POST", base+"/orders", bytes.NewReader(gz.Bytes()))
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Content-Type", "application/json")
	if err := do(req); err != nil {
		return "", err
	}
	req, _ = http.NewRequest("GET", fmt.Sprintf("%s/stream/%d", base, i), nil)
	if err := do(req); err != nil {
		return "", err
	}
	req, _ = http.NewRequest("PUT", fmt.Sprintf("%s/upload/%d", base, i), strings.NewReader(strings.Repeat("x", 100+i)))
	req.Header.Set("Expect", "100-continue")
	if err := do(req); err != nil {
		return "", err
	}
	return strings.Join(out, "|"), nil
}

func TestHTTP128ConcurrentTraces(t *testing.T) {
	ds := downstream(t)
	dst := ds.Listener.Addr().String()
	tag := randHex(4)
	rec := mocktest.NewRecorder()
	run := func(client func(tid string) *http.Client, got []string) {
		var wg sync.WaitGroup
		for i := range traces {
			wg.Go(func() {
				c := client(fmt.Sprintf("http-%d-%s", i, tag))
				defer c.CloseIdleConnections()
				s, err := httpWork(c, "http://"+dst, i)
				if err != nil {
					s = "error: " + err.Error()
				}
				got[i] = s
			})
		}
		wg.Wait()
	}
	want := make([]string, traces)
	run(func(tid string) *http.Client { return httpClient(rec.Dialer("http", tid)) }, want)
	for i, w := range want {
		if !strings.Contains(w, fmt.Sprintf(`"id":"%d"`, i)) || !strings.Contains(w, fmt.Sprintf("stored %d bytes", 100+i)) {
			t.Fatalf("recording trace %d: %s", i, w)
		}
	}
	sessions := rec.Sessions()
	if len(sessions) != traces {
		t.Fatalf("recorded %d sessions, want %d", len(sessions), traces)
	}
	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	ds.Close() // no real downstream at replay time
	got := make([]string, traces)
	run(func(tid string) *http.Client {
		d := &mocktest.Dialer{Mock: srv.Addr(), TID: tid}
		return httpClient(d.DialContext)
	}, got)
	for i := range traces {
		if got[i] != want[i] {
			t.Errorf("trace %d: replay got %q, recorded %q", i, got[i], want[i])
		}
	}
	for i := range traces {
		r := report(t, srv, fmt.Sprintf("http-%d-%s", i, tag))
		if m := missesOf(r); len(m) > 0 {
			t.Errorf("trace %d: missing mocks: %+v", i, m)
		}
		if len(r.Calls) != 4 || len(r.Unused) != 0 {
			t.Errorf("trace %d: %d calls observed, %d unused; want 4 and 0", i, len(r.Calls), len(r.Unused))
		}
	}
}
