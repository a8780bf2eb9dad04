package descriptors_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/retrace-dev/retrace/wire/protobuf"
	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

func TestSchema(t *testing.T) {
	s, err := descriptors.Of(testpb.File_grpc_testing_test_proto)
	if err != nil {
		t.Fatal(err)
	}
	// And the same from a FileDescriptorSet file, as protoc writes it.
	var set descriptorpb.FileDescriptorSet
	set.File = append(set.File,
		protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_empty_proto),
		protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_messages_proto),
		protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_test_proto))
	b, _ := proto.Marshal(&set)
	path := filepath.Join(t.TempDir(), "set.pb")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := descriptors.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*descriptors.Schema{"linked": s, "file": fromFile} {
		t.Run(name, func(t *testing.T) {
			in, out, err := s.Method("/grpc.testing.TestService/UnaryCall")
			if err != nil {
				t.Fatal(err)
			}
			if out.FullName() != "grpc.testing.SimpleResponse" {
				t.Fatalf("output %s", out.FullName())
			}
			m, err := descriptors.Decode(in, sample(t))
			if err != nil {
				t.Fatal(err)
			}
			want := `{"fill_username":true,"payload":{"body":"aGVsbG8="},"response_size":100,"response_status":{"code":5,"message":"gone"}}`
			if got := js(t, m); got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
		})
	}
	for _, p := range []string{"/grpc.testing.TestService/Nope", "/nope.S/M", "UnaryCall"} {
		if _, _, err := s.Method(p); err == nil {
			t.Fatalf("%s: no error", p)
		}
	}
	if _, err := descriptors.Parse([]byte("not a set")); err == nil {
		t.Fatal("garbage parsed as a descriptor set")
	}
}

func TestDecodeMethod(t *testing.T) {
	s, err := descriptors.Of(testpb.File_grpc_testing_test_proto)
	if err != nil {
		t.Fatal(err)
	}
	var iface protobuf.Schema = s
	tree, known, err := iface.DecodeMethod("/grpc.testing.TestService/UnaryCall", false, sample(t))
	if err != nil || !known || js(t, tree) != `{"fill_username":true,"payload":{"body":"aGVsbG8="},"response_size":100,"response_status":{"code":5,"message":"gone"}}` {
		t.Fatalf("request: %v %v %s", known, err, js(t, tree))
	}
	if _, known, _ := iface.DecodeMethod("/grpc.testing.TestService/Nope", false, sample(t)); known {
		t.Fatal("an unknown method was known")
	}
	if _, _, err := iface.DecodeMethod("/grpc.testing.TestService/UnaryCall", true, []byte{0x0a, 0x05, 'a'}); err == nil {
		t.Fatal("a truncated response decoded")
	}
	var none *descriptors.Schema
	if _, known, err := protobuf.Schema(none).DecodeMethod("/grpc.testing.TestService/UnaryCall", false, sample(t)); known || err != nil {
		t.Fatalf("a nil schema: %v %v", known, err)
	}
}
