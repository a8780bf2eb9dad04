package wire_test

import (
	"bytes"
	"testing"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/protocols"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

// upperMasker masks by upper-casing, to tell which masker ran.
type upperMasker struct{ tag string }

func (u upperMasker) Mask(_ wire.Side, msg []byte, _ wire.MaskRules) []byte {
	return append([]byte(u.tag), bytes.ToUpper(msg)...)
}

type maskedProto struct {
	prefixProto
	upperMasker
}

func TestMaskerFor(t *testing.T) {
	own := maskedProto{prefixProto{name: "own", prefix: "O"}, upperMasker{"own:"}}
	plain := prefixProto{name: "plain", prefix: "P"}
	r := wire.NewRegistry(prefixProto{name: "raw"}, own, plain)
	rules := &wiretest.Rules{Patterns: []wiretest.Pattern{wiretest.Pat(`x`, "y")}}
	for name, want := range map[string]string{
		"own":     "own:AXB",
		"plain":   "ayb", // a protocol that has none: the patterns over the bytes
		"unknown": "ayb",
	} {
		if got := string(r.MaskerFor(name).Mask(wire.Client, []byte("axb"), rules)); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// Every protocol of the table masks; a recorded HTTP/2 or gRPC call by
// its header fields.
func TestEveryProtocolMasks(t *testing.T) {
	for _, p := range append(protocols.All.Protocols(), protocols.All.Fallback()) {
		if _, ok := p.(wire.Masker); !ok {
			t.Errorf("%s is no wire.Masker", p.Name())
		}
	}
	rules := &wiretest.Rules{Patterns: []wiretest.Pattern{wiretest.Pat(`secret`, "***")}}
	for _, name := range []string{"http2", "grpc"} {
		in := []byte(":method: GET\r\nx-token: secret\r\n\r\nDATA 0\r\n")
		if got := string(protocols.All.MaskerFor(name).Mask(wire.Client, in, rules)); got != ":method: GET\r\nx-token: ***\r\n\r\nDATA 0\r\n" {
			t.Errorf("%s: %q", name, got)
		}
	}
}
