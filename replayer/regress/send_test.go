package regress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/recording"
)

func TestBuildRequest(t *testing.T) {
	tg, err := parseTarget("http://127.0.0.1:8080/prefix/")
	if err != nil {
		t.Fatal(err)
	}
	raw := "POST /orders?x=1 HTTP/1.1\r\nHost: shop.internal\r\nretrace-trace-id: old\r\nContent-Length: 2\r\n\r\n{}"
	got, method, err := tg.buildRequest(nil, []byte(raw), "t1", replayed{time: 42})
	if err != nil {
		t.Fatal(err)
	}
	want := "POST /prefix/orders?x=1 HTTP/1.1\r\nRetrace-Trace-Id: t1\r\nRetrace-Replay-Time: 42\r\nHost: 127.0.0.1:8080\r\nContent-Length: 2\r\n\r\n{}"
	if string(got) != want || method != "POST" {
		t.Errorf("got %q (%s)\nwant %q", got, method, want)
	}
	tg, _ = parseTarget("http://h:1")
	got, _, _ = tg.buildRequest(nil, []byte("GET / HTTP/1.1\r\n\r\n"), "t", replayed{})
	if string(got) != "GET / HTTP/1.1\r\nRetrace-Trace-Id: t\r\nHost: h:1\r\n\r\n" {
		t.Errorf("no Host in recording: %q", got)
	}
	got, _, _ = tg.buildRequest(nil, []byte("GET / HTTP/1.1\r\n\r\n"), "t",
		replayed{random: &recording.Random{Seed: 1 << 63, Math: 2, MathV2: 1, Crypto: [][]byte{{1, 2, 3}, {0xff}}}})
	if want := "GET / HTTP/1.1\r\nRetrace-Trace-Id: t\r\nRetrace-Replay-Seed: 9223372036854775808/2/1\r\nRetrace-Replay-Random: AQID,/w==\r\nHost: h:1\r\n\r\n"; string(got) != want {
		t.Errorf("randomness:\ngot  %q\nwant %q", got, want)
	}
	huge := &recording.Random{Seed: 5, Crypto: [][]byte{make([]byte, 50<<10)}}
	got, _, _ = tg.buildRequest(nil, []byte("GET / HTTP/1.1\r\n\r\n"), "t", replayed{random: huge})
	if want := "GET / HTTP/1.1\r\nRetrace-Trace-Id: t\r\nRetrace-Replay-Seed: 5/0/0\r\nHost: h:1\r\n\r\n"; string(got) != want {
		t.Errorf("draws over the agent's bound are not sent:\ngot  %.200q\nwant %q", got, want)
	}
	for _, bad := range []string{"GET / HTTP/1.1\r\nHost: x\r\n", "NOT HTTP\r\n\r\n", "GET / HTTP/2\r\n\r\n"} {
		if _, _, err := tg.buildRequest(nil, []byte(bad), "t", replayed{}); err == nil {
			t.Errorf("buildRequest(%q) succeeded", bad)
		}
	}
}

func FuzzBuildRequest(f *testing.F) {
	f.Add([]byte("POST /o HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"))
	f.Add([]byte("GET http://x/y HTTP/1.0\r\nRetrace-Trace-Id: z\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nX: \r\n\r\n"))
	tg, _ := parseTarget("http://127.0.0.1:9/p")
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, _, err := tg.buildRequest(nil, raw, "trace-1", replayed{time: 7})
		if err != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(out)))
		if err != nil {
			if _, err0 := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw))); err0 == nil {
				t.Fatalf("a request that parsed became one that does not: %v\n%q\n%q", err, raw, out)
			}
			return
		}
		if req.Header.Get("Retrace-Trace-Id") != "trace-1" || req.Host != "127.0.0.1:9" {
			t.Fatalf("headers not set: %v %q", req.Header, req.Host)
		}
		if !bytes.HasPrefix(out[bytes.Index(out, []byte("\r\n"))+2:], []byte("Retrace-Trace-Id: trace-1\r\n")) {
			t.Fatalf("trace header not right after the request line: %q", out)
		}
	})
}

func TestOpenSource(t *testing.T) {
	dir := t.TempDir()
	s := &recording.Session{ID: "a", Inbound: recording.Inbound{Proto: "http", Request: []byte("GET / HTTP/1.1\r\n\r\n")}}
	line, _ := recording.Marshal(s)
	os.WriteFile(filepath.Join(dir, "sessions-1.jsonl"), append(append(line, "\n{broken\n\n"...), line...), 0o644)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(line)
	zw.Close()
	os.WriteFile(filepath.Join(dir, "sessions-2.jsonl.gz"), gz.Bytes(), 0o644)
	var bad []error
	src, err := OpenSource(context.Background(), "file://"+dir, func(err error) { bad = append(bad, err) })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	n := 0
	if err := src.Scan(context.Background(), func(*recording.Session) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("read %d sessions, want 3", n)
	}
	if len(bad) != 1 || !strings.Contains(bad[0].Error(), "sessions-1.jsonl:2") {
		t.Errorf("bad lines %v, want one at sessions-1.jsonl:2", bad)
	}
	stop := errors.New("stop")
	if err := src.Scan(context.Background(), func(*recording.Session) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Scan did not return the callback's error: %v", err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), filepath.Join(dir, "sessions-1.jsonl")} {
		if _, err := OpenSource(context.Background(), bad, nil); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("OpenSource(%s): %v", bad, err)
		}
	}
}
