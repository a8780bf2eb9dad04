package grpc_test

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire/grpc"
)

func TestSplit(t *testing.T) {
	var b []byte
	b = grpc.Append(b, grpc.Message{Data: []byte("one")})
	b = grpc.Append(b, grpc.Message{Compressed: true, Data: []byte{1, 2}})
	b = grpc.Append(b, grpc.Message{})
	for _, tc := range []struct {
		name  string
		in    []byte
		n     int
		rest  int
		max   int
		isErr bool
	}{
		{name: "whole", in: b, n: 3},
		{name: "cut in a prefix", in: b[:10], n: 1, rest: 2},
		{name: "cut in a body", in: b[:14], n: 1, rest: 6},
		{name: "empty", in: nil},
		{name: "bad flag", in: []byte{2, 0, 0, 0, 0}, rest: 5, isErr: true},
		{name: "too long", in: b, n: 0, rest: len(b), max: 2, isErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, rest, err := grpc.Split(tc.in, tc.max)
			if (err != nil) != tc.isErr || len(msgs) != tc.n || len(rest) != tc.rest {
				t.Fatalf("%d messages, rest %d, %v", len(msgs), len(rest), err)
			}
		})
	}
}

func TestStatusOf(t *testing.T) {
	f := func(kv ...string) []hpack.HeaderField {
		var out []hpack.HeaderField
		for i := 0; i < len(kv); i += 2 {
			out = append(out, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		header, trailer []hpack.HeaderField
		want            grpc.Status
		ok              bool
		isErr           bool
	}{
		{name: "trailer", header: f(":status", "200"), trailer: f("grpc-status", "5", "grpc-message", "no%20such%20thing"), want: grpc.Status{Code: 5, Message: "no such thing"}, ok: true},
		{name: "trailers only", header: f(":status", "200", "grpc-status", "12"), want: grpc.Status{Code: 12}, ok: true},
		{name: "none", header: f(":status", "200")},
		{name: "not a number", trailer: f("grpc-status", "x"), isErr: true},
		{name: "bad escape kept", trailer: f("grpc-status", "2", "grpc-message", "100%"), want: grpc.Status{Code: 2, Message: "100%"}, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, ok, err := grpc.StatusOf(tc.header, tc.trailer)
			if st != tc.want || ok != tc.ok || (err != nil) != tc.isErr {
				t.Fatalf("%+v %v %v", st, ok, err)
			}
		})
	}
	md := grpc.Metadata(f(":path", "/x", "content-type", "application/grpc", "x-user", "u", "grpc-timeout", "1S"))
	if len(md) != 1 || md[0].Name != "x-user" {
		t.Fatalf("metadata %v", md)
	}
}

// FuzzSplit checks that messages split whole and re-joined give the bytes
// back.
func FuzzSplit(f *testing.F) {
	f.Add(grpc.Append(grpc.Append(nil, grpc.Message{Data: []byte("abc")}), grpc.Message{Compressed: true}))
	f.Add([]byte{0, 0, 0, 0, 9, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, rest, err := grpc.Split(b, 1<<20)
		var again []byte
		for _, m := range msgs {
			again = grpc.Append(again, m)
		}
		again = append(again, rest...)
		if !bytes.Equal(again, b) {
			t.Fatalf("split (%v) and joined: %x, want %x", err, again, b)
		}
	})
}
