package mockserver

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

func tlsCall(dst, host, sni, alpn, vers, suite string) recording.Call {
	return recording.Call{Proto: "http", Dst: dst, Host: host, Request: []byte("GET / HTTP/1.1\r\n\r\n"),
		Response: []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
		TLS:      recording.TLS{On: true, ServerName: sni, ALPN: alpn, Version: vers, CipherSuite: suite, Curve: "X25519"}}
}

func tlsServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "-"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const v12, v13 = "TLS 1.2", "TLS 1.3"
	const s12, s13 = "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"
	s.AddSession(&recording.Session{V: 1, ID: "a", Calls: []recording.Call{
		tlsCall("10.0.0.8:443", "pay.example.com:443", "pay.example.com", "http/1.1", v12, s12),
		tlsCall("10.0.0.8:443", "pay.example.com:443", "pay.example.com", "h2", v13, s13),
		tlsCall("10.0.0.8:443", "pay.example.com:443", "pay.example.com", "h2", v13, s13),
		tlsCall("10.0.0.9:8443", "", "sms.example.com", "", v13, s13),
		{Proto: "redis", Dst: "10.0.0.7:6379", Request: []byte("*1\r\n$4\r\nPING\r\n"), Response: []byte("+PONG\r\n")},
	}})
	return s
}

func TestTLSFactsByDestination(t *testing.T) {
	s := tlsServer(t, Config{Map: map[string]string{"pay.staging:443": "pay.example.com:443"}})
	h2 := trace.TLSFacts{ServerName: "pay.example.com", ALPN: "h2", Version: "TLS 1.3", CipherSuite: "TLS_AES_256_GCM_SHA384", Curve: "X25519", Calls: 2}
	h1 := trace.TLSFacts{ServerName: "pay.example.com", ALPN: "http/1.1", Version: "TLS 1.2", CipherSuite: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", Curve: "X25519", Calls: 1}
	cases := []struct {
		name string
		q    trace.TLSQuery
		rec  string
		want []trace.TLSFacts
	}{
		{"by address, most calls first", trace.TLSQuery{Dst: "10.0.0.8:443", ALPN: []string{"h2", "http/1.1"}}, "10.0.0.8:443", []trace.TLSFacts{h2, h1}},
		{"an ALPN offered first", trace.TLSQuery{Dst: "10.0.0.8:443", ALPN: []string{"http/1.1"}}, "10.0.0.8:443", []trace.TLSFacts{h1, h2}},
		{"by the name dialled", trace.TLSQuery{Dst: "pay.example.com:443", ServerName: "pay.example.com", ALPN: []string{"h2"}}, "pay.example.com:443", []trace.TLSFacts{h2, h1}},
		{"mapped", trace.TLSQuery{Dst: "pay.staging:443", ALPN: []string{"http/1.1"}}, "pay.example.com:443", []trace.TLSFacts{h1, h2}},
		{"by server name", trace.TLSQuery{Dst: "10.1.1.1:9999", ServerName: "sms.example.com"}, "10.0.0.9:8443",
			[]trace.TLSFacts{{ServerName: "sms.example.com", Version: "TLS 1.3", CipherSuite: "TLS_AES_256_GCM_SHA384", Curve: "X25519", Calls: 1}}},
		{"by port", trace.TLSQuery{Dst: "10.1.1.1:8443"}, "10.0.0.9:8443",
			[]trace.TLSFacts{{ServerName: "sms.example.com", Version: "TLS 1.3", CipherSuite: "TLS_AES_256_GCM_SHA384", Curve: "X25519", Calls: 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := s.tlsFacts("", &c.q)
			if a.Recorded != c.rec || a.Reason != "" {
				t.Fatalf("answered from %q (%s), want %q", a.Recorded, a.Reason, c.rec)
			}
			got, _ := json.Marshal(a.Facts)
			want, _ := json.Marshal(c.want)
			if string(got) != string(want) {
				t.Fatalf("facts\n%s\nwant\n%s", got, want)
			}
		})
	}
	// a destination recorded without TLS has no facts, and says so
	a := s.tlsFacts("", &trace.TLSQuery{Dst: "10.0.0.7:6379"})
	if len(a.Facts) != 0 || !strings.Contains(a.Reason, "no recording holds a TLS call to 10.0.0.7:6379") {
		t.Fatalf("plain destination: %+v", a)
	}
}

func TestTLSFactsKeptBounded(t *testing.T) {
	var list []trace.TLSFacts
	for i := range 3 * maxTLSFacts {
		list = countFacts(list, trace.TLSFacts{Version: "TLS 1.3", CipherSuite: string(rune('a' + i%(2*maxTLSFacts)))})
	}
	if len(list) != maxTLSFacts || list[0].Calls != 2 {
		t.Fatalf("%d combinations kept, the first counted %d times", len(list), list[0].Calls)
	}
}

// TestServeTLSFacts: an agent's questions on a connection named
// trace.TLSDst are answered one JSON line each, on one connection; a
// question that is not JSON ends the connection.
func TestServeTLSFacts(t *testing.T) {
	s := tlsServer(t, Config{})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	out := trace.AppendFrameHeader(nil, "", trace.TLSDst, 0)
	for _, dst := range []string{"10.0.0.8:443", "10.0.0.9:8443", "10.0.0.7:6379"} {
		q, _ := json.Marshal(trace.TLSQuery{Dst: dst, ALPN: []string{"h2"}})
		out = trace.AppendFrame(out, "rt-1", trace.TLSDst, q)
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var a trace.TLSAnswer
		if err := json.Unmarshal(line, &a); err != nil {
			t.Fatalf("answer %q: %v", line, err)
		}
		if dst == "10.0.0.7:6379" {
			if len(a.Facts) != 0 || a.Reason == "" {
				t.Fatalf("%s: %s", dst, line)
			}
			continue
		}
		if a.Recorded != dst || len(a.Facts) == 0 || a.Facts[0].Version != "TLS 1.3" {
			t.Fatalf("%s: %s", dst, line)
		}
	}
	if _, err := c.Write(trace.AppendFrame(nil, "", trace.TLSDst, []byte("{not json"))); err != nil {
		t.Fatal(err)
	}
	if b, err := br.ReadByte(); err == nil {
		t.Fatalf("answered %q to a malformed question", b)
	}
}
