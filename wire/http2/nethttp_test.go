//lint:file-ignore SA1019 x/net/http2/h2c is the one real server that still switches to HTTP/2 by Upgrade (net/http does not), the peer TestH2CUpgrade needs

package http2_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	xhttp2 "golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/retrace-dev/retrace/wire/http2"
)

// echoHandler answers a request with its method, path, x-trace header and
// body, and a trailer.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Trailer", "X-Sum")
	w.Header().Set("X-Trace", r.Header.Get("X-Trace"))
	fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.Path, r.Header.Get("X-Trace"), body)
	w.Header().Set("X-Sum", fmt.Sprint(len(body)))
}

func h2cTransport() *http.Transport {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return tr
}

// doH2C makes n concurrent requests over the client and checks answers.
func doH2C(t *testing.T, c *http.Client, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		do := func() {
			defer wg.Done()
			tag := fmt.Sprintf("h2c-%02d", i)
			body := strings.Repeat(tag, i*500)
			req, _ := http.NewRequest(http.MethodPost, url+"/echo/"+tag, strings.NewReader(body))
			req.Header.Set("X-Trace", tag)
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || string(got) != fmt.Sprintf("POST /echo/%s %s %s", tag, tag, body) || resp.Trailer.Get("X-Sum") != fmt.Sprint(len(body)) {
				t.Errorf("%s: %s %q trailer %v", tag, resp.Proto, got, resp.Trailer)
			}
		}
		if i == 0 {
			do() // the connection, before the others share it
		} else {
			go do()
		}
	}
	wg.Wait()
}

// TestNetHTTPH2C records net/http's HTTP/2 client against net/http's
// server over h2c with prior knowledge, checks the exchanges, and replays
// them to the same client from a ServerConn.
func TestNetHTTPH2C(t *testing.T) {
	l := listenTap(t)
	srv := &http.Server{Handler: http.HandlerFunc(echoHandler), Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(l) }()
	tr := h2cTransport()
	const n = 12
	doH2C(t, &http.Client{Transport: tr}, "http://"+l.Addr().String(), n)
	tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	// net/http's client may dial a second connection while the first is
	// still settling (seen under -race on a loaded machine): the streams
	// of every connection are the exchanges
	taps := l.taps()
	if len(taps) == 0 {
		t.Fatal("no connection")
	}
	var xs []*http2.Exchange
	for i, tp := range taps {
		xs = append(xs, feedLog(t, tp.chunks(), rand.New(rand.NewPCG(1, uint64(2+i))), 300)...)
	}
	if len(xs) != n {
		t.Fatalf("%d exchanges, want %d", len(xs), n)
	}
	for _, x := range xs {
		tag, _ := http2.Get(x.Request.Header, "x-trace")
		if x.Unfinished != "" || x.Method() != "POST" || x.Path() != "/echo/"+tag || x.Status() != "200" {
			t.Fatalf("stream %d: %+v", x.StreamID, x)
		}
		if !strings.HasSuffix(string(x.Response.Data), string(x.Request.Data)) {
			t.Fatalf("stream %d: response %q does not end with the request's body", x.StreamID, x.Response.Data)
		}
		if v, _ := http2.Get(x.Response.Trailer, "x-sum"); v != fmt.Sprint(len(x.Request.Data)) {
			t.Fatalf("stream %d: trailer %v", x.StreamID, x.Response.Trailer)
		}
	}
	p := newPlayer(xs)
	addr := mockListener(t, p, http2.ServerConfig{Window: 65535})
	tr2 := h2cTransport()
	defer tr2.CloseIdleConnections()
	doH2C(t, &http.Client{Transport: tr2}, "http://"+addr, n)
	tr2.CloseIdleConnections()
}

// TestH2CUpgrade follows a connection that switches to HTTP/2 by Upgrade
// (x/net's h2c server): the upgraded request is stream 1.
func TestH2CUpgrade(t *testing.T) {
	l := listenTap(t)
	srv := &http.Server{Handler: h2c.NewHandler(http.HandlerFunc(echoHandler), &xhttp2.Server{})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "GET /up HTTP/1.1\r\nHost: example\r\nX-Trace: up-1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"
	var pre bytes.Buffer
	pre.WriteString(http2.ClientPreface)
	fw := xhttp2.NewFramer(&pre, nil)
	_ = fw.WriteSettings()
	_ = fw.WriteSettingsAck()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if _, err := c.Write(pre.Bytes()); err != nil {
		t.Fatal(err)
	}
	// Read until stream 1's response ends.
	rd := http2.NewReader(http2.Server, http2.Limits{})
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for ended := false; !ended; {
		n, err := br.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		rd.Feed(buf[:n])
		for {
			f, err := rd.Next()
			if err != nil {
				t.Fatal(err)
			}
			if f == nil {
				break
			}
			ended = ended || (f.StreamID == 1 && f.EndStream)
		}
	}
	c.Close()
	time.Sleep(20 * time.Millisecond)
	client, server := l.taps()[0].bytes()

	end := bytes.Index(client, []byte("\r\n\r\n")) + 4
	req, ok, err := http2.UpgradeRequest(client[:end])
	if err != nil || !ok {
		t.Fatalf("UpgradeRequest: %v %v", ok, err)
	}
	n := http2.SwitchingProtocols(server)
	if n <= 0 {
		t.Fatalf("SwitchingProtocols: %d", n)
	}
	conn := http2.Upgraded(http2.Limits{}, req)
	if err := conn.Client(client[end:]); err != nil {
		t.Fatal(err)
	}
	if err := conn.Server(server[n:]); err != nil {
		t.Fatal(err)
	}
	xs := conn.Exchanges()
	if len(xs) != 1 || xs[0].StreamID != 1 || xs[0].Path() != "/up" || xs[0].Status() != "200" ||
		string(xs[0].Response.Data) != "GET /up up-1 " {
		t.Fatalf("exchanges %+v", xs)
	}
	if v, _ := http2.Get(xs[0].Request.Header, "x-trace"); v != "up-1" {
		t.Fatalf("request header %v", xs[0].Request.Header)
	}
	if http2.SwitchingProtocols([]byte("HTTP/1.1 200 OK\r\n")) != -1 || http2.SwitchingProtocols([]byte("HTTP/1.1 10")) != 0 {
		t.Fatal("SwitchingProtocols on a refusal or a partial head")
	}
	if _, ok, _ := http2.UpgradeRequest([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); ok {
		t.Fatal("a plain request taken for an upgrade")
	}
}
