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
