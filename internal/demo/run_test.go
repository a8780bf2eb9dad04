package demo

import (
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/examples/fraud"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
)

// TestGRPCCalls: a recorded fraud check is shown with its messages by
// field name; a call that is not in the recorded form says so.
func TestGRPCCalls(t *testing.T) {
	o := &fraud.Order{UserID: 15, Country: "US", Tier: "standard", TotalCents: 899, Currency: "EUR",
		Lines: []fraud.Line{{SKU: "CB-010", Qty: 1, UnitCents: 899}}}
	ob, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	vb, err := (&fraud.Verdict{Allow: true, Score: 40, Reasons: []string{"standard tier"}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f := func(n, v string) hpack.HeaderField { return hpack.HeaderField{Name: n, Value: v} }
	req := http2.AppendMessage(nil, http2.Message{Header: []hpack.HeaderField{f(":method", "POST"), f(":path", fraud.CheckMethod),
		f("content-type", "application/grpc")}, Data: grpc.Append(nil, grpc.Message{Data: ob}), End: true}, nil)
	resp := http2.AppendMessage(nil, http2.Message{Header: []hpack.HeaderField{f(":status", "200"), f("content-type", "application/grpc")},
		Data: grpc.Append(nil, grpc.Message{Data: vb}), Trailer: []hpack.HeaderField{f("grpc-status", "0")}, End: true}, nil)
	s := &recording.Session{Calls: []recording.Call{
		{Proto: "mysql", Request: []byte("x")},
		{Proto: http2.GRPCName, Request: req, Response: resp},
		{Proto: http2.GRPCName, Request: []byte("not the recorded form"), Response: resp},
	}}
	got := grpcCalls(s)
	if len(got) != 2 {
		t.Fatalf("%d lines: %q", len(got), got)
	}
	for _, want := range []string{"gRPC " + fraud.CheckMethod, "country=US", "lines[0].sku=CB-010", "user_id=15", "grpc-status 0", "allow=true", "score=40", "reasons[0]=standard tier"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("%q lacks %q", got[0], want)
		}
	}
	if !strings.Contains(got[1], "not decoded") {
		t.Errorf("%q", got[1])
	}
}
