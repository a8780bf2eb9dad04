package diff

import (
	"github.com/retrace-dev/retrace/wire/http1"
	"testing"
)

func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"body.items[*].ts", "**.id", `body["a.b"][3]`, "body.", "a[", "*.**.*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePattern(s)
		if err != nil {
			return
		}
		// A pattern without wildcards is a path, and matches itself.
		lit := make([]segment, 0, len(p.segs))
		for _, ps := range p.segs {
			switch ps.kind {
			case patKey:
				lit = append(lit, keySeg(ps.key))
			case patIndex:
				lit = append(lit, idxSeg(ps.index))
			default:
				return
			}
		}
		r := renderPath(lit)
		q, err := ParsePattern(r)
		if err != nil {
			t.Fatalf("rendered path %q of %q does not parse: %v", r, s, err)
		}
		if !q.match(lit) || !p.match(lit) {
			t.Fatalf("%q (rendered %q) does not match itself", s, r)
		}
	})
}

func FuzzParseRules(f *testing.F) {
	f.Add([]byte(`{"version":1,"rules":[{"ignore":"body.ts"},{"unordered":"body.x","key":"k"},{"tolerance":"a","abs":1}]}`))
	f.Add([]byte(`{"version":1,"rules":[{"igonre":"x"}]}`))
	f.Add([]byte(`{"version":1,`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRules("f", data)
		if err != nil {
			return
		}
		// Whatever parsed compiles again from its own list.
		if _, err := NewRules(r.List()...); err != nil {
			t.Fatalf("parsed rules do not recompile: %v", err)
		}
	})
}

func FuzzCompareResponses(f *testing.F) {
	f.Add(resp(200, "Content-Type: application/json\r\n", `{"a":[1,{"b":"c"}],"d":1.5}`), resp(200, "", `{"a":[2]}`))
	f.Add(chunked(`[1,2,3]`), resp(404, "", "nope"))
	f.Add(resp(200, "Content-Encoding: gzip\r\n", gz("hello")), resp(200, "", "hello"))
	rules, _ := NewRules(Rule{Unordered: "body.a"}, Rule{Ignore: "**.b"}, Rule{Tolerance: "body.d", Abs: 1})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		w, err := http1.ParseResponse(a, "GET")
		if err != nil {
			return
		}
		if ds := rules.CompareResponses("x", w, w); len(ds) != 0 {
			t.Fatalf("a response differs from itself: %v", ds)
		}
		g, err := http1.ParseResponse(b, "GET")
		if err != nil {
			return
		}
		rules.CompareResponses("x", w, g)
	})
}

func FuzzCompareCalls(f *testing.F) {
	f.Add("redis", []byte(redisCmd("SET", "a", "b")), []byte(redisCmd("SET", "a", "c")+redisCmd("GET", "a")))
	f.Add("mysql", []byte(mysqlPacket(3, "SELECT 1")), []byte(mysqlPacket(3, "SELECT  2")))
	f.Add("http", []byte(httpReq("POST", "/", "", `{"a":1}`)), []byte(httpReq("POST", "/", "", `{"a":2}`)))
	f.Add("raw", []byte("x"), []byte("y"))
	f.Add("mysql", []byte(mysqlPacket(0x17, execute(7, "DE"))), []byte(mysqlPacket(0x19, "\x01\x00\x00\x00")+mysqlPacket(0x17, execute(8, "FR"))))
	f.Fuzz(func(t *testing.T, proto string, a, b []byte) {
		var r *Rules
		if ds := r.CompareCalls("x", proto, "d:1", a, a); len(ds) != 0 {
			t.Fatalf("a call differs from itself: %v", ds)
		}
		r.CompareCalls("x", proto, "d:1", a, b)
	})
}
