package wire_test

import (
	"bytes"
	"testing"

	"github.com/retrace-dev/retrace/wire"
)

// prefixProto is sure of connections whose client starts with its prefix,
// and waits while the client's bytes are a prefix of it.
type prefixProto struct {
	wire.Protocol // methods detection does not call
	name, prefix  string
	server        bool // looks at the server's bytes instead
}

func (p prefixProto) Name() string { return p.name }
func (p prefixProto) Detect(client, server []byte) wire.Verdict {
	b := client
	if p.server {
		if len(server) == 0 && len(client) > 0 {
			return wire.No // the client spoke first
		}
		b = server
	}
	switch {
	case bytes.HasPrefix(b, []byte(p.prefix)):
		return wire.Sure
	case bytes.HasPrefix([]byte(p.prefix), b):
		return wire.NotYet
	}
	return wire.No
}

func testRegistry() *wire.Registry {
	return wire.NewRegistry(prefixProto{name: "raw"},
		prefixProto{name: "hello", prefix: "HELLO WORLD\r\n"},
		prefixProto{name: "greet", prefix: "\x0aGREET", server: true})
}

func TestDetectorSplits(t *testing.T) {
	reg := testRegistry()
	cases := []struct {
		name   string
		client string
		server string
		want   string
	}{
		{"sure at once", "HELLO WORLD\r\nrest", "", "hello"},
		{"server first", "", "\x0aGREETING", "greet"},
		{"no from every protocol", "GET k t\n", "", "raw"},
		{"empty client bytes wait", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// every split of the client's bytes into two feeds
			for cut := 0; cut <= len(tc.client); cut++ {
				d := reg.NewDetector()
				var got wire.Protocol
				if tc.server != "" {
					got, _ = d.Feed(wire.Server, []byte(tc.server))
				}
				for _, part := range []string{tc.client[:cut], tc.client[cut:]} {
					if got == nil && part != "" {
						got, _ = d.Feed(wire.Client, []byte(part))
					}
				}
				name := ""
				if got != nil {
					name = got.Name()
				}
				if name != tc.want {
					t.Fatalf("cut %d: detected %q, want %q", cut, name, tc.want)
				}
			}
		})
	}
}

func TestDetectorBound(t *testing.T) {
	reg := testRegistry()
	d := reg.NewDetector()
	// "HELLO" forever undecided byte by byte, then past the bound
	if p, ok := d.Feed(wire.Client, []byte("HEL")); ok {
		t.Fatalf("decided %s on a prefix", p.Name())
	}
	if got := d.Client(); string(got) != "HEL" {
		t.Fatalf("kept %q", got)
	}
	if p, ok := d.Feed(wire.Client, bytes.Repeat([]byte("x"), wire.DetectBound)); !ok || p.Name() != "raw" {
		t.Fatalf("after the bound: %v %v, want raw", p, ok)
	}
	if p := reg.DetectNow([]byte("HELLO"), nil); p.Name() != "raw" {
		t.Fatalf("DetectNow undecided = %s, want the fallback", p.Name())
	}
}

func TestRegistryLookup(t *testing.T) {
	reg := testRegistry()
	if p, ok := reg.Lookup("greet"); !ok || p.Name() != "greet" {
		t.Fatal("greet not found")
	}
	if reg.For("postgres").Name() != "raw" {
		t.Fatal("an unknown name is not the fallback")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a duplicate name did not panic")
		}
	}()
	wire.NewRegistry(prefixProto{name: "raw"}, prefixProto{name: "raw"})
}
