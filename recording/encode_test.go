package recording

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sameJSON asserts that Marshal and encoding/json say the same thing about s.
func sameJSON(t testing.TB, s *Session) {
	fast, err := Marshal(s)
	require.NoError(t, err)
	slow, err := marshalSlow(s)
	require.NoError(t, err)
	var a, b any
	require.NoError(t, json.Unmarshal(fast, &a), "%s", fast)
	require.NoError(t, json.Unmarshal(slow, &b))
	if !assert.Equal(t, b, a) {
		t.Logf("fast: %s\nslow: %s", fast, slow)
	}
}

func TestMarshalMatchesEncodingJSON(t *testing.T) {
	tests := map[string]*Session{
		"sample":        sampleSession("x"),
		"nil calls":     {ID: "a", At: time.Unix(0, 0).UTC()},
		"trace":         {ID: "a", Trace: "4bf92f3577b34da6a3ce929d0e0e4736", App: "x", At: time.Unix(0, 0).UTC()},
		"trace escapes": {ID: "a", Trace: "<\"\x01\xff>", At: time.Unix(0, 0).UTC()},
		"empty calls":   {ID: "a", At: time.Unix(0, 0).UTC(), Calls: []Call{}},
		"escapes": {ID: "a", App: "<&>\"\\\x01\x1f\u2028\u2029\x7f", At: time.Unix(1, 5).In(time.FixedZone("x", 3600)),
			Inbound: Inbound{Proto: "http", Request: []byte("a\tb\r\nc<d>&\"e\"\\"), Response: []byte{}}},
		"invalid utf8 in a name": {ID: "a", App: "a\xffb\xc3", At: time.Unix(1, 0).UTC(),
			Calls: []Call{{Proto: "raw", Dst: "\xfe", Host: "h\xff:1", Conn: -3, Request: []byte{0xff}, StartNs: -5}}},
		"dialled by name": {ID: "a", At: time.Unix(1, 0).UTC(),
			Calls: []Call{{Proto: "redis", Dst: "10.0.0.7:6379", Host: "cache.prod.svc:6379"}, {Proto: "redis", Dst: "10.0.0.7:6379"}}},
		"decoded": {ID: "a", At: time.Unix(1, 0).UTC(),
			Calls: []Call{{Proto: "mysql", Request: []byte{0x05, 0, 0, 0, 0x17, 0xff}, Decoded: "EXECUTE #1 (42, \"<x>\")\nSELECT 1"}}},
		"background": {ID: "bg", App: "orders", Background: true, At: time.Unix(2, 0).UTC(),
			Calls: []Call{{Proto: "redis", Dst: "cache:6379", Request: []byte("*1\r\n$4\r\nPING\r\n")}}},
		"all marks": {ID: "a", V: 1, At: time.Unix(1, 0).UTC(), Inbound: Inbound{RequestTruncated: true, ResponseTruncated: true},
			Calls: []Call{{Setup: true, RequestTruncated: true, ResponseTruncated: true}}},
		"tls": {ID: "a", At: time.Unix(1, 0).UTC(),
			Inbound: Inbound{Proto: "http", TLS: TLS{On: true, ServerName: "orders.local", ALPN: "http/1.1"}},
			Calls: []Call{{Proto: "http", TLS: TLS{On: true, ServerName: "pay<&>.example", ALPN: "http/1.1", Version: "TLS 1.2",
				CipherSuite: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", Curve: "P-256"}},
				{Proto: "raw", TLS: TLS{On: true, ALPN: "h2", Note: "HTTP/2 not decoded"}},
				{Proto: "redis", TLS: TLS{On: true}}}},
		"random, math": {ID: "a", At: time.Unix(1, 0).UTC(), Random: &Random{Seed: math.MaxUint64, Math: 3}},
		"random, all": {ID: "a", At: time.Unix(1, 0).UTC(),
			Random: &Random{Seed: 1 << 60, Math: 1, MathV2: 9, Crypto: [][]byte{{0, 0xff, 3}, {}, nil, []byte("0123456789abcdef")}}},
		"random, masked": {ID: "a", At: time.Unix(1, 0).UTC(), Random: &Random{Masked: true}},
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) { sameJSON(t, s) })
	}
	_, err := Marshal(&Session{ID: "a", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	assert.Error(t, err, "a time encoding/json refuses is refused")
}

func FuzzMarshalMatchesEncodingJSON(f *testing.F) {
	f.Add("x", "app", []byte("GET / HTTP/1.1\r\n\r\n"), []byte{0xff, 0}, int64(5))
	f.Add("<", "\u2028\x00", []byte("\xc3"), []byte("é"), int64(-1))
	// runs longer than a word, escapes and characters across word edges
	f.Add("订单-12345678", "app\u2029app", []byte("POST /订单 HTTP/1.1\r\nContent-Length: 8\r\n\r\n{\"a\":\"\\\"}"),
		[]byte("\x00\x00\x00\x01\x03SELECT 1234567\x7f\xe2\x80\xa8x"), int64(1234567890123))
	f.Fuzz(func(t *testing.T, id, app string, req, resp []byte, n int64) {
		tl := TLS{On: n%2 == 0, ServerName: app, ALPN: id, Note: string(req)}
		s := &Session{ID: id, Trace: app + id, App: app, At: time.Unix(0, n).UTC(),
			Inbound: Inbound{Proto: app, Local: id, Request: req, Response: resp, StartNs: n, TLS: tl},
			Calls: []Call{{Seq: int(n % 100), Proto: id, Dst: app, Host: id, Conn: n, Request: resp, Response: req, DurNs: n,
				Decoded: app, TLS: tl}}}
		sameJSON(t, s)
		s.Random = &Random{Seed: uint64(n) * 0x9e3779b97f4a7c15, Math: uint64(n), Crypto: [][]byte{req, resp}, Masked: n%2 == 0}
		sameJSON(t, s)
	})
}

// BenchmarkMarshal encodes the sample session, and a session the fan-out
// service of BenchmarkFanOutRatio recorded (testdata/fanout-session.json:
// Redis, MySQL and HTTP payloads, dense with escapes), with the writer's
// encoder and with encoding/json.
func BenchmarkMarshal(b *testing.B) {
	line, err := os.ReadFile("testdata/fanout-session.json")
	require.NoError(b, err)
	fanOut, err := Unmarshal(line)
	require.NoError(b, err)
	for name, s := range map[string]*Session{"sample": sampleSession("bench"), "fanout": fanOut} {
		b.Run(name+"/append", func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				buf, _ = AppendMarshal(buf[:0], s)
			}
			b.SetBytes(int64(len(buf)))
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = marshalSlow(s)
			}
		})
	}
}

// TestMarshalFanOutSession: the recorded session encodes as encoding/json
// encodes it, and back to the line it was read from.
func TestMarshalFanOutSession(t *testing.T) {
	line, err := os.ReadFile("testdata/fanout-session.json")
	require.NoError(t, err)
	s, err := Unmarshal(line)
	require.NoError(t, err)
	sameJSON(t, s)
	out, err := Marshal(s)
	require.NoError(t, err)
	assert.Equal(t, string(bytes.TrimSpace(line)), string(out))
}

func TestSpecialMatchesTable(t *testing.T) {
	for c := range 256 {
		for pos := range 8 {
			// c at pos among plain bytes, and among bytes that are not
			for _, fill := range []byte{'a', 0x00, 0xff} {
				var w uint64
				for k := range 8 {
					b := fill
					if k == pos {
						b = byte(c)
					}
					w |= uint64(b) << (8 * k)
				}
				got := special(w)
				for k := range 8 {
					b := byte(w >> (8 * k))
					assert.Equal(t, textEscapes[b]>>56 != 1, got>>(8*k+7)&1 == 1, "byte %#x at %d in %#x", b, k, w)
				}
			}
		}
	}
}

// TestAppendTextMatchesEncodingJSON writes random strings of bytes that
// take every path of appendText (plain, escaped, characters from 0x80,
// invalid UTF-8, U+2028) at every offset of its words and tails, and
// compares with encoding/json.
func TestAppendTextMatchesEncodingJSON(t *testing.T) {
	pieces := []string{"a", "Z", "\x00", "\n", "\r", "\t", `"`, `\`, "\x1f", "\x7f", "<", "é", "订", "\u2028", "\u2029", "\xc3", "\xff", "\xe2\x80"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var s strings.Builder
		for range rng.IntN(40) {
			s.WriteString(pieces[rng.IntN(len(pieces))])
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		require.NoError(t, enc.Encode(s.String()))
		prefix := []byte("x")
		got := appendText(prefix, []byte(s.String()))
		if !assert.Equal(t, "x"+strings.TrimSuffix(want.String(), "\n"), string(got), "%q", s.String()) {
			return
		}
	}
}

// appendInt writes what strconv does: every power of ten and its
// neighbours (where the digit count changes), both signs, the extremes,
// and random values of every length.
func TestAppendInt(t *testing.T) {
	check := func(v int64) {
		t.Helper()
		want := strconv.AppendInt([]byte("x"), v, 10)
		if got := appendInt([]byte("x"), v); !bytes.Equal(got, want) {
			t.Fatalf("appendInt(%d) = %q, want %q", v, got, want)
		}
	}
	for _, v := range []int64{0, 1, 9, math.MaxInt64, math.MinInt64, math.MinInt64 + 1} {
		check(v)
		check(-v)
	}
	for p := int64(1); p <= math.MaxInt64/10; p *= 10 {
		for _, v := range []int64{p - 1, p, p + 1, 10*p - 1} {
			check(v)
			check(-v)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		v := r.Int64() >> r.IntN(64)
		check(v)
		check(-v)
	}
}

func FuzzAppendInt(f *testing.F) {
	for _, v := range []int64{0, 7, -12, 69467086, math.MaxInt64, math.MinInt64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v int64) {
		if got, want := appendInt(nil, v), strconv.AppendInt(nil, v, 10); !bytes.Equal(got, want) {
			t.Fatalf("appendInt(%d) = %q, want %q", v, got, want)
		}
	})
}

// TestRandomRoundTrip: a session's randomness reads back as written, the
// seed exactly (a JSON string), the draws byte for byte.
func TestRandomRoundTrip(t *testing.T) {
	in := &Session{V: 1, ID: "r", At: time.Unix(1, 0).UTC(),
		Random: &Random{Seed: math.MaxUint64 - 1, Math: 2, MathV2: 5, Crypto: [][]byte{{1, 2, 3}, {0xff}, {}}}}
	line, err := Marshal(in)
	require.NoError(t, err)
	require.Contains(t, string(line), `"random":{"seed":"18446744073709551614","math":2,"math_v2":5,"crypto":["AQID","/w==",""]}`)
	out, err := Unmarshal(line)
	require.NoError(t, err)
	require.Equal(t, in.Random, out.Random)

	old, err := Unmarshal([]byte(`{"v":1,"id":"o","at":"2026-01-01T00:00:00Z","inbound":{"proto":"http","start_ns":0,"dur_ns":0},"calls":[]}`))
	require.NoError(t, err)
	require.Nil(t, old.Random, "a session recorded without randomness has none")
}
