package agenttest

import (
	"fmt"
	"testing"
)

func encodeRESP(args []string) string {
	s := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		s += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	return s
}

// FuzzParseRESP: the mock's RESP decoder never reads past its input, and
// what it decodes re-encodes to exactly the bytes it consumed.
func FuzzParseRESP(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$3\r\nk:x\r\n"))
	f.Add([]byte("*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n"))
	f.Add([]byte("*2\r\n$3\r\nGE"))
	f.Add([]byte("+OK\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		args, n, err := parseRESP(b)
		if err != nil || n == 0 {
			return
		}
		if n > len(b) {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		if got := encodeRESP(args); got != string(b[:n]) {
			t.Fatalf("decoded %q from %q, which re-encodes to %q", args, b[:n], got)
		}
	})
}

func TestAnswerRESP(t *testing.T) {
	in := encodeRESP([]string{"HELLO", "3"}) + encodeRESP([]string{"GET", "k:rt1"}) + "*2\r\n$3\r\nGE"
	rest, out, err := answer(ProtoRESP, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := "-ERR unknown command 'HELLO'\r\n$3\r\nrt1\r\n"; string(out) != want {
		t.Fatalf("answered %q, want %q", out, want)
	}
	if string(rest) != "*2\r\n$3\r\nGE" {
		t.Fatalf("rest %q", rest)
	}
}
