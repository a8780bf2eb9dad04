package load

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"
)

func TestDefaultAPI(t *testing.T) {
	cases := []struct {
		name string
		req  Request
		want string
	}{
		{"path", Request{URL: "/orders?id=3"}, "GET /orders"},
		{"numeric id", Request{Method: "POST", URL: "http://h/orders/1234/items"}, "POST /orders/{id}/items"},
		{"uuid", Request{URL: "/u/3f2b1c9e-1a2b-4c3d-9e8f-0123456789ab"}, "GET /u/{id}"},
		{"word", Request{URL: "/users/deadbeef"}, "GET /users/deadbeef"},
		{"code with digits", Request{URL: "/stock/MN-270"}, "GET /stock/{id}"},
		{"select", Request{Query: "select a from `orders` where x=1"}, "SELECT orders"},
		{"update", Request{Query: "UPDATE stock SET n=n-1"}, "UPDATE stock"},
		{"insert", Request{Query: "insert into t (a) values (1)"}, "INSERT t"},
		{"explicit", Request{API: "GetDomainData", URL: "/q"}, "GetDomainData"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.req.APIName(); got != c.want {
				t.Errorf("APIName() = %q, want %q", got, c.want)
			}
		})
	}
}

func TestRequestRoundTrip(t *testing.T) {
	reqs := []Request{
		{At: time.Date(2026, 11, 29, 10, 15, 23, 123456789, time.UTC), API: "a", ID: "t1", Kind: KindHTTP, Method: "POST",
			URL: "/x?y=1", Header: map[string][]string{"A": {"1", "2"}}, Body: []byte("héllo"), Meta: map[string]string{"k": "v"}},
		{At: time.Unix(5, 0).UTC(), URL: "/bin", Body: []byte{0, 0xff, 0xfe}},
		{At: time.Unix(6, 0).UTC(), Kind: KindSQL, Query: "SELECT ?", Args: []any{"x", 1.5, true, nil}},
	}
	rd := NewReader(input(t, reqs), "rt")
	for i, want := range reqs {
		var got Request
		if err := rd.Next(&got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("request %d: got %+v, want %+v", i, got, want)
		}
	}
	var r Request
	if err := rd.Next(&r); err != io.EOF {
		t.Errorf("after the last line: %v, want EOF", err)
	}
}

func TestReaderReportsBadLines(t *testing.T) {
	in := `{"url":"/a"}
{"kind":"grpc","url":"/a"}
{"url":""}
{"kind":"sql"}
{"v":2,"url":"/a"}
{"method":"GE T","url":"/a"}
[1]
{"url":"/ok"}
`
	rd := NewReader(bytes.NewBufferString(in), "in.jsonl")
	var lines []int
	var ok int
	for {
		var r Request
		err := rd.Next(&r)
		if err == io.EOF {
			break
		}
		var le *LineError
		if errors.As(err, &le) {
			lines = append(lines, le.Line)
			if le.Source != "in.jsonl" {
				t.Errorf("source %q", le.Source)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ok++
	}
	if ok != 2 || !reflect.DeepEqual(lines, []int{2, 3, 4, 5, 6, 7}) {
		t.Errorf("%d good, bad lines %v; want 2 good, bad 2..7", ok, lines)
	}
}

func TestParseFlags(t *testing.T) {
	for _, s := range []string{"0/1", "3/4"} {
		if sh, err := ParseShard(s); err != nil || sh.String() != s {
			t.Errorf("ParseShard(%q) = %v, %v", s, sh, err)
		}
	}
	for _, s := range []string{"4/4", "-1/2", "1", "a/b", "0/0"} {
		if _, err := ParseShard(s); err == nil {
			t.Errorf("ParseShard(%q) accepted", s)
		}
	}
	if r, err := ParseRamp("10:100"); err != nil || r != (Ramp{10, 100}) {
		t.Errorf("ParseRamp = %v, %v", r, err)
	}
	for _, s := range []string{"10", "a:1", "-1:5", "0:0"} {
		if _, err := ParseRamp(s); err == nil {
			t.Errorf("ParseRamp(%q) accepted", s)
		}
	}
}

func TestRampScheduleIntegral(t *testing.T) {
	s := RampSchedule(Ramp{From: 10, To: 30}, 10*time.Second)
	// ∫0^10 (10+2t) dt = 200 requests.
	n := 0
	prev := time.Duration(-1)
	for k := int64(0); ; k++ {
		off, ok := s.At(k, time.Time{}, time.Time{})
		if !ok {
			break
		}
		if off <= prev {
			t.Fatalf("offset %v of request %d is not after %v", off, k, prev)
		}
		prev = off
		n++
	}
	if n != 200 {
		t.Errorf("ramp 10→30 over 10s schedules %d requests, want 200", n)
	}
}

// FuzzReader checks that any input decodes without panicking and that every
// request it accepts survives a round trip unchanged.
func FuzzReader(f *testing.F) {
	f.Add([]byte(`{"v":1,"at":"2026-11-29T10:15:23Z","method":"POST","url":"/o?x=1","header":{"A":["b"]},"body":"{}"}`))
	f.Add([]byte(`{"kind":"sql","query":"SELECT 1","args":[1,"a",null]}` + "\n" + `{"url":"/b","body_b64":"AP8="}`))
	f.Add([]byte("{\"url\":\"/a\"}\n\nnot json\n{\"v\":3}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := NewReader(bytes.NewReader(data), "fuzz")
		for range 100 {
			var r Request
			err := rd.Next(&r)
			if err == io.EOF {
				return
			}
			var le *LineError
			if errors.As(err, &le) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			w := NewWriter(&buf)
			if err := w.Write(&r); err != nil {
				t.Fatal(err)
			}
			_ = w.Flush()
			var back Request
			if err := NewReader(&buf, "rt").Next(&back); err != nil {
				t.Fatalf("re-reading %s: %v", buf.String(), err)
			}
			if !reflect.DeepEqual(normal(back), normal(r)) {
				t.Fatalf("round trip changed %+v into %+v", r, back)
			}
		}
	})
}

// normal makes empty and nil collections equal for comparison.
func normal(r Request) Request {
	if len(r.Header) == 0 {
		r.Header = nil
	}
	if len(r.Meta) == 0 {
		r.Meta = nil
	}
	if len(r.Args) == 0 {
		r.Args = nil
	}
	r.At = r.At.UTC()
	return r
}
