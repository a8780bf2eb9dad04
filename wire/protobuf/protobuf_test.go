package protobuf_test

import (
	"encoding/json"
	"testing"

	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-dev/retrace/wire/protobuf"
)

func sample(t testing.TB) []byte {
	b, err := proto.Marshal(&testpb.SimpleRequest{
		ResponseSize:   100,
		Payload:        &testpb.Payload{Body: []byte("hello")},
		FillUsername:   true,
		ResponseStatus: &testpb.EchoStatus{Code: 5, Message: "gone"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func js(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecodeRaw(t *testing.T) {
	m, err := protobuf.DecodeRaw(sample(t))
	if err != nil {
		t.Fatal(err)
	}
	// SimpleRequest: 2 response_size, 3 payload{2 body}, 4 fill_username,
	// 7 response_status{1 code, 2 message}.
	want := `{"2":100,"3":{"2":"hello"},"4":1,"7":{"1":5,"2":"gone"}}`
	if got := js(t, m); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if _, err := protobuf.DecodeRaw([]byte{0x0a, 0x05, 'a'}); err == nil {
		t.Fatal("a truncated field decoded")
	}
	rep, _ := protobuf.DecodeRaw([]byte{0x08, 1, 0x08, 2, 0x12, 0x02, 0xff, 0x00})
	if got := js(t, rep); got != `{"1":[1,2],"2":{"base64":"/wA="}}` {
		t.Fatalf("repeated and binary: %s", got)
	}
}

// FuzzDecodeRaw checks that decoding never panics and that what decodes
// encodes as JSON.
func FuzzDecodeRaw(f *testing.F) {
	f.Add(sample(f))
	f.Add([]byte{0x0b, 0x08, 0x01, 0x0c})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := protobuf.DecodeRaw(b)
		if err == nil {
			if _, err := json.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
	})
}
