package recording

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleSession(id string) *Session {
	return &Session{
		ID:  id,
		App: "orders",
		At:  time.Date(2026, 11, 29, 10, 15, 23, 123456789, time.UTC),
		Inbound: Inbound{Proto: "http", Local: "127.0.0.1:8080", Remote: "127.0.0.1:51432",
			Request:  []byte("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
			Response: []byte("HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"),
			DurNs:    5234000},
		Calls: []Call{
			{Seq: 0, Proto: "redis", Dst: "127.0.0.1:6379", Host: "stock-cache.prod:6379", Request: []byte("*2\r\n$3\r\nGET\r\n$5\r\nstock\r\n"),
				Response: []byte("$2\r\n42\r\n"), StartNs: 812000, DurNs: 95000},
			{Seq: 1, Proto: "mysql", Dst: "127.0.0.1:3306", Setup: true, Conn: 3,
				Request: []byte{0x20, 0, 0, 1, 0xff, 0xfe, 0x00}, Response: []byte{7, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0},
				StartNs: 900000, DurNs: 1000, ResponseTruncated: true},
		},
	}
}

func TestCodecRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		s    *Session
	}{
		{"text and binary", sampleSession("abc")},
		{"no calls", &Session{ID: "x", At: time.Unix(0, 1).UTC(), Inbound: Inbound{Proto: "http"}}},
		{"empty payloads", &Session{ID: "y", At: time.Unix(5, 0).UTC(),
			Inbound: Inbound{Proto: "http", Request: []byte{}, Response: []byte{}}}},
		{"truncated", &Session{ID: "z", At: time.Unix(5, 0).UTC(),
			Inbound: Inbound{Proto: "http", Request: []byte("GET"), RequestTruncated: true, ResponseTruncated: true}}},
		{"tls", &Session{ID: "t", At: time.Unix(5, 0).UTC(),
			Inbound: Inbound{Proto: "http", TLS: TLS{On: true, ServerName: "orders", ALPN: "http/1.1"}},
			Calls: []Call{{Proto: "http", Dst: "1.2.3.4:443", TLS: TLS{On: true, ServerName: "pay.example", ALPN: "http/1.1",
				Version: "TLS 1.3", CipherSuite: "TLS_AES_128_GCM_SHA256", Curve: "X25519MLKEM768"},
				Request: []byte("GET / HTTP/1.1\r\n\r\n")},
				{Proto: "raw", TLS: TLS{On: true, ALPN: "h2", Note: "HTTP/2 not decoded"}, Request: []byte("PRI")}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			line, err := Marshal(tc.s)
			require.NoError(t, err)
			assert.False(t, bytes.ContainsRune(line, '\n'), "a JSONL line has no newline")
			got, err := Unmarshal(line)
			require.NoError(t, err)
			want := *tc.s
			want.V = SchemaVersion
			assert.Equal(t, &want, got)
		})
	}
}

func TestCodecPayloadForms(t *testing.T) {
	line, err := Marshal(sampleSession("abc"))
	require.NoError(t, err)
	s := string(line)
	assert.Contains(t, s, `"request":"*2\r\n$3\r\nGET`, "UTF-8 payloads are strings")
	assert.Contains(t, s, `"request_b64":"IAAAAf/+AA=="`, "binary payloads are base64")
	assert.Contains(t, s, `"response_truncated":true`)
}

func TestUnmarshalRejects(t *testing.T) {
	tests := []struct{ name, line, want string }{
		{"not json", `{"v":1,`, "unexpected end"},
		{"other version", `{"v":2,"id":"a"}`, "schema version 2"},
		{"no id", `{"v":1}`, "no id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unmarshal([]byte(tc.line))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestUnmarshalSkipsUnknownFields(t *testing.T) {
	s, err := Unmarshal([]byte(`{"v":1,"id":"a","future":[1,2],"inbound":{"proto":"http","x":1},"calls":[{"seq":0,"y":"z"}]}`))
	require.NoError(t, err)
	assert.Equal(t, "a", s.ID)
	assert.Len(t, s.Calls, 1)
}

func FuzzUnmarshal(f *testing.F) {
	line, _ := Marshal(sampleSession("seed"))
	f.Add(line)
	f.Add([]byte(`{"v":1,"id":"a"}`))
	f.Add([]byte(`{"v":1,"id":"a","calls":[{"request_b64":"AAEC"}]}`))
	f.Add([]byte(`{"v":1,"id":"a","inbound":{"request":"\u00ff","response_b64":"////"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Unmarshal(b)
		if err != nil {
			return
		}
		again, err := Marshal(s)
		if err != nil {
			t.Fatalf("decoded session does not encode: %v", err)
		}
		s2, err := Unmarshal(again)
		if err != nil {
			t.Fatalf("re-encoded session does not decode: %v\n%s", err, again)
		}
		if !sameSession(s, s2) {
			t.Fatalf("round trip changed the session:\n%s", again)
		}
	})
}

func FuzzPayloadRoundTrip(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), []byte{0, 1, 2, 0xff})
	f.Add([]byte{}, []byte("\u2028 é \x7f"))
	f.Fuzz(func(t *testing.T, req, resp []byte) {
		s := &Session{ID: "f", At: time.Unix(1, 2).UTC(), Inbound: Inbound{Proto: "http", Request: req, Response: resp},
			Calls: []Call{{Proto: "raw", Request: resp, Response: req}}}
		line, err := Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.ContainsRune(line, '\n') {
			t.Fatalf("encoded line contains a newline: %q", line)
		}
		got, err := Unmarshal(line)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Inbound.Request, req) || !bytes.Equal(got.Inbound.Response, resp) ||
			!bytes.Equal(got.Calls[0].Request, resp) || !bytes.Equal(got.Calls[0].Response, req) {
			t.Fatalf("payloads changed: %q", line)
		}
	})
}

func sameSession(a, b *Session) bool {
	la, _ := Marshal(a)
	lb, _ := Marshal(b)
	return string(la) == string(lb) && strings.Count(string(la), "\n") == 0
}
