package mysql_test

import (
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/stretchr/testify/assert"
)

func TestDetectGreeting(t *testing.T) {
	greeting := []byte("\x2a\x00\x00\x00\x0a5.5.5-10.11-MariaDB\x00" + strings.Repeat("x", 22))
	for n := 1; n <= len(greeting); n++ {
		assert.NotEqual(t, wire.No, mysql.Protocol.Detect(nil, greeting[:n]), "%q", greeting[:n])
	}
	for _, p := range []string{"\x2a\x04", "\x05\x00\x00", "\x2a\x00\x01", "\x2a\x00\x00\x01", "HTTP/1.1 200", "+OK\r\n", "\x2a\x00\x00\x00\x09"} {
		assert.Equal(t, wire.No, mysql.Protocol.Detect(nil, []byte(p)), "%q", p)
	}
}

func TestDetectGreetingSure(t *testing.T) {
	greeting := []byte("\x2a\x00\x00\x00\x0a5.5.5-10.11-MariaDB\x00" + strings.Repeat("x", 22))
	assert.Equal(t, wire.Sure, mysql.Protocol.Detect(nil, greeting))
	assert.Equal(t, wire.No, mysql.Protocol.Detect([]byte("GET / HTTP/1.1\r\n"), nil), "the client spoke first")
}
