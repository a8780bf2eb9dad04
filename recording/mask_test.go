package recording

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testRules = `# tokens
header Authorization
header X-Api-Key [key]
json $..access_token [token]
json $.password
json $.user.phone [phone]
json $.items[*].card [card]
json $.list[1]
regex (?i)(bearer\s+)[A-Za-z0-9._-]+ ${1}[token]
regex \b(?:\d[\s-]?){12,18}\d\b [card]
`

func testMasker(t *testing.T) *Masker {
	m, err := ParseMasker(strings.NewReader(testRules), "rules.txt")
	require.NoError(t, err)
	return m
}

func TestMaskHTTP(t *testing.T) {
	m := testMasker(t)
	tests := []struct {
		name, in, want string
	}{
		{"headers",
			"GET /a HTTP/1.1\r\nHost: x\r\nauthorization: Basic abc\r\nX-API-KEY: k1\r\n\r\n",
			"GET /a HTTP/1.1\r\nHost: x\r\nauthorization: ***\r\nX-API-KEY: [key]\r\n\r\n"},
		{"json body with content-length fixed",
			withLen("POST /login HTTP/1.1\r\nContent-Type: application/json\r\n",
				`{"user":{"phone":"+4912345678","name":"a"},"password":"hunter2","n":1}`),
			withLen("POST /login HTTP/1.1\r\nContent-Type: application/json\r\n",
				`{"n":1,"password":"***","user":{"name":"a","phone":"[phone]"}}`)},
		{"json arrays and descent",
			withLen("HTTP/1.1 200 OK\r\n",
				`{"a":{"b":[{"access_token":"t1"}]},"items":[{"card":"1"},{"card":"2"}],"list":[0,1,2]}`),
			withLen("HTTP/1.1 200 OK\r\n",
				`{"a":{"b":[{"access_token":"[token]"}]},"items":[{"card":"[card]"},{"card":"[card]"}],"list":[0,"***",2]}`)},
		{"form body and query string",
			withLen("POST /f?password=x&q=1 HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n",
				"user=a&password=hunter2&access_token=abc"),
			withLen("POST /f?password=%2A%2A%2A&q=1 HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n",
				"user=a&password=%2A%2A%2A&access_token=%5Btoken%5D")},
		{"body cut by the cap keeps its declared length shifted",
			"POST / HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\npassword=hunter2&x=",
			"POST / HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 102\r\n\r\npassword=%2A%2A%2A&x="},
		{"regex in head and body",
			withLen("GET / HTTP/1.1\r\nX-Auth: Bearer abc.def\r\n", "card 4111 1111 1111 1111"),
			withLen("GET / HTTP/1.1\r\nX-Auth: Bearer [token]\r\n", "card [card]")},
		{"chunked body becomes one chunk",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pas\r\n13\r\nsword\":\"abcdefghi\"}\r\n0\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n12\r\n{\"password\":\"***\"}\r\n0\r\n\r\n"},
		{"interim response then final",
			"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nAuthorization: z\r\nContent-Length: 0\r\n\r\n",
			"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nAuthorization: ***\r\nContent-Length: 0\r\n\r\n"},
		{"a body that claims gzip and is not is kept (and counted skipped)",
			withLen("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n", `{"password":"abcde"}`),
			withLen("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n", `{"password":"abcde"}`)},
		{"head cut by the cap",
			"GET / HTTP/1.1\r\nAuthorization: secret\r\nX-Api-K",
			"GET / HTTP/1.1\r\nAuthorization: ***\r\nX-Api-K"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got, changed := m.Mask("http", in)
			assert.Equal(t, tc.want, string(got))
			assert.Equal(t, tc.in != tc.want, changed)
			assert.Equal(t, tc.in, string(in), "the input is not modified")
		})
	}
}

// withLen completes an HTTP head with the body's Content-Length.
func withLen(head, body string) string {
	return head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func TestMaskUnchangedKeepsBytes(t *testing.T) {
	m := testMasker(t)
	in := []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{ }\r\n0\r\n\r\n")
	got, changed := m.Mask("http", in)
	assert.False(t, changed)
	assert.Equal(t, string(in), string(got))
}

func TestMaskRedisAndMySQL(t *testing.T) {
	m := testMasker(t)
	got, changed := m.Mask("redis", []byte("*3\r\n$3\r\nSET\r\n$4\r\ncard\r\n$19\r\n4111 1111 1111 1111\r\n$-1\r\n+Bearer x\r\n"))
	assert.True(t, changed)
	assert.Equal(t, "*3\r\n$3\r\nSET\r\n$4\r\ncard\r\n$6\r\n[card]\r\n$-1\r\n+Bearer [token]\r\n", string(got))

	q := "\x03SELECT 1 FROM t WHERE c='4111111111111111'"
	pkt := append([]byte{byte(len(q)), 0, 0, 0}, q...)
	got, changed = m.Mask("mysql", pkt)
	assert.True(t, changed)
	wq := "\x03SELECT 1 FROM t WHERE c='[card]'"
	assert.Equal(t, string(append([]byte{byte(len(wq)), 0, 0, 0}, wq...)), string(got))

	got, changed = m.Mask("raw", []byte("token=Bearer abc"))
	assert.True(t, changed)
	assert.Equal(t, "token=Bearer [token]", string(got))
}

func TestMaskSession(t *testing.T) {
	m := testMasker(t)
	s := sampleSession("m")
	s.Inbound.Request = []byte("GET / HTTP/1.1\r\nAuthorization: x\r\n\r\n")
	s.Inbound.Response = []byte(withLen("HTTP/1.1 200 OK\r\n", `{"password":"p"}`))
	s.Calls = append(s.Calls, Call{Proto: "http", Request: []byte("POST /pay HTTP/1.1\r\nX-Api-Key: k\r\n\r\n"),
		Response: []byte("HTTP/1.1 200 OK\r\n\r\ncard 4111111111111111")})
	s.Calls[0].Response = []byte("$16\r\n4111111111111111\r\n")
	assert.True(t, m.MaskSession(s))
	assert.Equal(t, "GET / HTTP/1.1\r\nAuthorization: ***\r\n\r\n", string(s.Inbound.Request))
	assert.Equal(t, withLen("HTTP/1.1 200 OK\r\n", `{"password":"***"}`), string(s.Inbound.Response))
	assert.Equal(t, "POST /pay HTTP/1.1\r\nX-Api-Key: [key]\r\n\r\n", string(s.Calls[2].Request))
	assert.Equal(t, "HTTP/1.1 200 OK\r\n\r\ncard [card]", string(s.Calls[2].Response))
	assert.Equal(t, "$6\r\n[card]\r\n", string(s.Calls[0].Response), "Redis bulk length fixed")
	assert.False(t, m.MaskSession(s), "masking twice changes nothing more")
}

func TestParseMaskerErrors(t *testing.T) {
	tests := []struct{ name, rules, want string }{
		{"unknown kind", "foo bar", "rules.txt:1: unknown rule \"foo\""},
		{"bad regex", "# c\nregex a(b", "rules.txt:2: regex \"a(b\""},
		{"path without $", "json a.b", "must start with $"},
		{"bad index", "json $.a[x]", "[x] is not an index"},
		{"nothing", "header", "names nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMasker(strings.NewReader(tc.rules), "rules.txt")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func FuzzMaskHTTP(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 15\r\n\r\n{\"password\":1}x"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n"))
	f.Add([]byte("*1\r\n$4\r\nPING\r\n"))
	rules, _ := ParseMasker(strings.NewReader(testRules), "rules")
	f.Fuzz(func(t *testing.T, p []byte) {
		for _, proto := range []string{"http", "redis", "mysql", "postgres", "http2", "grpc", "raw"} {
			out, _ := rules.Mask(proto, p)
			again, changed := rules.Mask(proto, out)
			if proto == "http" && changed && string(again) != string(out) && !strings.Contains(string(out), "Transfer-Encoding") {
				// masking is idempotent on what it produced
				t.Fatalf("%s: second pass changed %q to %q", proto, out, again)
			}
		}
	})
}

// TestMaskRandom: "random crypto" removes a session's crypto/rand draws and
// marks it masked; the seed stays; text rules never touch the draws;
// "random" with anything else is refused.
func TestMaskRandom(t *testing.T) {
	draws := [][]byte{[]byte("Bearer abc"), {0xff, 1}}
	s := &Session{ID: "r", Random: &Random{Seed: 7, Math: 2, Crypto: draws}}
	require.False(t, testMasker(t).MaskSession(s), "text rules changed the draws")
	require.Equal(t, draws, s.Random.Crypto)

	m, err := ParseMasker(strings.NewReader("random crypto\n"), "rules.txt")
	require.NoError(t, err)
	kept := s.Random
	require.True(t, m.MaskSession(s))
	require.Equal(t, &Random{Seed: 7, Math: 2, Masked: true}, s.Random)
	require.Equal(t, draws, kept.Crypto, "the session's earlier Random is not modified")
	require.False(t, m.MaskSession(s), "nothing left to mask")
	require.False(t, m.MaskSession(&Session{ID: "n"}))

	for _, bad := range []string{"random", "random math", "random crypto [x]"} {
		_, err := ParseMasker(strings.NewReader(bad+"\n"), "rules.txt")
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "rules.txt:1", bad)
	}
}

// Every protocol's payloads are masked through its wire package, each
// side as what it is: a PostgreSQL Bind's parameters and DataRow values,
// a MySQL result row, an HTTP/2 call's header and body.
func TestMaskSessionEveryProtocol(t *testing.T) {
	m := testMasker(t)
	bind := func(v string) []byte { // Bind of statement "" with one text parameter, then Sync
		body := "\x00\x00\x00\x00\x00\x01" + string([]byte{0, 0, 0, byte(len(v))}) + v + "\x00\x00"
		return append([]byte{'B', 0, 0, 0, byte(4 + len(body))}, append([]byte(body), 'S', 0, 0, 0, 4)...)
	}
	dataRow := func(v string) []byte {
		body := "\x00\x01" + string([]byte{0, 0, 0, byte(len(v))}) + v
		return append([]byte{'D', 0, 0, 0, byte(4 + len(body))}, body...)
	}
	mysqlRow := func(v string) []byte { // column count, definition, EOF, row, EOF
		def := "\x03def\x00\x00\x00\x01c\x00\x0c\x21\x00\xff\x00\x00\x00\xfd\x00\x00\x00\x00\x00"
		pkt := func(seq byte, p string) string { return string([]byte{byte(len(p)), 0, 0, seq}) + p }
		return []byte(pkt(1, "\x01") + pkt(2, def) + pkt(3, "\xfe\x00\x00\x02\x00") +
			pkt(4, string([]byte{byte(len(v))})+v) + pkt(5, "\xfe\x00\x00\x02\x00"))
	}
	h2 := func(auth, body string) []byte {
		return []byte(":method: POST\r\n:path: /pay\r\nauthorization: " + auth + "\r\ncontent-type: application/json\r\n\r\n" +
			"DATA " + strconv.Itoa(len(body)) + "\r\n" + body)
	}
	s := &Session{ID: "p", Calls: []Call{
		{Proto: "postgres", Request: bind("4111111111111111"), Response: dataRow("Bearer abc")},
		{Proto: "mysql", Request: []byte("\x01\x00\x00\x00\x0e"), Response: mysqlRow("4111111111111111")},
		{Proto: "http2", Request: h2("Bearer x", `{"password":"p"}`), Response: h2("none", "")},
	}}
	require.True(t, m.MaskSession(s))
	assert.Equal(t, string(bind("[card]")), string(s.Calls[0].Request))
	assert.Equal(t, string(dataRow("Bearer [token]")), string(s.Calls[0].Response))
	assert.Equal(t, string(mysqlRow("[card]")), string(s.Calls[1].Response))
	assert.Equal(t, string(h2("***", `{"password":"***"}`)), string(s.Calls[2].Request))
	assert.Equal(t, string(h2("***", "")), string(s.Calls[2].Response))
}

// A nil Masker masks nothing, and a call's decoded form made before
// masking is masked by the patterns.
func TestMaskNilAndDecoded(t *testing.T) {
	var none *Masker
	s := &Session{ID: "d", Calls: []Call{{Proto: "mysql", Request: []byte{1, 0, 0, 0, 0x0e}, Decoded: "card 4111111111111111"}}}
	require.False(t, none.MaskSession(s))
	require.True(t, testMasker(t).MaskSession(s))
	require.Equal(t, "card [card]", s.Calls[0].Decoded)
}
