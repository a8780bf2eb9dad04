package regress

import (
	"fmt"
	"testing"

	"golang.org/x/net/http2/hpack"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

// unaryCall is the request half of a UnaryCall stream in the recorded
// form, with extra header fields.
func unaryCall(t *testing.T, size int32, body string, extra ...hpack.HeaderField) []byte {
	t.Helper()
	b, err := proto.Marshal(&testpb.SimpleRequest{ResponseSize: size, Payload: &testpb.Payload{Body: []byte(body)}})
	if err != nil {
		t.Fatal(err)
	}
	h := append([]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/grpc.testing.TestService/UnaryCall"}, {Name: ":authority", Value: "inventory:50051"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}, extra...)
	return http2.AppendMessage(nil, http2.Message{Header: h, Data: grpc.Append(nil, grpc.Message{Data: b}), End: true}, nil)
}

// TestDownstreamGRPCFindings: a gRPC call the replay made is compared with
// the recorded one field by field — by field number, or by name with a
// schema — the in-band trace field the mock sees and a relocated
// authority are not differences, and rules apply to the message paths.
func TestDownstreamGRPCFindings(t *testing.T) {
	const dst = "10.0.0.9:50051"
	sess := &recording.Session{ID: "s", Calls: []recording.Call{{Seq: 0, Proto: http2.GRPCName, Dst: dst, Request: unaryCall(t, 40, "sku-1")}}}
	live := unaryCall(t, 41, "sku-1", hpack.HeaderField{Name: http2.TraceField, Value: "t1"})
	rep := &mockserver.TraceReport{Calls: []mockserver.ObservedCall{{Seq: 0, Matched: 0, Proto: http2.GRPCName, Dst: dst, Request: live}}}
	schema, err := descriptors.Of(testpb.File_grpc_testing_test_proto)
	if err != nil {
		t.Fatal(err)
	}
	label := func(fs []Finding) string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s %s %s→%s", f.Label(), f.Kind, f.Want, f.Got))
		}
		return fmt.Sprint(out)
	}
	fs, calls := downstream(nil, nil, "POST /o", sess, rep)
	if want := "[downstream #0 grpc 10.0.0.9:50051: message[0].2 changed 40→41]"; label(fs) != want {
		t.Errorf("by number: %s, want %s", label(fs), want)
	}
	if len(calls) != 1 || calls[0].RecordedForm == nil || calls[0].ReplayedForm == nil {
		t.Fatalf("call details %+v", calls)
	}
	fs, _ = downstream(nil, schema, "POST /o", sess, rep)
	if want := "[downstream #0 grpc 10.0.0.9:50051: message[0].response_size changed 40→41]"; label(fs) != want {
		t.Errorf("by name: %s, want %s", label(fs), want)
	}
	rules, err := diff.NewRules(diff.Rule{Scope: diff.ScopeDownstream, Dst: "10.0.0.9:*", Tolerance: "message[*].response_size", Abs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if fs, _ := downstream(rules, schema, "POST /o", sess, rep); len(fs) != 0 {
		t.Errorf("with a tolerance: %s", label(fs))
	}
	// The service dialled another name for the destination: the mock
	// mapped it, and the live authority is no difference.
	moved := unaryCall(t, 40, "sku-1", hpack.HeaderField{Name: http2.TraceField, Value: "t1"})
	m, _, _ := http2.ParseMessage(moved)
	for i := range m.Header {
		if m.Header[i].Name == ":authority" {
			m.Header[i].Value = "inventory.staging:50051"
		}
	}
	rep = &mockserver.TraceReport{Calls: []mockserver.ObservedCall{{Seq: 0, Matched: 0, Proto: http2.GRPCName, Dst: dst, Live: "inventory.staging:50051",
		Request: http2.AppendMessage(nil, m, nil)}}}
	if fs, _ := downstream(nil, schema, "POST /o", sess, rep); len(fs) != 0 {
		t.Errorf("relocated: %s", label(fs))
	}
	// grpc-go sends a call's remaining deadline: it differs on every run
	// and is no difference; another header is.
	sess = &recording.Session{ID: "s", Calls: []recording.Call{{Seq: 0, Proto: http2.GRPCName, Dst: dst,
		Request: unaryCall(t, 40, "sku-1", hpack.HeaderField{Name: "grpc-timeout", Value: "4999872u"}, hpack.HeaderField{Name: "x-user", Value: "u1"})}}}
	for live, want := range map[string]string{
		"u1": "[]",
		"u2": "[downstream #0 grpc 10.0.0.9:50051: header.x-user changed u1→u2]",
	} {
		rep = &mockserver.TraceReport{Calls: []mockserver.ObservedCall{{Seq: 0, Matched: 0, Proto: http2.GRPCName, Dst: dst,
			Request: unaryCall(t, 40, "sku-1", hpack.HeaderField{Name: "grpc-timeout", Value: "4999310u"}, hpack.HeaderField{Name: "x-user", Value: live})}}}
		if fs, _ := downstream(nil, schema, "POST /o", sess, rep); label(fs) != want {
			t.Errorf("grpc-timeout, x-user %s: %s, want %s", live, label(fs), want)
		}
	}
}
