package h2mask_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"testing"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/http2/h2mask"
	"github.com/retrace-dev/retrace/wire/wiretest"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"
)

func maskRules() *wiretest.Rules {
	return &wiretest.Rules{
		Headers:  map[string]string{"authorization": "***"},
		Fields:   map[string]string{"password": "***"},
		JSONKeys: map[string]string{"password": "***"},
		Patterns: []wiretest.Pattern{
			wiretest.Pat(`\b(?:\d[\s-]?){12,18}\d\b`, "[card]"),
			wiretest.Pat(`(?i)(bearer\s+)[A-Za-z0-9._-]+`, "${1}[token]"),
		},
	}
}

func hf(kv ...string) []hpack.HeaderField {
	var out []hpack.HeaderField
	for i := 0; i < len(kv); i += 2 {
		out = append(out, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// user is a protobuf message {1: name, 2: {1: card}, 3: id}.
func user(name, card string) []byte {
	var inner []byte
	inner = protowire.AppendTag(inner, 1, protowire.BytesType)
	inner = protowire.AppendString(inner, card)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, inner)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	return protowire.AppendVarint(b, 42)
}

func grpcFrame(compressed bool, msg []byte) []byte {
	flag := byte(0)
	if compressed {
		flag = 1
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write(msg)
		_ = w.Close()
		msg = b.Bytes()
	}
	return append(binary.BigEndian.AppendUint32([]byte{flag}, uint32(len(msg))), msg...)
}

func request(auth, path, body string) []byte {
	return http2.AppendMessage(nil, http2.Message{Header: hf(":method", "POST", ":path", path, ":authority", "api",
		"content-type", "application/json", "authorization", auth), Data: []byte(body)}, nil)
}

// grpcResponse holds two messages, the pace marking each.
func grpcResponse(name, card, status string, compressed bool) []byte {
	one, two := grpcFrame(compressed, user(name, card)), grpcFrame(false, user("x", card))
	return http2.AppendMessage(nil, http2.Message{
		Header:  hf(":status", "200", "content-type", "application/grpc", "grpc-encoding", "gzip"),
		Data:    append(one, two...),
		Trailer: hf("grpc-status", "0", "grpc-message", status),
	}, []http2.Mark{{Request: 10, Response: len(one)}, {Request: 20, Response: len(one) + len(two)}})
}

var maskCases = []wiretest.MaskCase{
	{Name: "request headers, query and JSON body",
		In:   request("Bearer abc", "/pay?password=x&card=4111111111111111", `{"password":"p","n":"4111 1111 1111 1111"}`),
		Want: request("***", "/pay?password=%2A%2A%2A&card=%5Bcard%5D", `{"n":"[card]","password":"***"}`)},
	{Name: "gRPC messages by their protobuf strings, pace moved", Side: wire.Server,
		In:   grpcResponse("Bearer abc.def", "4111111111111111", "Bearer zzz", false),
		Want: grpcResponse("Bearer [token]", "[card]", "Bearer [token]", false)},
	{Name: "gzip gRPC message", Side: wire.Server,
		In:   grpcResponse("Bearer abc.def", "4111111111111111", "ok", true),
		Want: grpcResponse("Bearer [token]", "[card]", "ok", true)},
	{Name: "nothing to mask", In: request("Basic", "/a?b=c", `{"a":1}`), Want: request("***", "/a?b=c", `{"a":1}`)},
	{Name: "unchanged", Side: wire.Server, In: grpcResponse("a", "b", "c", false), Want: grpcResponse("a", "b", "c", false)},
	{Name: "not the recorded form: text, reported", In: []byte("PRI * HTTP/2.0 card=4111111111111111"),
		Want: []byte("PRI * HTTP/2.0 card=[card]"), Skips: 1},
}

func TestMask(t *testing.T) {
	if h2mask.Name != http2.Name || h2mask.GRPCName != http2.GRPCName {
		t.Fatalf("names %q %q, wire/http2 records %q %q", h2mask.Name, h2mask.GRPCName, http2.Name, http2.GRPCName)
	}
	wiretest.Masks(t, h2mask.Masker, maskRules, maskCases...)
	if _, ok := any(http2.Protocol).(wire.Masker); !ok {
		t.Fatal("http2.Protocol is no wire.Masker")
	}
}

// The masked halves parse as wire/http2 reads recorded halves, with their
// pace on the masked messages' boundaries.
func TestMaskedParses(t *testing.T) {
	in := grpcResponse("Bearer abc.def", "4111111111111111", "Bearer zzz", false)
	out := h2mask.Mask(wire.Server, in, maskRules())
	m, pace, err := http2.ParseMessage(out)
	if err != nil {
		t.Fatal(err)
	}
	first := len(grpcFrame(false, user("Bearer [token]", "[card]")))
	if len(pace) != 2 || pace[0].Response != first || pace[1].Response != len(m.Data) || pace[0].Request != 10 {
		t.Fatalf("pace %v, data of %d bytes, first message %d", pace, len(m.Data), first)
	}
}

func FuzzMask(f *testing.F) {
	well := func(_ wire.Side, b []byte) bool { _, _, err := http2.ParseMessage(b); return err == nil }
	wiretest.FuzzMasker(f, h2mask.Masker, maskRules, well, maskCases...)
}

// gRPC with a JSON codec: its messages are masked as JSON and text.
func TestMaskGRPCJSON(t *testing.T) {
	msg := func(s string) []byte {
		return http2.AppendMessage(nil, http2.Message{Header: hf(":method", "POST", ":path", "/s/M", "content-type", "application/grpc+json"),
			Data: grpcFrame(false, []byte(s))}, nil)
	}
	wiretest.Masks(t, h2mask.Masker, maskRules, wiretest.MaskCase{Name: "json messages",
		In: msg(`{"password":"x","card":"4111111111111111"}`), Want: msg(`{"card":"[card]","password":"***"}`)})
}
