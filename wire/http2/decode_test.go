package http2_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

func fieldsOf(d wire.Decoded) string {
	var b strings.Builder
	for _, f := range d.Fields {
		b.WriteString(f.Path + "=" + f.Value + "\n")
	}
	return b.String()
}

func simpleResponse(t testing.TB, user string) []byte {
	b, err := proto.Marshal(&testpb.SimpleResponse{Username: user, Payload: &testpb.Payload{Body: []byte("ab")}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodePaths: the paths of the contract (H2CONTRACT.md point 6), by
// field number and by name.
func TestDecodePaths(t *testing.T) {
	req := http2.Message{Header: []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/grpc.testing.TestService/UnaryCall"},
		{Name: ":authority", Value: "x:1"}, {Name: "content-type", Value: "application/grpc"}, {Name: "x-a", Value: "1"}}}
	resp := http2.Message{
		Header:  []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}},
		Data:    grpc.Append(grpc.Append(nil, grpc.Message{Data: simpleResponse(t, "ann")}), grpc.Message{}),
		Trailer: []hpack.HeaderField{{Name: "grpc-status", Value: "5"}, {Name: "grpc-message", Value: "no%20such"}, {Name: "x-end", Value: "z"}},
	}
	d, err := http2.DecodeChecked(false, req, nil, "")
	if err != nil || fieldsOf(d) != "method=POST\npath=/grpc.testing.TestService/UnaryCall\nheader.:authority=x:1\nheader.content-type=application/grpc\nheader.x-a=1\n" {
		t.Errorf("request %v:\n%s", err, fieldsOf(d))
	}
	d, err = http2.DecodeChecked(true, resp, nil, "")
	want := "status=200\nheader.content-type=application/grpc\nmessage[0].1.2=ab\nmessage[0].2=ann\nmessage[1]={}\ntrailer.x-end=z\ngrpc-status=5\ngrpc-message=no such\n"
	if err != nil || fieldsOf(d) != want || d.Text != "200 2 messages grpc-status 5 no such" {
		t.Errorf("response %v %q:\n%s", err, d.Text, fieldsOf(d))
	}
	s, err := descriptors.Of(testpb.File_grpc_testing_test_proto)
	if err != nil {
		t.Fatal(err)
	}
	d = http2.DecodeMessage(true, resp, s, "/grpc.testing.TestService/UnaryCall")
	if !strings.Contains(fieldsOf(d), "message[0].payload.body=YWI=\nmessage[0].username=ann\n") {
		t.Errorf("by name:\n%s", fieldsOf(d))
	}
	// Trailers-only: the status from the header block, not repeated.
	only := http2.Message{Header: []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "grpc-status", Value: "14"}, {Name: "content-type", Value: "application/grpc"}}}
	if d, _ := http2.DecodeChecked(true, only, nil, ""); fieldsOf(d) != "status=200\nheader.content-type=application/grpc\ngrpc-status=14\n" {
		t.Errorf("trailers-only:\n%s", fieldsOf(d))
	}
	// gzip-compressed messages are inflated.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(simpleResponse(t, "bob"))
	zw.Close()
	gz := resp
	gz.Header = append(append([]hpack.HeaderField(nil), resp.Header...), hpack.HeaderField{Name: "grpc-encoding", Value: "gzip"})
	gz.Data = grpc.Append(nil, grpc.Message{Compressed: true, Data: z.Bytes()})
	if d, err := http2.DecodeChecked(true, gz, nil, ""); err != nil || !strings.Contains(fieldsOf(d), "message[0].2=bob\n") {
		t.Errorf("gzip %v:\n%s", err, fieldsOf(d))
	}
	// A plain HTTP/2 body.
	page := http2.Message{Header: []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/json"}}, Data: []byte(`{"a":1}`)}
	if d, err := http2.DecodeChecked(true, page, nil, ""); err != nil || fieldsOf(d) != "status=200\nheader.content-type=application/json\nbody={\"a\":1}\n" {
		t.Errorf("http2 body %v:\n%s", err, fieldsOf(d))
	}
}

// TestDecodeErrors: what does not decode is an error naming the part, and
// the protocol's Decode says false.
func TestDecodeErrors(t *testing.T) {
	h := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	for name, m := range map[string]http2.Message{
		"message[0]":  {Header: h, Data: grpc.Append(nil, grpc.Message{Data: []byte{0xff, 0xff, 0xff}})},
		"data":        {Header: h, Data: []byte{0, 0, 0, 0, 9, 1}},
		"grpc-status": {Header: h, Trailer: []hpack.HeaderField{{Name: "grpc-status", Value: "x"}}},
		"message[1]":  {Header: append(h, hpack.HeaderField{Name: "grpc-encoding", Value: "snappy"}), Data: grpc.Append(grpc.Append(nil, grpc.Message{}), grpc.Message{Compressed: true, Data: []byte("z")})},
	} {
		_, err := http2.DecodeChecked(true, m, nil, "")
		if !errors.Is(err, http2.ErrUndecodable) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
		if _, ok := http2.Protocol.Decode(wire.Server, http2.AppendMessage(nil, m, nil)); ok {
			t.Errorf("%s: Decode ok", name)
		}
	}
}

func FuzzDecodeChecked(f *testing.F) {
	resp := http2.Message{Header: []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}},
		Data: grpc.Append(nil, grpc.Message{Data: []byte{0x0a, 0x02, 0x08, 0x01, 0x12, 0x01, 'a'}}), Trailer: []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}}
	f.Add(http2.AppendMessage(nil, resp, nil), true)
	f.Add(http2.AppendMessage(nil, http2.Message{Header: []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":path", Value: "/"}}, Data: []byte{0xff}}, nil), false)
	f.Fuzz(func(t *testing.T, b []byte, response bool) {
		m, _, err := http2.ParseMessage(b)
		if err != nil {
			return
		}
		d1, err1 := http2.DecodeChecked(response, m, nil, "")
		d2, err2 := http2.DecodeChecked(response, m, nil, "")
		if fieldsOf(d1) != fieldsOf(d2) || (err1 == nil) != (err2 == nil) {
			t.Fatal("decoding is not deterministic")
		}
		if err1 != nil && !errors.Is(err1, http2.ErrUndecodable) {
			t.Fatalf("error %v does not wrap ErrUndecodable", err1)
		}
	})
}
