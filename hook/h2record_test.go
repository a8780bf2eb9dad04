package hook

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

func TestSwitchesToH2C(t *testing.T) {
	for _, tc := range []struct {
		resp string
		want bool
	}{
		{"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", true},
		{"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket, H2C\r\n\r\n", true},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", false},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n", false}, // head not whole
		{"HTTP/1.1 100 Continue\r\nUpgrade: h2c\r\n\r\n", false},
		{"HTTP/1.1 200 OK\r\nUpgrade: h2c\r\n\r\n", false},
		{"HTTP/1.1 101 Switching Protocols\r\nX-Upgrade: h2c\r\n\r\n", false},
	} {
		if got := switchesToH2C([]byte(tc.resp)); got != tc.want {
			t.Errorf("%q: %v", tc.resp, got)
		}
	}
}

// FuzzSwitchesToH2C: what the agent takes for a switch to h2c is a 101
// response whose Upgrade header net/http reads as naming h2c.
func FuzzSwitchesToH2C(f *testing.F) {
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 101 x\r\nUpgrade: a, h2c\r\n\r\nPRI"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !switchesToH2C(b) {
			return
		}
		end := bytes.Index(b, []byte("\r\n\r\n"))
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b[:end+4])), nil)
		if err != nil {
			return // a head net/http refuses: the server did not write it
		}
		ok := false
		for _, v := range resp.Header.Values("Upgrade") {
			for _, tok := range strings.Split(v, ",") {
				ok = ok || strings.EqualFold(strings.TrimSpace(tok), "h2c")
			}
		}
		if resp.StatusCode != 101 || !ok {
			t.Fatalf("%q taken for a switch to h2c: status %d, Upgrade %q", b, resp.StatusCode, resp.Header.Values("Upgrade"))
		}
	})
}
