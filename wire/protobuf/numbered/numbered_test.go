package numbered_test

import (
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/retrace-dev/retrace/wire/protobuf/numbered"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDecode: fields by number, a repeated one as a list, a nested
// message, a string; bytes that are not a message name the offset.
func TestDecode(t *testing.T) {
	var inner []byte
	inner = protowire.AppendTag(inner, 1, protowire.VarintType)
	inner = protowire.AppendVarint(inner, 7)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("shop-01"))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, inner)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 2)
	m, err := numbered.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if m["1"] != "shop-01" || len(m["3"].([]any)) != 2 {
		t.Fatalf("%v", m)
	}
	if n, ok := m["2"].(map[string]any); !ok || n["1"] == nil {
		t.Fatalf("nested: %v", m["2"])
	}
	if _, err := numbered.Decode([]byte{0xff}); err == nil {
		t.Fatal("a bad tag decoded")
	}
}
