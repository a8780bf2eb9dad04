package http1_test

import (
	"bytes"
	"compress/gzip"
	"strconv"
	"testing"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

func maskRules() *wiretest.Rules {
	return &wiretest.Rules{
		Headers:  map[string]string{"authorization": "***", "x-api-key": "[key]"},
		Fields:   map[string]string{"password": "***"},
		JSONKeys: map[string]string{"password": "***"},
		Patterns: []wiretest.Pattern{
			wiretest.Pat(`\b(?:\d[\s-]?){12,18}\d\b`, "[card]"),
			wiretest.Pat(`(?i)(bearer\s+)[A-Za-z0-9._-]+`, "${1}[token]"),
		},
	}
}

func withLen(head, body string) []byte {
	return []byte(head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return b.String()
}

var maskCases = []wiretest.MaskCase{
	{Name: "headers by name, any case",
		In:   []byte("GET /a HTTP/1.1\r\nHost: x\r\nauthorization: Basic abc\r\nX-API-KEY: k1\r\n\r\n"),
		Want: []byte("GET /a HTTP/1.1\r\nHost: x\r\nauthorization: ***\r\nX-API-KEY: [key]\r\n\r\n")},
	{Name: "query fields and JSON body, Content-Length fixed",
		In:   withLen("POST /login?password=x&q=1 HTTP/1.1\r\nContent-Type: application/json\r\n", `{"user":"a","password":"hunter2"}`),
		Want: withLen("POST /login?password=%2A%2A%2A&q=1 HTTP/1.1\r\nContent-Type: application/json\r\n", `{"password":"***","user":"a"}`)},
	{Name: "form body",
		In:   withLen("POST /f HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n", "user=a&password=hunter2&c=4111%201111%201111%201111"),
		Want: withLen("POST /f HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n", "user=a&password=%2A%2A%2A&c=%5Bcard%5D")},
	{Name: "chunked body becomes one chunk", Side: wire.Server,
		In:   []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pas\r\n13\r\nsword\":\"abcdefghi\"}\r\n0\r\n\r\n"),
		Want: []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n12\r\n{\"password\":\"***\"}\r\n0\r\n\r\n")},
	{Name: "gzip body decoded, masked, encoded", Side: wire.Server,
		In:   withLen("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n", gz("card 4111111111111111")),
		Want: withLen("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n", gz("card [card]"))},
	{Name: "a coding it cannot read is kept and reported", Side: wire.Server,
		In:    withLen("HTTP/1.1 200 OK\r\nContent-Encoding: zstd\r\n", "4111111111111111"),
		Want:  withLen("HTTP/1.1 200 OK\r\nContent-Encoding: zstd\r\n", "4111111111111111"),
		Skips: 1},
	{Name: "interim response then final", Side: wire.Server,
		In:   []byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nAuthorization: z\r\nContent-Length: 0\r\n\r\n"),
		Want: []byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nAuthorization: ***\r\nContent-Length: 0\r\n\r\n")},
	{Name: "pipelined requests",
		In:   []byte("GET /1 HTTP/1.1\r\nAuthorization: a\r\n\r\nGET /2 HTTP/1.1\r\nX-Auth: Bearer abc\r\n\r\n"),
		Want: []byte("GET /1 HTTP/1.1\r\nAuthorization: ***\r\n\r\nGET /2 HTTP/1.1\r\nX-Auth: Bearer [token]\r\n\r\n")},
	{Name: "head cut by the cap",
		In:   []byte("GET / HTTP/1.1\r\nAuthorization: secret\r\nX-Api-K"),
		Want: []byte("GET / HTTP/1.1\r\nAuthorization: ***\r\nX-Api-K")},
	{Name: "nothing to mask", In: withLen("POST / HTTP/1.1\r\n", `{"a":1}`), Want: withLen("POST / HTTP/1.1\r\n", `{"a":1}`)},
}

func TestMask(t *testing.T) {
	m, ok := http1.Protocol.(wire.Masker)
	if !ok {
		t.Fatal("http1.Protocol is no wire.Masker")
	}
	wiretest.Masks(t, m, maskRules, maskCases...)
}

func FuzzMask(f *testing.F) {
	wiretest.FuzzMasker(f, http1.Protocol.(wire.Masker), maskRules, wiretest.Whole(http1.Protocol), maskCases...)
}
