package protocols_test

import (
	"testing"

	"github.com/retrace-dev/retrace/wire/protocols"
)

// BenchmarkDetect: detection of a connection's first bytes, which capture
// runs on the first write of every connection and on reads of
// connections whose writes it never saw.
func BenchmarkDetect(b *testing.B) {
	for _, bc := range []struct {
		name           string
		client, server []byte
	}{
		{"http request", []byte("GET /items/7 HTTP/1.1\r\nHost: x\r\n\r\n"), nil},
		{"resp array", []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), nil},
		{"redis reply, no write seen", nil, []byte("+OK\r\n")},
		{"raw line", []byte("GET k t\n"), nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				protocols.All.Detect(bc.client, bc.server)
			}
		})
	}
}
