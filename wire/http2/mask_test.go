package http2_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"

	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-dev/retrace/wire"
	grpcwire "github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

// The calls a real grpc-go client and server exchanged, recorded and
// masked by a rule that shortens every tag: each masked half parses, each
// response message unmarshals as its type with the tag masked in its
// string and bytes fields (payloads up to 70000 bytes, so protobuf
// lengths of several bytes are re-encoded), metadata by a header rule,
// the status message by the pattern, the pace on the masked messages.
func TestMaskRecordedGRPC(t *testing.T) {
	tags := make([]string, 4)
	for i := range tags {
		tags[i] = fmt.Sprintf("trace-%02d", i)
	}
	client, server := recordGRPC(t, tags).bytes()
	xs := feedSplit(t, client, server, rand.New(rand.NewPCG(1, 2)), 1<<20)
	pattern := regexp.MustCompile(`trace-0(\d)`)
	rules := func() *wiretest.Rules {
		return &wiretest.Rules{Headers: map[string]string{"x-trace": "***"},
			Patterns: []wiretest.Pattern{{Re: pattern, Repl: "T$1"}}}
	}
	m := any(http2.Protocol).(wire.Masker)
	shortened := 0
	for _, x := range xs {
		var req, resp []byte
		req = http2.AppendMessage(req, x.Request, nil)
		resp = http2.AppendMessage(resp, x.Response, x.Pace)
		r := rules()
		mreq, mresp := m.Mask(wire.Client, req, r), m.Mask(wire.Server, resp, r)
		if len(r.Skips) > 0 {
			t.Fatalf("stream %d: skipped %q", x.StreamID, r.Skips)
		}
		q, _, err := http2.ParseMessage(mreq)
		if err != nil {
			t.Fatalf("stream %d: masked request: %v", x.StreamID, err)
		}
		a, pace, err := http2.ParseMessage(mresp)
		if err != nil {
			t.Fatalf("stream %d: masked response: %v", x.StreamID, err)
		}
		if v, _ := http2.Get(q.Header, "x-trace"); v != "***" {
			t.Fatalf("stream %d: x-trace %q", x.StreamID, v)
		}
		if st, _, _ := grpcwire.StatusOf(a.Header, a.Trailer); st.Message != "" && pattern.MatchString(st.Message) {
			t.Fatalf("stream %d: status message %q", x.StreamID, st.Message)
		}
		var typ proto.Message = &testpb.StreamingOutputCallResponse{}
		switch x.Path() {
		case "/grpc.testing.TestService/UnaryCall":
			typ = &testpb.SimpleResponse{}
		case "/grpc.health.v1.Health/Check":
			continue
		}
		was, _, _ := grpcwire.Split(x.Response.Data, 0)
		now, rest, err := grpcwire.Split(a.Data, 0)
		if err != nil || len(rest) > 0 || len(now) != len(was) {
			t.Fatalf("stream %d: %d masked messages (%v), recorded %d", x.StreamID, len(now), err, len(was))
		}
		end := 0
		for i := range was {
			orig, got := typ.ProtoReflect().New().Interface(), typ.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(was[i].Data, orig); err != nil {
				t.Fatal(err)
			}
			if err := proto.Unmarshal(now[i].Data, got); err != nil {
				t.Fatalf("stream %d message %d: masked message does not unmarshal: %v", x.StreamID, i, err)
			}
			body := func(m proto.Message) []byte {
				if s, ok := m.(interface{ GetPayload() *testpb.Payload }); ok {
					return s.GetPayload().GetBody()
				}
				return nil
			}
			want := pattern.ReplaceAll(body(orig), []byte("T$1"))
			if !bytes.Equal(body(got), want) {
				t.Fatalf("stream %d message %d: body of %d bytes, want %d", x.StreamID, i, len(body(got)), len(want))
			}
			if len(want) < len(body(orig)) {
				shortened++
			}
			end += 5 + len(now[i].Data)
			if len(pace) > 0 && !containsResp(pace, end) && i == len(was)-1 {
				t.Fatalf("stream %d: pace %v does not end at %d", x.StreamID, pace, end)
			}
		}
	}
	if shortened < 4*len(tags) {
		t.Fatalf("%d messages shortened by masking", shortened)
	}
}

func containsResp(pace []http2.Mark, n int) bool {
	for _, p := range pace {
		if p.Response == n {
			return true
		}
	}
	return false
}
