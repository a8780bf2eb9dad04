package extract

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/load"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func readAll(t *testing.T, b *bytes.Buffer) []load.Request {
	t.Helper()
	rd := load.NewReader(b, "out")
	var out []load.Request
	for {
		var r load.Request
		err := rd.Next(&r)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
}

func TestExtractSortsInBoundedMemory(t *testing.T) {
	// 1000 log lines in shuffled order, many sharing a second; chunks of 64
	// force 16 spilled runs and a merge. The output must be ordered by time
	// and, within equal times, in source order.
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 4))
	var log strings.Builder
	for i := range 1000 {
		at := base.Add(time.Duration(rng.IntN(50)) * time.Second)
		fmt.Fprintf(&log, `{"time":%q,"method":"GET","url":"/q?n=%d"}`+"\n", at.Format(time.RFC3339), i)
	}
	for _, chunk := range []int{64, 100000} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			src := &Lines{Name: "app.log", R: strings.NewReader(log.String()), Parse: JSONLineParser(DefaultJSONFields())}
			var out bytes.Buffer
			w := load.NewWriter(&out)
			st, err := Extract(context.Background(), src, w, Options{ChunkSize: chunk, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, &out)
			if st.Read != 1000 || st.Written != 1000 || len(got) != 1000 || st.Sorted {
				t.Fatalf("stats %+v, %d lines out", st, len(got))
			}
			if chunk == 64 && st.Runs != 16 {
				t.Errorf("runs = %d, want 16", st.Runs)
			}
			seen := map[string]bool{}
			for i := 1; i < len(got); i++ {
				a, b := got[i-1], got[i]
				if b.At.Before(a.At) {
					t.Fatalf("line %d at %v is before line %d at %v", i+1, b.At, i, a.At)
				}
				var na, nb int
				fmt.Sscanf(a.URL, "/q?n=%d", &na)
				fmt.Sscanf(b.URL, "/q?n=%d", &nb)
				if a.At.Equal(b.At) && nb < na {
					t.Fatalf("equal times out of source order: %s before %s", a.URL, b.URL)
				}
				seen[b.URL] = true
			}
			if len(seen) != 999 {
				t.Errorf("%d distinct requests after the first, want 999", len(seen))
			}
		})
	}
}

func TestExtractWindowAndBadLines(t *testing.T) {
	in := `{"time":"2026-11-29T10:00:00Z","url":"/a"}
{"time":"2026-11-29T10:00:30Z","url":"/b"}
garbage
{"time":"2026-11-29T10:01:00Z","url":"/c"}
{"url":"/no-time"}

{"time":"2026-11-29T10:00:45Z","method":"POST","url":"/d","body":{"x":1},"headers":{"A":"1","B":["2","3"]}}
`
	var bad []string
	src := &Lines{Name: "app.log", R: strings.NewReader(in), Parse: JSONLineParser(DefaultJSONFields())}
	var out bytes.Buffer
	st, err := Extract(context.Background(), src, load.NewWriter(&out), Options{
		From:  time.Date(2026, 11, 29, 10, 0, 15, 0, time.UTC),
		To:    time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC),
		OnBad: func(b BadLine) { bad = append(bad, b.String()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, &out)
	if len(got) != 2 || got[0].URL != "/b" || got[1].URL != "/d" || st.Outside != 2 || st.Bad != 2 {
		t.Fatalf("got %v, stats %+v", got, st)
	}
	if string(got[1].Body) != `{"x":1}` || !reflect.DeepEqual(got[1].Header, http.Header{"A": {"1"}, "B": {"2", "3"}}) || got[1].ID != "app.log:7" {
		t.Errorf("request /d = %+v", got[1])
	}
	if len(bad) != 2 || !strings.HasPrefix(bad[0], "app.log:3: ") || !strings.HasPrefix(bad[1], "app.log:5: no time field") {
		t.Errorf("bad lines %q", bad)
	}
}

func TestAccessLog(t *testing.T) {
	cases := []struct {
		name, line string
		want       *load.Request
		err        string
	}{
		{name: "combined",
			line: `127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif?x=1 HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"`,
			want: &load.Request{At: time.Date(2000, 10, 10, 20, 55, 36, 0, time.UTC), ID: "acc:1", Kind: "http", Method: "GET", URL: "/apache_pb.gif?x=1",
				Header: map[string][]string{"Referer": {"http://www.example.com/start.html"}, "User-Agent": {"Mozilla/4.08 [en] (Win98; I ;Nav)"}}}},
		{name: "common",
			line: `10.1.2.3 - - [29/Nov/2026:10:15:23 +0000] "POST /orders HTTP/1.1" 201 20`,
			want: &load.Request{At: time.Date(2026, 11, 29, 10, 15, 23, 0, time.UTC), ID: "acc:1", Kind: "http", Method: "POST", URL: "/orders"}},
		{name: "nginx extras and escapes",
			line: `::1 - - [29/Nov/2026:10:15:23 +0000] "GET /a HTTP/1.1" 200 0 "-" "curl \"x\"" "-" rt=0.004`,
			want: &load.Request{At: time.Date(2026, 11, 29, 10, 15, 23, 0, time.UTC), ID: "acc:1", Kind: "http", Method: "GET", URL: "/a",
				Header: map[string][]string{"User-Agent": {`curl "x"`}}}},
		{name: "malformed request", line: `1.2.3.4 - - [29/Nov/2026:10:15:23 +0000] "-" 400 0 "-" "-"`, err: "is not"},
		{name: "bad time", line: `1.2.3.4 - - [29-11-2026] "GET / HTTP/1.1" 200 0`, err: "bad time"},
		{name: "no status", line: `1.2.3.4 - - [29/Nov/2026:10:15:23 +0000] "GET / HTTP/1.1"`, err: "status"},
		{name: "unquoted", line: `1.2.3.4 - - [29/Nov/2026:10:15:23 +0000] GET / 200 0`, err: "quote"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseAccessLine([]byte(c.line), "acc", 1)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.At = got.At.UTC()
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseTime(t *testing.T) {
	want := time.Date(2026, 11, 29, 10, 15, 23, 123000000, time.UTC)
	cases := []struct {
		name   string
		v      any
		format string
	}{
		{"rfc3339", "2026-11-29T10:15:23.123Z", ""},
		{"space", "2026-11-29 10:15:23.123", "auto"},
		{"seconds", json.Number("1795947323.123"), ""},
		{"millis", json.Number("1795947323123"), ""},
		{"micros string", "1795947323123000", ""},
		{"nanos", json.Number("1795947323123000000"), "unix_ns"},
		{"unix_ms", "1795947323123", "unix_ms"},
		{"layout", "29.11.2026 10:15:23.123", "02.01.2006 15:04:05.000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseTime(c.v, c.format)
			if err != nil {
				t.Fatal(err)
			}
			if d := got.Sub(want); d > time.Microsecond || d < -time.Microsecond {
				t.Errorf("got %v, want %v", got.UTC(), want)
			}
		})
	}
	for _, bad := range []any{"yesterday", true, json.Number("1e400")} {
		if _, err := ParseTime(bad, ""); err == nil {
			t.Errorf("ParseTime(%v) accepted", bad)
		}
	}
}

func TestRecordingsSource(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 15, 23, 0, time.UTC)
	sessions := []*recording.Session{
		{ID: "t2", At: at.Add(time.Second), Inbound: recording.Inbound{Proto: "http",
			Request: []byte("POST /orders?x=1 HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nRetrace-Trace-Id: t2\r\nContent-Length: 7\r\n\r\n{\"a\":1}")}},
		{ID: "t1", At: at, Inbound: recording.Inbound{Proto: "http", StartNs: 5,
			Request: []byte("GET /stock HTTP/1.1\r\nHost: shop\r\n\r\n")}},
		{ID: "t3", At: at, Inbound: recording.Inbound{Proto: "http", RequestTruncated: true, Request: []byte("GET /x HTTP/1.1\r\n")}},
	}
	var buf bytes.Buffer
	for _, s := range sessions {
		b, err := recording.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	buf.WriteString("{broken\n")
	var bad []string
	var out bytes.Buffer
	st, err := Extract(context.Background(), NewRecordingFiles("rec.jsonl", &buf), load.NewWriter(&out),
		Options{OnBad: func(b BadLine) { bad = append(bad, b.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, &out)
	if len(got) != 2 || st.Bad != 2 || len(bad) != 2 || !strings.Contains(bad[0], "truncated") || !strings.HasPrefix(bad[1], "rec.jsonl:4:") {
		t.Fatalf("got %+v, stats %+v, bad %q", got, st, bad)
	}
	want0 := load.Request{At: at.Add(5), ID: "t1", Kind: "http", Method: "GET", URL: "/stock"}
	want1 := load.Request{At: at.Add(time.Second), ID: "t2", Kind: "http", Method: "POST", URL: "/orders?x=1",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"a":1}`)}
	got[0].At, got[1].At = got[0].At.UTC(), got[1].At.UTC()
	if !reflect.DeepEqual(got[0], want0) || !reflect.DeepEqual(got[1], want1) {
		t.Errorf("got\n%+v\n%+v\nwant\n%+v\n%+v", got[0], got[1], want0, want1)
	}
}

func FuzzAccessLine(f *testing.F) {
	f.Add(`127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://x/" "Mozilla"`)
	f.Add(`::1 - - [29/Nov/2026:10:15:23 +0000] "GET /a HTTP/1.1" 200 0 "-" "curl \"x\"" "-" rt=0.004`)
	f.Add(`1.2.3.4 - - [29/Nov/2026:10:15:23 +0000] "-" 400 0`)
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseAccessLine([]byte(line), "f", 1)
		if err != nil {
			return
		}
		if r.Method == "" || r.URL == "" || r.At.IsZero() {
			t.Fatalf("accepted %q as %+v", line, r)
		}
	})
}

func FuzzJSONLine(f *testing.F) {
	f.Add(`{"time":"2026-11-29T10:00:45Z","method":"POST","url":"/d","body":{"x":1},"headers":{"A":"1","B":["2","3"]}}`)
	f.Add(`{"time":1795947323.5,"query":"FIND orders WHERE id=1"}`)
	f.Add(`{"time":"1795947323123","url":"/x","headers":{"A":[1]}}`)
	parse := JSONLineParser(JSONFields{Time: "time", Method: "method", URL: "url", Headers: "headers", Body: "body", Query: "query",
		Meta: map[string]string{"who": "user.id"}})
	f.Fuzz(func(t *testing.T, line string) {
		r, err := parse([]byte(line), "f", 1)
		if err != nil {
			return
		}
		if r.URL == "" && r.Query == "" {
			t.Fatalf("accepted %q without url or query", line)
		}
		var buf bytes.Buffer
		w := load.NewWriter(&buf)
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		w.Flush()
	})
}
