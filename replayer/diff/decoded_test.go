package diff

import (
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/wire"
)

func dec(kv ...string) wire.Decoded {
	var d wire.Decoded
	for i := 0; i+1 < len(kv); i += 2 {
		d.Fields = append(d.Fields, wire.Field{Path: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestCompareDecoded(t *testing.T) {
	base := []string{"status", "200", "header.content-type", "application/grpc", "header.date", "x",
		"message[0].items[0].sku", "a", "message[0].items[0].qty", "1", "message[0].items[1].sku", "b", "message[0].items[1].qty", "2",
		"message[0].total", "10.5", "trailer.x-id", "7", "grpc-status", "0"}
	with := func(path, value string) []string {
		out := append([]string(nil), base...)
		for i := 0; i < len(out); i += 2 {
			if out[i] == path {
				if value == "" {
					return append(out[:i:i], out[i+2:]...)
				}
				out[i+1] = value
				return out
			}
		}
		return append(out, path, value)
	}
	swapped := with("message[0].items[0].sku", "b")
	for i := 0; i < len(swapped); i += 2 {
		switch swapped[i] {
		case "message[0].items[0].qty":
			swapped[i+1] = "2"
		case "message[0].items[1].sku":
			swapped[i+1] = "a"
		case "message[0].items[1].qty":
			swapped[i+1] = "1"
		}
	}
	cases := []struct {
		name  string
		rules []Rule
		got   []string
		want  string
	}{
		{"same", nil, base, ""},
		{"date header ignored by default", nil, with("header.date", "y"), ""},
		{"field", nil, with("message[0].items[1].qty", "3"), "message[0].items[1].qty changed: 2 → 3"},
		{"field ignored", []Rule{{Ignore: "message[*].items[*].qty"}}, with("message[0].items[1].qty", "3"), ""},
		{"status", nil, with("grpc-status", "13"), "grpc-status changed: 0 → 13"},
		{"trailer", nil, with("trailer.x-id", "8"), "trailer.x-id changed: 7 → 8"},
		{"trailer ignored as a header", []Rule{{IgnoreHeader: "x-id"}}, with("trailer.x-id", "8"), ""},
		{"added field", nil, with("message[0].note", "hi"), "message[0].note added: hi"},
		{"removed message", nil, append(with("message[0].total", ""), "message[1]", "{}"), "message[0].total removed: 10.5, message[1] added: {}"},
		{"tolerance", []Rule{{Tolerance: "message[0].total", Abs: 0.5}}, with("message[0].total", "10.9"), ""},
		{"beyond tolerance", []Rule{{Tolerance: "message[0].total", Abs: 0.1}}, with("message[0].total", "10.9"), "message[0].total changed: 10.5 → 10.9"},
		{"unordered by key", []Rule{{Unordered: "message[0].items", Key: "sku"}}, swapped, ""},
		{"ordered", nil, swapped, "message[0].items[0].qty changed: 1 → 2, message[0].items[0].sku changed: a → b, " +
			"message[0].items[1].qty changed: 2 → 1, message[0].items[1].sku changed: b → a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRules(t, tc.rules...)
			got := tc.got
			ds := r.CompareDecoded("POST /x", ScopeResponse, "", dec(base...), dec(got...))
			var s []string
			for _, d := range ds {
				s = append(s, d.String())
			}
			if strings.Join(s, ", ") != tc.want {
				t.Errorf("got %q\nwant %q", strings.Join(s, ", "), tc.want)
			}
		})
	}
}

func FuzzCompareDecoded(f *testing.F) {
	f.Add("message[0].a.b", "1", "header.x", "y", "message[0][\"a.b\"]", "z")
	f.Add("body", `{"a":[1,2]}`, "body.x", "2", "cmd[1].args[0]", "GET")
	f.Fuzz(func(t *testing.T, p1, v1, p2, v2, p3, v3 string) {
		d := dec(p1, v1, p2, v2, p3, v3)
		var r *Rules
		if ds := r.CompareDecoded("x", ScopeDownstream, "d:1", d, d); len(ds) != 0 {
			t.Fatalf("%v differs from itself: %v", d, ds)
		}
		r.CompareDecoded("x", ScopeDownstream, "d:1", d, dec(p2, v2, p1, v3))
	})
}
