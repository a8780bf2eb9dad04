package recording

import (
	"strings"
	"testing"
)

// benchSession is a request of the example fan-out service as recorded: a
// JSON POST and its answer, a Redis pipeline, a MySQL prepared INSERT with
// its execute and a SELECT with its text rows, and an HTTP call.
func benchSession() *Session {
	pkt := func(seq byte, p string) string { return string([]byte{byte(len(p)), 0, 0, seq}) + p }
	lenc := func(s string) string { return string([]byte{byte(len(s))}) + s }
	def := "\x03def\x00\x00\x00" + lenc("card") + "\x00\x0c\x21\x00\xff\x00\x00\x00\xfd\x00\x00\x00\x00\x00"
	rows := pkt(1, "\x01") + pkt(2, def) + pkt(3, "\xfe\x00\x00\x02\x00")
	for i := range 8 {
		rows += pkt(byte(4+i), lenc("card 4111111111111111 row"))
	}
	rows += pkt(12, "\xfe\x00\x00\x02\x00")
	body := `{"user":{"name":"a","phone":"+4912345678"},"items":[{"sku":"x","card":"4111 1111 1111 1111"}],"password":"p"}`
	return &Session{ID: "b", Inbound: Inbound{Proto: "http",
		Request:  []byte(withLen("POST /orders?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\nContent-Type: application/json\r\n", body)),
		Response: []byte(withLen("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n", `{"id":7,"access_token":"t"}`))},
		Calls: []Call{
			{Proto: "redis", Request: []byte("*3\r\n$3\r\nSET\r\n$6\r\norder7\r\n$19\r\n4111 1111 1111 1111\r\n*2\r\n$3\r\nGET\r\n$5\r\nstock\r\n"),
				Response: []byte("+OK\r\n$2\r\n42\r\n")},
			{Proto: "mysql", Request: []byte(pkt(0, "\x03INSERT INTO orders (card, n) VALUES ('4111111111111111', 3)")),
				Response: []byte(pkt(1, "\x00\x01\x00\x02\x00\x00\x00"))},
			{Proto: "mysql", Request: []byte(pkt(0, "\x03SELECT card FROM orders WHERE user = 'a'")), Response: []byte(rows)},
			{Proto: "http", Request: []byte("GET /price?sku=x HTTP/1.1\r\nHost: p\r\n\r\n"),
				Response: []byte(withLen("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", `{"price":3,"card":"4111111111111111"}`))},
		}}
}

// BenchmarkMaskSession: the background writer's masking of one session
// with the rules of mask_test.go.
func BenchmarkMaskSession(b *testing.B) {
	m, err := ParseMasker(strings.NewReader(testRules), "rules")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if !m.MaskSession(benchSession()) {
			b.Fatal("nothing masked")
		}
	}
}
