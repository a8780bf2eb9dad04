package diff

import "testing"

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pat, path string
		want      bool
	}{
		{"body.items[*].ts", "body.items[3].ts", true},
		{"body.items[*].ts", "body.items.ts", false},
		{"body.items[2].ts", "body.items[3].ts", false},
		{"body.items[3].ts", "body.items[3].ts", true},
		{"**.id", "body.a.b[2].id", true},
		{"**.id", "id", true},
		{"**.id", "body.idx", false},
		{"body.**", "body.a.b", true},
		{"body.**", "body", true},
		{"body.*", "body.a", true},
		{"body.*", "body[0]", true},
		{"body.*", "body.a.b", false},
		{"header.Date", "header.Date", true},
		{`body["a.b"]`, `body["a.b"]`, true},
		{`body["a.b"].c`, `body.a.b.c`, false},
		{"body.**.x.**.y", "body.q.x.r.s.y", true},
		{"body.**.x.**.y", "body.q.x.r.s.z", false},
	}
	for _, tc := range cases {
		p, err := ParsePattern(tc.pat)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tc.pat, err)
		}
		if got := p.MatchPath(tc.path); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.pat, tc.path, got, tc.want)
		}
	}
}

func TestPatternErrors(t *testing.T) {
	for _, s := range []string{"", "body.", ".body", "body..a", "body[", "body[x]", "body[-1]", "a]", "body.a*", `body["x`, `body["x"`, "body[1]x"} {
		if _, err := ParsePattern(s); err == nil {
			t.Errorf("ParsePattern(%q) succeeded, want an error", s)
		}
	}
}

func TestRenderRoundTrip(t *testing.T) {
	segs := []segment{keySeg("body"), keySeg("a.b"), idxSeg(3), keySeg(""), keySeg("*"), keySeg("x y")}
	s := renderPath(segs)
	p, err := ParsePattern(s)
	if err != nil {
		t.Fatalf("rendered %q does not parse: %v", s, err)
	}
	if !p.match(segs) {
		t.Errorf("rendered %q does not match its own segments", s)
	}
}

func TestGeneralize(t *testing.T) {
	for in, want := range map[string]string{
		"body.items[3].ts":      "body.items[*].ts",
		"body[0][12]":           "body[*][*]",
		`body["a[1]"][2]`:       `body["a[1]"][*]`,
		"cmd[1].args[2]":        "cmd[*].args[*]",
		"header.X-Request-Id":   "header.X-Request-Id",
		`body["unterminated[1]`: `body["unterminated[*]`,
	} {
		if got := Generalize(in); got != want {
			t.Errorf("Generalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGlob(t *testing.T) {
	cases := []struct {
		pat, s string
		want   bool
	}{
		{"POST /orders*", "POST /orders/{id}", true},
		{"POST /orders*", "GET /orders", false},
		{"*", "", true},
		{"a?c", "abc", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"x-*", "x-request-id", true},
	}
	for _, tc := range cases {
		if got := Glob(tc.pat, tc.s); got != tc.want {
			t.Errorf("Glob(%q, %q) = %v", tc.pat, tc.s, got)
		}
	}
}

func TestJoinMatchesRender(t *testing.T) {
	got := JoinKey(JoinIndex(JoinKey(JoinKey("", "body"), "a.b"), 2), "c")
	want := renderPath([]segment{keySeg("body"), keySeg("a.b"), idxSeg(2), keySeg("c")})
	if got != want {
		t.Errorf("JoinKey/JoinIndex built %q, renderPath %q", got, want)
	}
}
