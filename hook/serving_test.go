package hook

import "testing"

func TestInterimOnly(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     bool
	}{
		{"100 Continue", "HTTP/1.1 100 Continue\r\n\r\n", true},
		{"HTTP/1.0", "HTTP/1.0 100 Continue\r\n\r\n", true},
		{"103 with a header", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", true},
		{"101 switches protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", false},
		{"final", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"interim then final", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", false},
		{"unfinished head", "HTTP/1.1 100 Continue\r\n", false},
		{"short", "HTTP/1.1 1", false},
		{"empty", "", false},
		{"not HTTP", "+OK\r\n\r\n", false},
	} {
		if got := interimOnly([]byte(c.in)); got != c.want {
			t.Errorf("%s: interimOnly(%q) = %v, want %v", c.name, c.in, got, c.want)
		}
	}
}
