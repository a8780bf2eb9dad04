package mockserver

import (
	"testing"

	"github.com/retrace-dev/retrace/recording"
)

func TestProtoForPrefersARecognisedProtocolOverRaw(t *testing.T) {
	cases := []struct {
		name   string
		protos []string // of calls to one destination, in recorded order
		want   string
	}{
		{"raw first, then mysql", []string{"raw", "mysql", "raw"}, "mysql"},
		{"mysql first", []string{"mysql", "raw"}, "mysql"},
		{"only raw", []string{"raw", "raw"}, "raw"},
		{"redis", []string{"redis"}, "redis"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(Config{Listen: "127.0.0.1:0", Admin: "-"})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range c.protos {
				s.AddSession(&recording.Session{V: 1, ID: "s" + string(rune('a'+i)),
					Calls: []recording.Call{{Proto: p, Dst: "10.0.0.7:29306", Request: []byte("x"), Response: []byte("y")}}})
			}
			if got := s.protoFor("10.0.0.7:29306"); got != c.want {
				t.Fatalf("protoFor = %q, want %q", got, c.want)
			}
		})
	}
}
